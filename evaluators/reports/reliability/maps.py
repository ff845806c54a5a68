"""Each member's maps, computed once per explainer and shared by every section of the report.

For explainer e and members m = 1 … M (each a classifier of rows), on inputs x (N, d), every
member explaining the same class ``target`` (N,) with the same random draws (``seed``):

* ``maps`` (M, N, d): ``explain(member_m, x, e, target, seed)``;
* ``randomised`` (M, N, d): the maps of member m with every layer re-initialised, the last
  step of Adebayo et al.'s cascading randomisation (``evaluators.sanity.layers``, seed
  ``seed``); ``cascade`` (M, L): the mean over inputs of the similarity (``measure``) of each
  cascading step's maps to the member's own maps, top layer first (``layers``: their names);
* ``random_logit`` (M,): the mean similarity of each input's map of a random other class
  (``evaluators.sanity.random_logit.other_classes``) to its map of ``target``;
* ``faithfulness`` {metric: (M,)}: each member's mean score of its own maps
  (``evaluators.metrics.registry.score``).

``explainer_unit`` keeps one explainer's results in ``<run>/maps/<e>.pt`` (written atomically
when the explainer is done): a resumed report reads a finished explainer from that file and
never computes it again. ``explain_fn`` (default ``evaluators.maps.explain``) is the one
function that makes maps, so a simulation can put an explainer of its own in (tests).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

from evaluators.maps import explain
from evaluators.metrics.registry import score
from evaluators.metrics.similarity import similarity
from evaluators.sanity.layers import randomised_models
from evaluators.sanity.random_logit import other_classes
from foundation.errors import InputError
from foundation.files import atomic_write
from foundation.finite import check_finite

UNIT_KEYS = ("maps", "randomised", "cascade", "layers", "random_logit", "faithfulness")


def mean_similarity(a: torch.Tensor, b: torch.Tensor, measure: str, names: tuple[str, str]) -> float:
    """The mean over inputs of ``similarity(a, b, measure)``, inputs where it is undefined (a
    constant map) left out; NaN where it is undefined for every input."""
    values = similarity(a, b, measure, names)
    defined = values[~values.isnan()]
    return defined.mean().item() if len(defined) else float("nan")


def member_maps(members: Sequence[nn.Module], x: torch.Tensor, target: torch.Tensor, method: str, options: dict,
                seed: int, explain_fn: Callable = explain) -> torch.Tensor:  # fmt: skip
    """(M, N, d) float64 maps of every member (the module docstring), checked finite."""
    maps = torch.stack([explain_fn(m, x, method, target=target, seed=seed, **options).detach().double()
                        for m in members])  # fmt: skip
    check_finite(maps, f"explainer {method!r}", "map")
    return maps


def randomisation(member: nn.Module, own: torch.Tensor, x: torch.Tensor, target: torch.Tensor, method: str,
                  options: dict, seed: int, measure: str,
                  explain_fn: Callable = explain) -> tuple[list[str], list[float], torch.Tensor]:  # fmt: skip
    """Cascading randomisation of one member: the layers (top first), the mean similarity of
    each step's maps to ``own`` (N, d), and the maps of the last step (every layer randomised)."""
    layers, steps, maps = [], [], own
    for layer, randomised in randomised_models(member, "cascading", seed):
        maps = explain_fn(randomised, x, method, target=target, seed=seed, **options).detach().double()
        check_finite(maps, f"explainer {method!r} after randomising {layer!r}", "map")
        layers.append(layer)
        steps.append(mean_similarity(maps, own, measure, (f"{method} after randomising {layer}", f"{method}")))
    return layers, steps, maps


def random_logit_similarity(member: nn.Module, own: torch.Tensor, x: torch.Tensor, target: torch.Tensor,
                            n_classes: int, method: str, options: dict, seed: int, measure: str,
                            explain_fn: Callable = explain) -> float:  # fmt: skip
    """The mean similarity of each input's map of a random other class to ``own``."""
    other = other_classes(target, n_classes, seed)
    maps = explain_fn(member, x, method, target=other, seed=seed, **options).detach().double()
    check_finite(maps, f"explainer {method!r} of a random other class", "map")
    return mean_similarity(maps, own, measure, (f"{method} of a random other class", method))


def faithfulness_scores(member: nn.Module, x: torch.Tensor, target: torch.Tensor, maps: torch.Tensor,
                        metrics: Sequence[str], metric_options: dict[str, dict]) -> dict[str, float]:  # fmt: skip
    """Member's mean score of its maps (N, d) by each metric (undefined inputs left out)."""
    out = {}
    for metric in metrics:
        values = score(metric, member, x, maps.float(), target, **metric_options.get(metric, {})).double()
        defined = values[~values.isnan()]
        if not len(defined):
            raise InputError(f"metric {metric!r}: undefined on every input; expected a score on at least one")
        out[metric] = defined.mean().item()
    return out


def explainer_unit(folder: Path, members: Sequence[nn.Module], x: torch.Tensor, target: torch.Tensor, n_classes: int,
                   method: str, options: dict, seed: int, measure: str, metrics: Sequence[str],
                   metric_options: dict[str, dict], explain_fn: Callable = explain,
                   progress: Callable[[str], None] = print) -> dict:  # fmt: skip
    """Every result of one explainer (the module docstring), read from ``folder/<method>.pt``
    where a previous run finished it, else computed and kept there."""
    path = folder / f"{method}.pt"
    if path.is_file():
        unit = torch.load(path, weights_only=True)
        if set(unit) != set(UNIT_KEYS):
            raise InputError(f"{path}: holds {sorted(unit)}; expected {list(UNIT_KEYS)} (a file of this report)")
        progress(f"{method}: read from {path}")
        return unit
    maps = member_maps(members, x, target, method, options, seed, explain_fn)
    randomised, cascade, random_logit, faithful = [], [], [], {m: [] for m in metrics}
    layers: list[str] = []
    for i, member in enumerate(members):
        progress(f"{method}: member {i + 1}/{len(members)}")
        layers, steps, last = randomisation(member, maps[i], x, target, method, options, seed, measure, explain_fn)
        randomised.append(last)
        cascade.append(steps)
        random_logit.append(random_logit_similarity(member, maps[i], x, target, n_classes, method, options, seed,
                                                    measure, explain_fn))  # fmt: skip
        for metric, value in faithfulness_scores(member, x, target, maps[i], metrics, metric_options).items():
            faithful[metric].append(value)
    unit = {"maps": maps, "randomised": torch.stack(randomised),
            "cascade": torch.tensor(cascade, dtype=torch.float64), "layers": layers,
            "random_logit": torch.tensor(random_logit, dtype=torch.float64),
            "faithfulness": {m: torch.tensor(v, dtype=torch.float64) for m, v in faithful.items()}}  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: torch.save(unit, tmp))
    return unit
