"""The protocols ``evaluate.py`` runs from a config, one sub-command each: ``PROTOCOLS[name]``.

An entry names its config class (read by ``evaluators.inputs.config.load_config``), the
function that evaluates it (``evaluate(cfg, run_dir, **options)`` when ``resumable``, else
``evaluate(cfg)``; ``None`` back: nothing to report yet) and the one that writes its report
into the run folder. A new protocol is one entry here. ``default_configs``: the config a
population protocol takes when ``--config`` is not given, by the kind of its ``--population``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, NamedTuple

from evaluators.protocols.aggregation import AggregationConfig, evaluate_aggregation, write_aggregation_report
from evaluators.protocols.data_randomisation import (
    DataRandomisationConfig, evaluate_data_randomisation, write_data_randomisation_report,
)  # fmt: skip
from evaluators.protocols.consistency import ConsistencyConfig, evaluate_consistency, write_consistency_report
from evaluators.protocols.landscape import LandscapeConfig, evaluate_landscape, write_landscape_report
from evaluators.protocols.optimised_aggregation import (
    OptimisedAggregationConfig, evaluate_optimised, write_optimised_report,
)  # fmt: skip
from evaluators.protocols.roar.grid import parse_shard
from evaluators.protocols.roar.protocol import RoarConfig, evaluate_roar, grid_report_dir, write_roar_report
from evaluators.protocols.sanity import SanityConfig, evaluate_sanity, write_sanity_report
from evaluators.protocols.sigma_ablation import SigmaAblationConfig, evaluate_sigma, write_sigma_report
from evaluators.reports.reliability.config import DEFAULT_CONFIGS, ReportConfig
from evaluators.reports.reliability.protocol import REPORT, evaluate_report, write_report


class Protocol(NamedTuple):
    help: str
    config: type
    evaluate: Callable
    write: Callable
    report: str  # the file whose presence marks a finished run
    has_sets: bool  # whether --n_sets applies
    resumable: bool  # evaluate(cfg, run_dir) keeps its finished work in run_dir
    # what it evaluates (evaluate.py's model options map onto its config): "population" (a config
    # of PopulationSource), "run" (ModelSource's run: one model or a population, each member evaluated),
    # "model" (ModelSource's run, one model only) or "pair" (two runs named in its config only)
    source: str = "population"
    options: dict[str, dict] | None = None  # its own options: name -> add_argument's keywords, passed to evaluate
    report_dir: Callable[..., Path] | None = None  # cfg -> its run folder (None: a new folder per run)
    default_configs: dict[str, str] | None = None  # a population's kind -> the config taken without --config


CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TABLE_DEFAULT = str(CONFIGS / "consistency" / "table.yaml")  # the generic table config (any CSVDataModule run)


PROTOCOLS = {
    "landscape": Protocol("ensembles over the loss landscape (Ley et al.)", LandscapeConfig,
                          evaluate_landscape, write_landscape_report, "landscape.json", True, False),
    "sigma": Protocol("sigma ablation of perturbed models (Ley et al., Fig. 4-5)", SigmaAblationConfig,
                      evaluate_sigma, write_sigma_report, "sigma_ablation.json", False, False),
    "consistency": Protocol("Ley et al.'s consistency protocol (Table 1, Figure 6)", ConsistencyConfig,
                            evaluate_consistency, write_consistency_report, "consistency.json", True, True,
                            default_configs={"tabular population": TABLE_DEFAULT,
                                             "tabular network population": TABLE_DEFAULT}),
    "aggregation": Protocol("pixel-level aggregation of explanations, insertion and deletion (Mahlau & Nolde)",
                            AggregationConfig, evaluate_aggregation, write_aggregation_report, "aggregation.json",
                            False, True, "run"),
    "optimised": Protocol("optimised aggregation of explainers: infidelity and sensitivity (Decker et al.)",
                          OptimisedAggregationConfig, evaluate_optimised, write_optimised_report,
                          "optimised_aggregation.json", False, True, "run"),
    "roar": Protocol("remove and retrain: accuracy of models retrained without each estimator's top pixels "
                     "(Hooker et al.)", RoarConfig, evaluate_roar, write_roar_report, "roar.json", False, True, "model",
                     {"shard": dict(type=parse_shard, default=None, metavar="i/k", help="run cells i, i+k, ... only "
                                    "(SLURM arrays); the last shard writes the report"),
                      "rankings_only": dict(action="store_true", help="image data: only the sharded, resumable map "
                                            "pass storing each image's ranking (evaluators/protocols/roar/"
                                            "rankings.py), shard files i, i+k, ... with --shard; no cell is trained"),
                      "rankings_shard_size": dict(type=int, default=256, metavar="N",
                                                  help="images per ranking shard file (--rankings_only)")},
                     grid_report_dir),
    "sanity": Protocol("model-randomisation sanity check of explainers and the random-logit test (Adebayo et al.)",
                       SanityConfig, evaluate_sanity, write_sanity_report, "sanity.json", False, True, "run"),
    "data_randomisation": Protocol("data randomisation: maps of models trained on true vs permuted labels "
                                   "(Adebayo et al. §3.2)", DataRandomisationConfig, evaluate_data_randomisation,
                                   write_data_randomisation_report, "data_randomisation.json", False, False, "pair"),
    "report": Protocol("can I trust these explanations? agreement, calibrated sanity and faithfulness in one page "
                       "(docs/trust.md)", ReportConfig, evaluate_report, write_report, REPORT, False, True,
                       default_configs=DEFAULT_CONFIGS),
}  # fmt: skip
