"""The fidelity metric registry: ``METRICS`` (a ``foundation.registry.Registry``), filled where
each metric's Metric class is defined (``@METRICS.register(name, needs=..., higher_is_better=...,
function=..., fixed=...)``; the package's ``__init__`` imports every metric module, so importing
this module gives the full registry), read by the aggregation protocols and callbacks
(docs/fidelity_metrics.md).

An entry's ``obj`` is the Metric averaging the per-input scores over inputs; ``function`` its
functional core (its own signature, with ``fixed``, the options this name fixes: the insertion
mode, the ROAD order; none unless given); ``needs`` what scoring reads: ``model``, ``maps``, ``explain_fn`` (the
metric explains perturbed inputs); a metric that needs only ``maps`` (sparseness, complexity) is
scored with ``model=None``; ``higher_is_better`` its direction. ``score(name, model, x, maps,
target=None, explain_fn=None, **options)`` is every metric's per-input scores through one
signature, the scores whose mean over inputs the Metric accumulates. ``register_variant`` registers
a Metric that fixes options of a shared functional core (insertion and deletion, ROAD's MoRF and
LeRF), stating each fixed option and the direction once."""

from __future__ import annotations

from collections.abc import Callable

import torch

from foundation.registry import Registry

METRICS = Registry("metric", page="fidelity_metrics.md", traits={"fixed": {}})


def register_variant(name: str, function: Callable, higher_is_better: bool, **fixed) -> Callable[[type], type]:
    """A decorator registering a Metric class as ``name``: the variant of the functional core
    ``function`` (scored from a model and maps) that fixes the options ``fixed`` (the insertion
    mode, the ROAD order), of direction ``higher_is_better``. Each is stated once: they become the
    entry's traits and the class's attributes of the same names (which its base class reads)."""

    def decorator(cls: type) -> type:
        for key, value in {**fixed, "higher_is_better": higher_is_better}.items():
            setattr(cls, key, value)
        return METRICS.register(name, needs=("model", "maps"), higher_is_better=higher_is_better,
                                function=function, fixed=fixed)(cls)  # fmt: skip

    return decorator


def score(name: str, model, x: torch.Tensor, maps: torch.Tensor, target=None, explain_fn: Callable | None = None,
          **options) -> torch.Tensor:  # fmt: skip
    """Per-input scores (N, ...) of metric ``name`` with the options of its Metric: an AUC,
    an infidelity, a correlation (NaN where undefined), SENS_AVG or SENS_MAX, a ROAD curve
    (N, P), the relative stabilities (N, 3) (RIS, RRS, ROS; NaN where every sample flipped), a
    sparseness or complexity (NaN for an all-zero map). A metric that needs only ``maps`` takes
    ``model=None`` (and ``x=None``: its maps' shape then goes unchecked against inputs)."""
    return METRICS[name].obj(**options).scores(model, x, maps, target, explain_fn)
