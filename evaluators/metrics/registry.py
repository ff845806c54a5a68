"""The fidelity metric registry: ``METRICS``, one :class:`MetricSpec` per name, read by the
aggregation protocols and callbacks (docs/fidelity_metrics.md). ``score(name, model, x, maps,
target=None, explain_fn=None, **options)`` is every metric's per-input scores through one
signature, the scores whose mean over inputs the spec's Metric accumulates."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from evaluators.metrics.base import MeanOverInputs
from evaluators.metrics.complexity import Complexity, Sparseness, complexity, sparseness
from evaluators.metrics.faithfulness_correlation import FaithfulnessCorrelation, faithfulness_correlation
from evaluators.metrics.infidelity import Infidelity, infidelity
from evaluators.metrics.insertion_deletion import DeletionAUC, InsertionAUC, insertion_deletion_curves
from evaluators.metrics.relative_stability import RelativeStability, relative_stability
from evaluators.metrics.road import ROADLeRF, ROADMoRF, road_curves
from evaluators.metrics.sensitivity import AverageSensitivity, MaxSensitivity, sensitivities
from foundation.errors import InputError


@dataclass(frozen=True)
class MetricSpec:
    """One metric: ``function``, its functional core (its own signature, with ``fixed``, the
    options this name fixes: the insertion mode, the ROAD order); ``metric``, the Metric
    averaging its per-input scores over inputs; ``needs``, what scoring reads: ``model``,
    ``maps``, ``explain_fn`` (the metric explains perturbed inputs); a metric that needs only
    ``maps`` (sparseness, complexity) is scored with ``model=None``."""

    function: Callable
    metric: type[MeanOverInputs]
    needs: tuple[str, ...] = ("model", "maps")
    fixed: dict = field(default_factory=dict)

    @property
    def higher_is_better(self) -> bool:
        return self.metric.higher_is_better


METRICS: dict[str, MetricSpec] = {
    "insertion": MetricSpec(insertion_deletion_curves, InsertionAUC, fixed={"mode": "insertion"}),
    "deletion": MetricSpec(insertion_deletion_curves, DeletionAUC, fixed={"mode": "deletion"}),
    "infidelity": MetricSpec(infidelity, Infidelity),
    "fcor": MetricSpec(faithfulness_correlation, FaithfulnessCorrelation),
    "sens_avg": MetricSpec(sensitivities, AverageSensitivity, ("maps", "explain_fn")),
    "sens_max": MetricSpec(sensitivities, MaxSensitivity, ("maps", "explain_fn")),
    "road_morf": MetricSpec(road_curves, ROADMoRF, fixed={"order": "morf"}),
    "road_lerf": MetricSpec(road_curves, ROADLeRF, fixed={"order": "lerf"}),
    "relative_stability": MetricSpec(relative_stability, RelativeStability, ("model", "maps", "explain_fn")),
    "sparseness": MetricSpec(sparseness, Sparseness, ("maps",)),
    "complexity": MetricSpec(complexity, Complexity, ("maps",)),
}


def metric_spec(name: str) -> MetricSpec:
    """``METRICS[name]``; an unknown name is refused, naming the choices."""
    if name not in METRICS:
        raise InputError(f"unknown metric {name!r}; expected one of {list(METRICS)}")
    return METRICS[name]


def score(name: str, model, x: torch.Tensor, maps: torch.Tensor, target=None, explain_fn: Callable | None = None,
          **options) -> torch.Tensor:  # fmt: skip
    """Per-input scores (N, ...) of metric ``name`` with the options of its Metric: an AUC,
    an infidelity, a correlation (NaN where undefined), SENS_AVG or SENS_MAX, a ROAD curve
    (N, P), the relative stabilities (N, 3) (RIS, RRS, ROS; NaN where every sample flipped), a
    sparseness or complexity (NaN for an all-zero map). A metric that needs only ``maps`` takes
    ``model=None`` (and ``x=None``: its maps' shape then goes unchecked against inputs)."""
    return metric_spec(name).metric(**options).scores(model, x, maps, target, explain_fn)
