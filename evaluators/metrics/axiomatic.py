"""Axiomatic properties of a map, as Quantus 0.6's ``Completeness``, ``NonSensitivity`` and
``InputInvariance`` define them (Hedström et al. 2023).

Symbols: an input x with D entries (every value of a (C, H, W) image, the d features of a
row) and its map φ (one value per pixel (H, W) or per feature (d,); an image map covers
every channel of its pixel); f(x) the model's output for the input's target, its raw logit
(``output="logit"``) or its class probability (``output="probability"``, Quantus's
``softmax=True``), ``model_scores.target_outputs``; x̄ a baseline, per input: ``"black"``
the input's smallest value in every entry (Quantus's default), ``"white"`` its largest,
``"mean"`` its mean, or a number; x^(i) the input with entry i alone set to the baseline.

* ``completeness`` (Sundararajan et al. 2017): 1 where Σ_j φ_j = f(x) − f(x̄) within
  ``atol`` (default 0: Quantus's exact float equality; a map seldom passes it to the last
  bit), else 0; higher is better. ``completeness_gap``: |Σ_j φ_j − (f(x) − f(x̄))|, the
  distance the first thresholds (lower is better).
* ``non_sensitivity`` (Nguyen & Rodríguez Martínez 2020): with a = |φ| / max |φ| (``abs``
  and ``normalise``, Quantus's defaults; each map by its own largest |value|, where Quantus
  divides a batch by the batch's: call it with ``normalise_func_kwargs={"normalise_axes":
  (1, 2, 3)}`` to compare), an entry i is a non-feature where a_i < ε, and has no effect
  where |f(x^(i)) − f(x)| < ε; the score counts the entries where exactly one holds,
  Σ_i [a_i < ε] XOR [|f(x^(i)) − f(x)| < ε] (0: the map is zero exactly where the model
  does not respond; lower is better). ε = 1e-5 and probabilities, as Quantus. D forward
  passes per input, ``max_batch`` rows at a time.
* ``input_invariance`` (Kindermans et al. 2019): the model's first layer (the first
  ``nn.Linear`` or convolution of ``model.modules()``, z = W x + b) gets the bias
  b − c W 1, which makes the model of the shifted inputs x + c the model of x (exactly
  for a linear layer and an unpadded convolution; a padded convolution's border pixels
  see the shift, as in Quantus); ``explain_fn`` explains x + c with that model, and the
  score is 1 where every entry of the new map is within ``atol`` + ``rtol`` |new| of φ
  (``torch.isclose``, as Quantus's ``np.isclose``), else 0; c = −1, atol = 1e-4 as
  Quantus; higher is better. ``explain_fn`` must explain ``model`` itself (the same
  module): its first layer's bias is changed in place while it runs and restored after.
  Quantus 0.6's ``perturb_batch`` passes ``indices[i][1:]``, so its x + c leaves entry 0 of
  each input unshifted; the tests give Quantus a ``perturb_func`` that shifts every entry.

Each function returns (N,) scores in the maps' dtype; inputs, maps and outputs with NaN or
±inf are refused with one ``InputError`` naming which (``model_scores``).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from evaluators.metrics.model_scores import check_inputs_and_maps, resolve_targets, target_outputs
from evaluators.metrics.registry import register_function
from foundation.batching import resolve_max_batch
from foundation.errors import InputError
from foundation.finite import check_finite

BASELINES = ("black", "white", "mean")


def baseline_values(x: torch.Tensor, baseline) -> torch.Tensor:
    """(N,) the baseline value of each input: its smallest (``"black"``), largest (``"white"``)
    or mean (``"mean"``) value, or the number ``baseline``."""
    flat = x.flatten(1)
    if isinstance(baseline, str) and baseline in BASELINES:
        return {"black": flat.amin, "white": flat.amax, "mean": flat.mean}[baseline](1)
    if isinstance(baseline, numbers.Real) and not isinstance(baseline, bool):
        return torch.full((len(x),), float(baseline), dtype=x.dtype, device=x.device)
    raise InputError(f"option baseline={baseline!r}; expected one of {list(BASELINES)} or a number")


def _outputs(model: nn.Module, x: torch.Tensor, target: torch.Tensor, output: str, max_batch: int) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([target_outputs(model, x[i:i + max_batch], target[i:i + max_batch], output)
                          for i in range(0, len(x), max_batch)])  # fmt: skip


def completeness_gap(model: nn.Module, x: torch.Tensor, maps: torch.Tensor, target=None, baseline="black",
                     output: str = "logit", max_batch: int | None = None) -> torch.Tensor:  # fmt: skip
    """How far the map's sum is from the output's change to the baseline, |Σφ − (f(x) − f(x̄))|."""
    check_inputs_and_maps(model, x, maps)
    rows = resolve_max_batch(max_batch, x)
    target = resolve_targets(model, x, target, rows)
    fill = baseline_values(x, baseline).view(-1, *[1] * (x.dim() - 1)).expand_as(x)
    change = _outputs(model, x, target, output, rows) - _outputs(model, fill, target, output, rows)
    return (maps.flatten(1).sum(1) - change.to(maps.dtype)).abs()


def completeness(model: nn.Module, x: torch.Tensor, maps: torch.Tensor, target=None, baseline="black",
                 output: str = "logit", atol: float = 0.0, max_batch: int | None = None) -> torch.Tensor:  # fmt: skip
    """Whether the map sums to the output's change to the baseline (within ``atol``): 1 or 0."""
    gap = completeness_gap(model, x, maps, target, baseline, output, max_batch)
    return (gap <= atol).to(maps.dtype)


def non_sensitivity(model: nn.Module, x: torch.Tensor, maps: torch.Tensor, target=None, eps: float = 1e-5,
                    abs: bool = True, normalise: bool = True, baseline="black", output: str = "probability",
                    max_batch: int | None = None) -> torch.Tensor:  # fmt: skip
    """The number of input entries where the map's being below ε and the model's not responding
    to the entry's removal disagree."""
    modality, _ = check_inputs_and_maps(model, x, maps)
    rows = resolve_max_batch(max_batch, x)
    target = resolve_targets(model, x, target, rows)
    a = modality.unit_mask(maps).expand_as(x).flatten(1)
    if normalise:
        largest = a.abs().amax(1, keepdim=True)
        a = a / torch.where(largest > 0, largest, 1)
    non_feature = (a.abs() if abs else a) < eps
    clean = _outputs(model, x, target, output, rows)
    flat, fill = x.flatten(1), baseline_values(x, baseline)
    n, d = flat.shape
    no_effect = torch.empty(n * d, dtype=torch.bool, device=x.device)
    for start in range(0, n * d, rows):  # row r: input r // d with entry r % d at the baseline
        r = torch.arange(start, min(start + rows, n * d), device=x.device)
        inputs, entries = r // d, r % d
        perturbed = flat[inputs].clone()
        perturbed[torch.arange(len(r), device=x.device), entries] = fill[inputs]
        changed = _outputs(model, perturbed.view(len(r), *x.shape[1:]), target[inputs], output, rows)
        no_effect[start:start + len(r)] = (changed - clean[inputs]).abs() < eps
    return (no_effect.view(n, d) ^ non_feature).sum(1).to(maps.dtype)


def first_layer(model: nn.Module) -> nn.Module:
    """The first ``nn.Linear`` or convolution of ``model.modules()``, with a bias."""
    layer = next((m for m in model.modules() if isinstance(m, (nn.Linear, nn.modules.conv._ConvNd))), None)
    if layer is None or layer.bias is None:
        raise InputError(f"input invariance: the model's first layer is {layer!r}; expected an nn.Linear or a "
                         "convolution with a bias (the shift is taken up in its bias)")  # fmt: skip
    return layer


@contextmanager
def shifted_first_layer(model: nn.Module, shift: float) -> Iterator[None]:
    """Within the block, the first layer's bias is b − shift · W 1: the model of x + shift
    computes what it computed of x (see the module's docstring); restored after."""
    layer = first_layer(model)
    original = layer.bias.detach().clone()
    with torch.no_grad():
        layer.bias -= shift * layer.weight.flatten(1).sum(1)
    try:
        yield
    finally:
        with torch.no_grad():
            layer.bias.copy_(original)


def input_invariance(model: nn.Module, x: torch.Tensor, maps: torch.Tensor, explain_fn: Callable, target=None,
                     shift: float = -1.0, atol: float = 1e-4, rtol: float = 1e-5) -> torch.Tensor:  # fmt: skip
    """Whether the map stays the same when the inputs and the first layer's bias are shifted
    together (the model's outputs unchanged): 1 or 0."""
    check_inputs_and_maps(model, x, maps)
    if not callable(explain_fn):
        raise InputError(f"input invariance needs explain_fn=<a function (inputs, target) -> maps>; got {explain_fn!r}")
    with shifted_first_layer(model, shift), torch.enable_grad():  # also in a Metric's update (torchmetrics: no_grad)
        shifted = explain_fn(x + shift, target)
    if not isinstance(shifted, torch.Tensor) or shifted.shape != maps.shape:
        raise InputError(f"explain_fn's maps of the shifted inputs have shape {tuple(getattr(shifted, 'shape', ()))}"
                         f"; expected the maps' {tuple(maps.shape)}")  # fmt: skip
    check_finite(shifted, "the maps of the shifted inputs", "map")
    return torch.isclose(maps, shifted.detach().to(maps), rtol=rtol, atol=atol).flatten(1).all(1).to(maps.dtype)


register_function("completeness", completeness, higher_is_better=True, needs=("model", "maps"))
register_function("completeness_gap", completeness_gap, higher_is_better=False, needs=("model", "maps"))
register_function("non_sensitivity", non_sensitivity, higher_is_better=False, needs=("model", "maps"))
register_function("input_invariance", input_invariance, higher_is_better=True, needs=("model", "maps", "explain_fn"))
