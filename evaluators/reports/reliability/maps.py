"""Each member's maps, computed once per explainer and shared by every section of the report.

For explainer e and members m = 1 … M (each a classifier of rows or of images), on inputs x
(N, d) or (N, C, H, W), every member explaining the same class ``target`` (N,) with the same
random draws (``seed``):

* ``maps`` (M, N, d) or (M, N, H, W): ``explain(member_m, x, e, target, seed)`` in float64,
  image maps summed over channels (``reduce_map(·, "sum")``: signed per-pixel maps);
* ``randomised``, shaped as ``maps``: the maps of member m with every layer re-initialised, the
  last step of Adebayo et al.'s cascading randomisation (``evaluators.sanity.layers``, seed
  ``seed``); ``cascade`` (M, S): the mean over inputs of the similarity (``measure``) of the
  maps after S cascading steps to the member's own maps, top layer first (``layers``: the last
  layer randomised at each step; ``cascade_steps`` steps evenly spread over the L layers, the
  last always among them, so a deep network is explained S + 1 times, not L + 1);
* ``random_logit`` (M,): the mean similarity of each input's map of a random other class
  (``evaluators.sanity.random_logit.other_classes``) to its map of ``target``;
* ``faithfulness`` {metric: (M,)}: each member's mean score of its own maps
  (``evaluators.metrics.registry.score``).

``explainer_unit`` keeps one explainer's results in ``<run>/maps/<e>.pt`` (written atomically
when the explainer is done): a resumed report reads a finished explainer from that file and
never computes it again. Its steps (a member's maps, a cascading step, the random logit, a
faithfulness metric) are printed with the time left (``progress.Progress``). ``explain_fn``
(default ``evaluators.maps.explain``) is the one function that makes maps, so a simulation can
put an explainer of its own in (tests).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

from evaluators.maps import explain
from foundation.modality import reduce_map
from evaluators.metrics.registry import score
from evaluators.reports.reliability.progress import Progress, quiet
from evaluators.metrics.similarity import similarity
from evaluators.sanity.layers import randomisable_layers, randomised_models
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


def explained(model: nn.Module, x: torch.Tensor, target: torch.Tensor, method: str, options: dict, seed: int,
              explain_fn: Callable, what: str) -> torch.Tensor:  # fmt: skip
    """One model's maps (N, d) or (N, H, W) in float64 (module docstring), checked finite; ``what``
    names them in the error."""
    maps = explain_fn(model, x, method, target=target, seed=seed, **options).detach().double()
    maps = reduce_map(maps, "sum") if maps.dim() == 4 else maps
    check_finite(maps, what, "map")
    return maps


def member_maps(members: Sequence[nn.Module], x: torch.Tensor, target: torch.Tensor, method: str, options: dict,
                seed: int, explain_fn: Callable = explain,
                step: Callable[[str], None] = quiet) -> torch.Tensor:  # fmt: skip
    """(M, N, ...) float64 maps of every member (the module docstring), checked finite; ``step``
    is told of each member's maps."""
    maps = []
    for i, member in enumerate(members):
        maps.append(explained(member, x, target, method, options, seed, explain_fn, f"explainer {method!r}"))
        step(f"member {i + 1}'s maps")
    return torch.stack(maps)


def cascade_positions(n_layers: int, n_steps: int) -> set[int]:
    """The cascading steps explained: ``n_steps`` of 1 … L evenly spread, L (every layer) among them."""
    return {int(round(p)) for p in torch.linspace(n_layers, 1, min(n_steps, n_layers)).tolist()}


def randomisation(member: nn.Module, own: torch.Tensor, x: torch.Tensor, target: torch.Tensor, method: str,
                  options: dict, seed: int, measure: str, explain_fn: Callable = explain, cascade_steps: int = 5,
                  step: Callable[[str], None] = quiet) -> tuple[list[str], list[float], torch.Tensor]:  # fmt: skip
    """Cascading randomisation of one member: the last layer randomised at each explained step
    (top first), the mean similarity of its maps to ``own``, and the maps of the last step
    (every layer randomised); ``step`` is told of each step explained."""
    layers, steps, maps = [], [], own
    chosen = cascade_positions(len(randomisable_layers(member)), cascade_steps)
    for position, (layer, randomised) in enumerate(randomised_models(member, "cascading", seed), start=1):
        if position not in chosen:
            continue
        maps = explained(randomised, x, target, method, options, seed, explain_fn,
                         f"explainer {method!r} after randomising {layer!r}")  # fmt: skip
        layers.append(layer)
        steps.append(mean_similarity(maps, own, measure, (f"{method} after randomising {layer}", f"{method}")))
        step(f"cascading step {len(steps)}/{len(chosen)}")
    return layers, steps, maps


def random_logit_similarity(member: nn.Module, own: torch.Tensor, x: torch.Tensor, target: torch.Tensor,
                            n_classes: int, method: str, options: dict, seed: int, measure: str,
                            explain_fn: Callable = explain) -> float:  # fmt: skip
    """The mean similarity of each input's map of a random other class to ``own``."""
    maps = explained(member, x, other_classes(target, n_classes, seed), method, options, seed, explain_fn,
                     f"explainer {method!r} of a random other class")  # fmt: skip
    return mean_similarity(maps, own, measure, (f"{method} of a random other class", method))


def faithfulness_scores(member: nn.Module, x: torch.Tensor, target: torch.Tensor, maps: torch.Tensor,
                        metrics: Sequence[str], metric_options: dict[str, dict],
                        step: Callable[[str], None] = quiet) -> dict[str, float]:  # fmt: skip
    """Member's mean score of its maps (N, d) by each metric (undefined inputs left out); ``step``
    is told of each metric scored."""
    out = {}
    for metric in metrics:
        values = score(metric, member, x, maps.float(), target, **metric_options.get(metric, {})).double()
        defined = values[~values.isnan()]
        if not len(defined):
            raise InputError(f"metric {metric!r}: undefined on every input; expected a score on at least one")
        out[metric] = defined.mean().item()
        step(metric)
    return out


def explainer_unit(folder: Path, members: Sequence[nn.Module], x: torch.Tensor, target: torch.Tensor, n_classes: int,
                   method: str, options: dict, seed: int, measure: str, metrics: Sequence[str],
                   metric_options: dict[str, dict], cascade_steps: int = 5, explain_fn: Callable = explain,
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
    n_steps = len(cascade_positions(len(randomisable_layers(members[0])), cascade_steps))
    ticker = Progress(method, len(members) * (n_steps + 2 + len(metrics)), progress)
    maps = member_maps(members, x, target, method, options, seed, explain_fn, ticker.step)
    randomised, cascade, random_logit, faithful = [], [], [], {m: [] for m in metrics}
    layers: list[str] = []
    for i, member in enumerate(members):
        where = f"member {i + 1}/{len(members)}"
        layers, steps, last = randomisation(member, maps[i], x, target, method, options, seed, measure, explain_fn,
                                            cascade_steps, lambda what: ticker.step(f"{where}, {what}"))  # fmt: skip
        randomised.append(last)
        cascade.append(steps)
        random_logit.append(random_logit_similarity(member, maps[i], x, target, n_classes, method, options, seed,
                                                    measure, explain_fn))  # fmt: skip
        ticker.step(f"{where}, random logit")
        scores = faithfulness_scores(member, x, target, maps[i], metrics, metric_options,
                                     lambda what: ticker.step(f"{where}, {what}"))  # fmt: skip
        for metric, value in scores.items():
            faithful[metric].append(value)
    unit = {"maps": maps, "randomised": torch.stack(randomised),
            "cascade": torch.tensor(cascade, dtype=torch.float64), "layers": layers,
            "random_logit": torch.tensor(random_logit, dtype=torch.float64),
            "faithfulness": {m: torch.tensor(v, dtype=torch.float64) for m, v in faithful.items()}}  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: torch.save(unit, tmp))
    return unit
