"""The aggregator registry: ``AGGREGATORS`` (a ``foundation.registry.Registry``), pixel (Mahlau &
Nolde) and optimised (Decker et al.) alike (docs/aggregation.md, docs/optimised_aggregation.md),
filled where each aggregator is defined: ``@AGGREGATORS.register(name, kind="pixel",
needs=("maps",))`` on ``function(stack, map_dims, **options)`` merging a stack (k, N, *S) of
normalised maps into (N, *S), or ``kind="optimised", needs=("model", "x", "explainers")`` on
``function(model, x, target, explainers, **options)`` -> maps (N, *S) and weights (N, k) or
None. The package's ``__init__`` imports both modules, so importing this module gives the full
registry; ``AGGREGATORS.names(kind="pixel")`` lists one kind. The checked entry points are
``pixel_aggregators.aggregate(stack, name, map_dims, **options)`` and
``optimised_aggregators.optimised_aggregation(model, x, name, explainers, target, **options)``."""

from __future__ import annotations

from foundation.registry import Registry

AGGREGATORS = Registry("aggregator", page="aggregation.md")
