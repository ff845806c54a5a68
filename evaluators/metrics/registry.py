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
LeRF), stating each fixed option and the direction once. ``register_function`` registers a
functional core alone (the localisation and axiomatic metrics): its Metric, a
``FunctionMetric``, passes the core what its signature names of ``model``, ``x``, ``target``,
``explain_fn`` and ``truth`` (a ground truth: ``needs`` holds ``"truth"``; ``score(...,
truth=...)``, ``update(..., truth=...)``), and the Metric's options are the core's keyword
options."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from evaluators.metrics.base import MeanOverInputs
from foundation.registry import ALL_MODALITIES, Registry

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


class FunctionMetric(MeanOverInputs):
    """The mean over inputs of ``function``'s per-input scores (NaN where undefined: counted in
    ``left_out``); keyword options of ``function`` are its options, any other keyword goes to
    torchmetrics' ``Metric``."""

    leaves_out_undefined = True
    function: Callable  # the functional core, set by register_function

    def __init__(self, **options) -> None:
        names = inspect.signature(self.function).parameters
        super().__init__({k: v for k, v in options.items() if k in names},
                         **{k: v for k, v in options.items() if k not in names})  # fmt: skip

    def scores(self, model, x, maps, target, explain_fn, truth=None) -> torch.Tensor:
        given = {"model": model, "x": x, "target": target, "explain_fn": explain_fn, "truth": truth}
        names = inspect.signature(self.function).parameters
        return self.function(maps=maps, **{k: v for k, v in given.items() if k in names}, **self.options)


def register_function(name: str, function: Callable, higher_is_better: bool, needs: tuple[str, ...],
                      modalities: tuple[str, ...] = ALL_MODALITIES) -> type:  # fmt: skip
    """Registers the functional core ``function(maps, ..., **options) -> (N,)`` as metric
    ``name`` through a ``FunctionMetric`` of it; the entry's defaults are the core's keyword
    defaults, its help the first sentence of the core's docstring. Returns the Metric class."""
    parameters = inspect.signature(function).parameters.values()
    defaults = {p.name: p.default for p in parameters if p.default is not p.empty and p.name not in ("target", "truth")}
    cls = type(f"{function.__name__}_metric", (FunctionMetric,), {
        "function": staticmethod(function), "higher_is_better": higher_is_better, "__doc__": function.__doc__,
        "__module__": function.__module__})  # fmt: skip
    METRICS.add(name, cls, needs=needs, higher_is_better=higher_is_better, defaults=defaults, function=function,
                modalities=modalities)  # fmt: skip
    return cls


def score(name: str, model, x: torch.Tensor, maps: torch.Tensor, target=None, explain_fn: Callable | None = None,
          truth: torch.Tensor | None = None, **options) -> torch.Tensor:  # fmt: skip
    """Per-input scores (N, ...) of metric ``name`` with the options of its Metric: an AUC,
    an infidelity, a correlation (NaN where undefined), SENS_AVG or SENS_MAX, a ROAD curve
    (N, P), the relative stabilities (N, 3) (RIS, RRS, ROS; NaN where every sample flipped), a
    sparseness or complexity (NaN for an all-zero map). A metric that needs only ``maps`` takes
    ``model=None`` (and ``x=None``: its maps' shape then goes unchecked against inputs); one that
    needs ``truth`` (the localisation metrics) takes the ground truth as ``truth``."""
    inputs = {} if truth is None else {"truth": truth}
    return METRICS[name].obj(**options).scores(model, x, maps, target, explain_fn, **inputs)
