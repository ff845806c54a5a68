"""The explainer registry, ``EXPLAINERS`` (``foundation.registry``; docs/explainers.md).

Each method is one function, registered at its definition::

    @EXPLAINERS.register("saliency", linear=True)
    def saliency(model, x, target, max_batch, **options): ...

``run(model, x, target, max_batch, **draws, **options)``: the maps (shaped like ``x``) of
``model``'s output column ``target`` (N,) per input, ``model`` mapping inputs (N, ...) to
class scores (N, K) (the model adapters, ``evaluators.maps.adapters``, make every model kind
such a function), at most ``max_batch`` rows per forward pass. Traits of an explainer:

* ``modalities``: ``("rows",)`` (N, d), ``("images",)`` (N, C, H, W) or both (default; inputs of
  any other shape go only to such methods);
* ``needs``: ``("baselines",)`` where option ``baselines`` is required;
* ``defaults``: its documented options (the function's own keyword defaults);
* ``draws``: ``"per_input"`` (keyword ``seeds``: input i's samples from its own seed, so a map
  does not depend on the other inputs of a call), ``"seed"`` (keyword ``seed``: RISE's masks,
  shared by all inputs) or None;
* ``rows_per_input(options)``: rows one input becomes in a forward pass (sizes the chunks);
* ``interleave(options)``: of those, the rows each input becomes *consecutively* (its samples;
  DeepSHAP's background pairs); the rest come as whole copies of the batch stacked (DeepLift's
  references, IG's steps);
* ``members``: ``"batch"`` where every forward pass keeps whole member-major blocks (so a
  stacked population is explained in one call, ``adapters.PopulationAsBatch``), ``"each"``
  where a population goes member by member (one Captum call per input: LIME, KernelSHAP);
* ``linear``: linear in the explained function (an ensemble's maps are the weighted sum of its
  parts' maps, ``adapters``);
* ``hooks``: acts through Captum's hooks on ``nn.ReLU`` modules (``hooks.hookable``);
* ``definition``: the version of the method's maps (default 1): 2 for the methods whose draws
  became per input with issue 42 (before, a table model's call drew one seed for all its
  inputs). Caches write it with the maps they keep, and a kept map of another version (a file
  without it: version 1) is computed again (``outdated``); deterministic methods stay at 1, as
  their maps did not change.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

from foundation.registry import Registry

EXPLAINERS = Registry("explainer", page="explainers.md")


def one_row(options: dict) -> int:
    """``rows_per_input`` and ``interleave`` of a method whose passes see each input once."""
    return 1


def option(name: str, default: int):
    """``rows_per_input`` (or ``interleave``) read from the integer option ``name``."""
    return lambda options: options.get(name, default)


# The traits of an entry that does not state them (a user's ``@EXPLAINERS.register("name")``):
# no draws, one row per input, a population member by member, not linear, no hooks.
TRAITS = {"draws": None, "rows_per_input": one_row, "interleave": one_row, "members": "each", "linear": False,
          "hooks": False, "definition": 1}  # fmt: skip


def trait(entry, name: str):
    """Explainer trait ``name`` of a registry entry (``TRAITS``' value where it states none)."""
    return entry.extra.get(name, TRAITS[name])


def definitions(methods: Iterable[str]) -> dict[str, int]:
    """The ``definition`` trait of each registered method, to write beside its kept maps."""
    return {m: trait(EXPLAINERS[m], "definition") for m in methods}


def outdated(kept: dict[str, int] | None, methods: Iterable[str], where: str) -> list[str]:
    """Of ``methods``, those whose maps kept in ``where`` (a file) are of another definition than
    today's: ``kept`` is what was written with them (``definitions``; None or a method missing:
    written before definitions were, version 1). Warns in one line naming ``where`` and them."""
    kept, today = kept or {}, definitions(methods)
    old = [m for m, version in today.items() if kept.get(m, 1) != version]
    if old:
        warnings.warn(f"{where}: computing again what it keeps of {', '.join(old)}: made under definition "
                      f"{', '.join(str(kept.get(m, 1)) for m in old)} of the method, today's is "
                      f"{', '.join(str(today[m]) for m in old)} (each input's draws from its own seed)", stacklevel=2)
    return old


__all__ = ["EXPLAINERS", "TRAITS", "definitions", "one_row", "option", "outdated", "trait"]
