"""Aggregates of the explainers' maps, scored beside the explainers (the faithfulness section's
"best aggregator"), from the maps each member already has (no model is explained again).

For member m with φ_m^e (N, *S) the maps of explainer e (``maps.explainer_unit``; S: (d,) for
rows, (H, W) for images), each map is normalised (``normalisation``; z-scores by default,
Mahlau & Nolde's Table 1, ``evaluators.aggregators.normalisations``), the E explainers' maps
stacked (E, N, *S) and merged by each pixel aggregator a of ``aggregators`` (``AGGREGATORS``
of kind "pixel", e.g. ``mean``: the mean of the normalised maps, ``ucb``: μ + ε σ, ``var``:
μ / (ε σ + δ); ``pixel_aggregators.aggregate_all``) into the aggregate map A_m^a (N, *S),
named ``aggregate:<a>``. The same is done with the randomised maps (every layer re-initialised)
and, when a permuted-label population is given, its maps, so that each aggregate gets the
calibrated verdicts of an explainer (``verdict``, ``permuted``).

Each member scores its own aggregate maps with the faithfulness metrics (``maps.
faithfulness_scores``), so the aggregates enter the faithfulness section's seed-level
intervals, rankings and bootstrap (``sections.faithfulness``) as candidates beside the
explainers; their agreement across seeds (SA/SSA/CDC@k, ``sections.agreement``) is given too.
The optimised aggregators (Decker et al.) explain the model again and are not taken.
"""

from __future__ import annotations

import torch

from evaluators.aggregators.pixel_aggregators import aggregate_all
from evaluators.reports.reliability.config import ReportConfig
from evaluators.reports.reliability.inputs import ReportInputs
from evaluators.reports.reliability.maps import faithfulness_scores
from evaluators.reports.reliability.permuted import data_verdict
from evaluators.reports.reliability.sections import agreement
from evaluators.reports.reliability.verdict import calibrated_verdict

PREFIX = "aggregate:"


def aggregate_maps(maps: dict[str, torch.Tensor], normalisation: str, aggregators: dict[str, dict],
                   map_dims: int) -> dict[str, torch.Tensor]:  # fmt: skip
    """Explainer -> (M, N, *S) maps to ``aggregate:<a>`` -> (M, N, *S), member by member (the
    module docstring)."""
    n_members = next(iter(maps.values())).shape[0]
    merged = [aggregate_all({e: v[i] for e, v in maps.items()}, normalisation, aggregators, map_dims)
              for i in range(n_members)]  # fmt: skip
    return {PREFIX + a: torch.stack([m[a] for m in merged]) for a in aggregators}


def aggregate_units(cfg: ReportConfig, given: ReportInputs, units: dict[str, dict],
                    permuted: dict[str, torch.Tensor]) -> dict[str, dict]:  # fmt: skip
    """Per aggregate its ``maps``, ``randomised`` and ``permuted`` maps (None without a
    permuted population) and each member's ``faithfulness`` scores; empty with fewer than two
    explainers or no aggregator."""
    if len(units) < 2 or not cfg.aggregators:
        return {}
    map_dims = given.modality.map_dims
    kinds = {"maps": {e: u["maps"] for e, u in units.items()},
             "randomised": {e: u["randomised"] for e, u in units.items()}}
    if permuted:
        kinds["permuted"] = permuted
    merged = {kind: aggregate_maps(maps, cfg.normalisation, cfg.aggregators, map_dims) for kind, maps in kinds.items()}
    out = {}
    for name, maps in merged["maps"].items():
        scores = [faithfulness_scores(member, given.x, given.target, maps[i], cfg.faithfulness, given.metric_options)
                  for i, member in enumerate(given.members)]  # fmt: skip
        out[name] = {"maps": maps, "randomised": merged["randomised"][name],
                     "permuted": merged["permuted"][name] if permuted else None,
                     "faithfulness": {m: torch.tensor([s[m] for s in scores], dtype=torch.float64)
                                      for m in cfg.faithfulness}}  # fmt: skip
    return out


def aggregate_section(cfg: ReportConfig, aggregates: dict[str, dict], k: int, kept: list[int],
                      explainers: list[str]) -> dict:  # fmt: skip
    """The aggregates' part of the faithfulness section: what was merged and how, and per
    aggregate its agreement (SA/SSA/CDC@k), its calibrated verdict and, with a permuted
    population, its data-randomisation verdict."""
    if not aggregates:
        why = "fewer than two explainers" if len(explainers) < 2 else "option aggregators is empty"
        return {"available": False, "why": why}
    shared = agreement({n: {"maps": a["maps"]} for n, a in aggregates.items()}, k, False, cfg.seed)["explainers"]
    out = {}
    for name, unit in aggregates.items():
        out[name] = {"agreement": shared[name],
                     "verdict": calibrated_verdict(unit["maps"], unit["randomised"], cfg.measure, kept, name),
                     "data_randomisation": None if unit["permuted"] is None
                     else data_verdict(unit["maps"], unit["permuted"], cfg.measure, kept, name)}  # fmt: skip
    return {"available": True, "normalisation": cfg.normalisation, "of": explainers,
            "options": {a: p or {} for a, p in cfg.aggregators.items()}, "aggregates": out}  # fmt: skip
