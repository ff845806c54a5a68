"""The aggregator registry: ``AGGREGATORS``, one :class:`Aggregator` spec per name, pixel
(Mahlau & Nolde) and optimised (Decker et al.) alike (docs/aggregation.md,
docs/optimised_aggregation.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from foundation.errors import InputError
from evaluators.aggregators import optimised_aggregators as optimised
from evaluators.aggregators import pixel_aggregators as pixel


@dataclass(frozen=True)
class Aggregator:
    """One aggregator: ``kind`` "pixel" (``function(stack, map_dims, **options)`` merges a
    stack (k, N, *S) of normalised maps into (N, *S)) or "optimised" (``function(model, x,
    target, explainers, **options)`` -> maps (N, *S) and weights (N, k) or None);
    ``run``, the checked entry point: ``run(stack, map_dims=2, **options)`` or ``run(model,
    x, explainers, target=None, **options)``; ``needs``: what it reads."""

    kind: str
    function: Callable
    run: Callable
    needs: tuple[str, ...]


def _run_pixel(name: str, stack, map_dims: int = 2, **options):
    return pixel.aggregate(stack, name, map_dims, **options)


def _run_optimised(name: str, model, x, explainers: dict, target=None, **options):
    return optimised.optimised_aggregation(model, x, name, explainers, target, **options)


KINDS = {"pixel": (pixel.PIXEL_AGGREGATORS, _run_pixel, ("maps",)),  # kind -> its table, run, needs
         "optimised": (optimised.OPTIMISED_AGGREGATORS, _run_optimised, ("model", "x", "explainers"))}


def register(name: str, function: Callable, kind: str = "pixel") -> None:
    """Adds aggregator ``name`` of ``kind`` (the spec's ``function``) to ``AGGREGATORS`` and to
    its kind's table, where ``aggregate`` and ROAR's estimators find it."""
    table, run, needs = KINDS[kind]
    table[name] = function
    AGGREGATORS[name] = Aggregator(kind, function, partial(run, name), needs)


AGGREGATORS: dict[str, Aggregator] = {}
for _kind, (_table, _, _) in KINDS.items():
    for _name, _function in list(_table.items()):
        register(_name, _function, _kind)


def aggregator_names(kind: str | None = None) -> list[str]:
    """The registered names, of one ``kind`` ("pixel", "optimised") or all."""
    return [name for name, spec in AGGREGATORS.items() if kind in (None, spec.kind)]


def aggregator(name: str) -> Aggregator:
    """``AGGREGATORS[name]``; an unknown name is refused, naming the choices."""
    if name not in AGGREGATORS:
        raise InputError(f"unknown aggregator {name!r}; expected one of {list(AGGREGATORS)}")
    return AGGREGATORS[name]
