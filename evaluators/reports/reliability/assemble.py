"""The report's sections with everything they hold, from the explainers' units
(``maps.explainer_unit``): ``report_sections`` puts together

* ``agreement`` (``sections.agreement``) with its ``ensembles`` (``ensembles``);
* ``sanity`` (``sections.sanity``) with its ``data_randomisation`` (``permuted``; None without a
  permuted-label population, given or trained on request);
* ``faithfulness`` (``sections.faithfulness``) over the explainers and the aggregates of their
  maps (``aggregates``), with the aggregates' own agreement and verdicts under ``aggregates``;
* ``truth`` (``truth.truth_section``): the candidates against the data's ground truth, where
  the data know it.

It returns the sections and every candidate's unit (explainers and aggregates) for the
recommendation (``summary.recommendation``).
"""

from __future__ import annotations

from pathlib import Path

from evaluators.reports.reliability.aggregates import aggregate_section, aggregate_units
from evaluators.reports.reliability.config import ReportConfig
from evaluators.reports.reliability.ensembles import ensemble_agreement
from evaluators.reports.reliability.inputs import ReportInputs
from evaluators.reports.reliability.permuted import data_randomisation
from evaluators.reports.reliability.sections import agreement, faithfulness, sanity
from evaluators.reports.reliability.truth import truth_section


def report_sections(cfg: ReportConfig, given: ReportInputs, units: dict[str, dict], k: int, kept: list[int],
                    filtered: bool, folder: Path, source: str | None) -> tuple[dict, dict[str, dict]]:  # fmt: skip
    """The sections (the module docstring) and the candidates' units; ``folder``: the report's
    ``maps`` folder (the permuted members' maps are kept in its ``permuted`` folder);
    ``source``: the permuted-label population (``permuted.permuted_source``; None: none)."""
    data, permuted = data_randomisation(cfg, source, given, units, kept, folder / "permuted")
    aggregates = aggregate_units(cfg, given, units, permuted)
    candidates = units | aggregates
    sections = {"agreement": agreement(units, k, cfg.watson_c, cfg.seed)
                | {"ensembles": ensemble_agreement(units, k, cfg.ensemble_size, cfg.seed)},
                "sanity": sanity(units, cfg.measure, kept, filtered) | {"data_randomisation": data},
                "faithfulness": faithfulness(candidates, cfg.faithfulness, cfg.n_bootstrap, cfg.seed)
                | {"aggregates": aggregate_section(cfg, aggregates, k, kept, list(units))}}  # fmt: skip
    sections["truth"] = truth_section(candidates, given.truth, given.modality, k, sections["faithfulness"])
    return sections, candidates
