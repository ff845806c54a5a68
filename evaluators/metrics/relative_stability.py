"""Relative stability (Agarwal, Johnson, Pawelczyk, Krishna, Saxena, Zitnik & Lakkaraju
2022, "Rethinking stability for attribution-based explanations", arXiv:2203.06877),
as Decker et al. (2024, §5.2, Table 3; App. C.1: OpenXAI's implementation) score
aggregated explanations with it. Lower is better.

For an input x with explanation e_x, perturbed inputs x' in a neighbourhood of x whose
predicted class is x's (ŷ_x' = ŷ_x), and the explanations e_x' of those:

    RIS = max_x' ‖(e_x − e_x') / e_x‖_p / max(‖(x − x') / x‖_p, ε_min)
    RRS = max_x' ‖(e_x − e_x') / e_x‖_p / max(‖(L_x − L_x') / L_x‖_p, ε_min)
    ROS = max_x' ‖(e_x − e_x') / e_x‖_p / max(‖h(x) − h(x')‖_p, ε_min)

the explanation's relative change over the relative change of the input (RIS), of an
internal representation L (RRS), or the change of the output h (ROS; not relative).
How this compares with Quantus and OpenXAI: docs/fidelity_metrics.md.

``relative_stability(model, x, maps, explain_fn, ...)`` -> {"ris", "rrs", "ros": (N,), "kept": (N,)}:

* **Maps and explanations**: e_x = ``maps`` (layout: ``evaluators.metrics.model_scores``);
  ``explain_fn(x_rows, target_rows)`` returns the maps of a batch of perturbed inputs in
  the same layout, as ``evaluators.metrics.sensitivity`` calls it (e.g. ``lambda v, t:
  reduce_map(explain(model, v, "saliency", target=t))``), for ``target_rows`` each input's
  ``target`` resolved on the clean input, so e_x' explains what e_x explains.
* **Perturbations** (``n_samples``, ``radius``): x' = x + ε, ε ~ U[−r, r] independently per
  value (every channel of every pixel, every feature), n samples per input; defaults
  r = 0.1 (the uniform noise radius of Decker et al.'s sensitivity metrics) and n = 200
  (their m_eval). Drawn by ``evaluators.metrics.perturbations.uniform_noise`` in its
  "evaluation" stream: with the same seed, the very noisy copies Average- and
  Max-Sensitivity score, independent of the aggregators' fitting samples. ``perturbed``
  takes given x' instead: a tensor (N, n, ...) of n perturbed copies per input.
* **Prediction flips**: a sample x' whose predicted class (argmax of the model's output)
  differs from x's is left out, as the definitions require; an input whose n samples all
  flip has no score (NaN; ``kept`` counts each input's samples kept).
* **Norms and ε_min**: ‖·‖_p over all of an input's values (flattened), p = 2 by default;
  ε_min = 1e-6, the denominators' floor max(·, ε_min). ``change`` (``RELATIVE_CHANGES``)
  says how a relative change is taken: ``"elementwise"`` (default) as the equations above,
  (a − a') / a value by value, a zero a_i replaced by ε_min (so a map's exact zeros weigh
  1/ε_min); ``"norm"``: ‖a − a'‖_p / max(‖a‖_p, ε_min), finite on sparse maps. ROS's
  output change is absolute either way.
* **Representation** L (``layer``): None (default) the model's output (the logits; an
  ``MLPEnsemble``'s mean probabilities), which needs no knowledge of the network; a name in
  ``model.named_modules()``: the input of that module at its last call in a forward pass,
  flattened (Decker et al.'s "final layer before the classification": ``layer="fc"`` on
  the framework's ResNets).
* **Output** h (``ros_output``): ``"logit"`` (default; the model's output, as L's default)
  or ``"probability"`` (``class_probabilities``).
* **Randomness and batching**: input i's noise comes from its own seeded CPU generator
  (``perturbations.sample_generator``), so a call's result does not depend on the device,
  on the other inputs or on ``max_batch``. The perturbed inputs go through ``explain_fn``
  and the model in calls of whole inputs, max(1, ⌊max_batch / n⌋) inputs (all their
  samples) per call (the forward passes in pieces of at most ``max_batch`` rows, without
  gradients, in eval mode; ``explain_fn`` runs with gradients enabled), on the model's
  device. All three scores come from one pass (one explanation per perturbed input).

Inputs, maps (also ``explain_fn``'s and ``perturbed``) and the model's outputs with NaN or
±inf are refused with one ``InputError`` naming which (``foundation.finite``): a NaN
output would otherwise turn a sample into a prediction flip, left out unseen.

``RelativeStability`` (a torchmetrics ``Metric``) averages the three over the inputs
passed to ``update(model, x, maps, target=None, explain_fn=...)`` that have a score.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from foundation.finite import check_finite
from evaluators.metrics.base import MeanOverInputs, require_explain_fn
from evaluators.metrics.registry import METRICS
from evaluators.metrics.infidelity import M_EVAL
from evaluators.metrics.model_scores import OUTPUTS, check_inputs_and_maps, finite_outputs, resolve_targets
from evaluators.metrics.perturbations import RADIUS, check_count, check_real, uniform_noise
from foundation.batching import resolve_max_batch
from foundation.devices import model_device
from foundation.errors import InputError
from lightning_modules.interface import class_probabilities, eval_mode

STABILITIES = ("ris", "rrs", "ros")
EPS_MIN = 1e-6  # Quantus's eps_min


def _norm(v: torch.Tensor, p: float) -> torch.Tensor:
    return torch.linalg.vector_norm(v.flatten(1), ord=p, dim=1)


def elementwise_change(a: torch.Tensor, a_new: torch.Tensor, p: float, eps_min: float) -> torch.Tensor:
    """(rows,) ‖(a − a') / a‖_p over each row's values, a zero a_i replaced by ε_min."""
    return _norm((a - a_new) / torch.where(a == 0, eps_min, a), p)


def norm_change(a: torch.Tensor, a_new: torch.Tensor, p: float, eps_min: float) -> torch.Tensor:
    """(rows,) ‖a − a'‖_p / max(‖a‖_p, ε_min) over each row's values."""
    return _norm(a - a_new, p) / _norm(a, p).clamp_min(eps_min)


RELATIVE_CHANGES: dict[str, Callable[[torch.Tensor, torch.Tensor, float, float], torch.Tensor]] = {
    "elementwise": elementwise_change,
    "norm": norm_change,
}


def _check_options(n_samples, radius, p, eps_min, change, ros_output) -> None:
    check_count("n_samples", n_samples)
    check_real("radius", radius, 0)
    check_real("eps_min", eps_min, 0)
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not p >= 1:
        raise InputError(f"option p={p!r}; expected a norm order >= 1 (float('inf') for the max norm)")
    if change not in RELATIVE_CHANGES:
        raise InputError(f"option change={change!r}; expected one of {list(RELATIVE_CHANGES)}")
    if ros_output not in OUTPUTS:
        raise InputError(f"option ros_output={ros_output!r}; expected one of {list(OUTPUTS)}")


def _layer(model: nn.Module, layer) -> nn.Module | None:
    if layer is None:
        return None
    modules = dict(model.named_modules())
    if not isinstance(layer, str) or layer not in modules or layer == "":
        raise InputError(f"option layer={layer!r}; expected None (the model's output) or a module name of the model, "
                         f"e.g. one of {[name for name in modules if name][-3:]}")  # fmt: skip
    return modules[layer]


def _forward(model: nn.Module, x: torch.Tensor, module: nn.Module | None, ros_output: str):
    """Predicted classes, L (flattened) and h of one batch, from one forward pass (two
    with ``ros_output="probability"``)."""
    captured = []
    handle = None if module is None else module.register_forward_pre_hook(lambda m, args: captured.append(args[0]))
    try:
        out = model(x)
    finally:
        if handle is not None:
            handle.remove()
    if out.dim() != 2:
        raise InputError(f"the model's outputs have shape {tuple(out.shape)}; expected (N, K): score a "
                         "population's members one at a time")  # fmt: skip
    finite_outputs(out)
    representation = out if module is None else captured[-1].flatten(1)
    h = finite_outputs(class_probabilities(model, x)) if ros_output == "probability" else out
    return out.argmax(-1), representation, h


def _forward_all(model, x, module, ros_output, max_batch):
    parts = [_forward(model, xs, module, ros_output) for xs in x.split(max_batch)]
    return [torch.cat(p) for p in zip(*parts)]


def relative_stability(
    model: nn.Module, x: torch.Tensor, maps: torch.Tensor, explain_fn: Callable, target=None,
    n_samples: int = M_EVAL, radius: float = RADIUS, p: float = 2.0, eps_min: float = EPS_MIN,
    change: str = "elementwise", layer: str | None = None, ros_output: str = "logit", perturbed=None,
    seed: int = 0, max_batch: int | None = None, offset: int = 0,
) -> dict[str, torch.Tensor]:
    """RIS, RRS and ROS per input (see the module's docstring): {"ris", "rrs", "ros"}: (N,)
    in the maps' dtype, NaN where every sample flipped the prediction, and "kept": (N,)
    the samples kept, on the model's device.

    Args:
        model: a classifier of images (N, C, H, W) -> (N, K) logits, or a tabular model.
        x: images (N, C, H, W) or tabular rows (N, d).
        maps: e_x, (N, H, W) per pixel or (N, d) per feature.
        explain_fn: (x_rows, target_rows) -> maps of those rows, in the layout of ``maps``.
        target: None (the predicted class), an int or a LongTensor (N,); tabular: None or 1.
        n_samples: perturbed inputs per input (ignored with ``perturbed``).
        radius: r of the uniform noise U[−r, r].
        p: the norm's order.
        eps_min: ε_min.
        change: a name of ``RELATIVE_CHANGES``.
        layer: None (L = the model's output) or the name of the module whose input is L.
        ros_output: h for ROS, ``"logit"`` or ``"probability"``.
        perturbed: None (drawn) or x' (N, n, ...), n perturbed inputs per input.
        seed: seeds the noise (``perturbations.uniform_noise``, stream "evaluation"); ``offset``: the
            index of x's first input (its noise that of index offset + i), so a split in parts draws as at once.
        max_batch: rows per forward pass and per ``explain_fn`` call (at least one input's n samples;
            None: ``resolve_max_batch``).
    """
    _, unit_shape = check_inputs_and_maps(model, x, maps)
    _check_options(n_samples, radius, p, eps_min, change, ros_output)
    if not callable(explain_fn):
        raise InputError(f"option explain_fn={explain_fn!r}; expected a callable (x_rows, target_rows) -> maps")
    if perturbed is not None:
        if not isinstance(perturbed, torch.Tensor) or perturbed.dim() != x.dim() + 1 or len(perturbed) != len(x) \
                or perturbed.shape[2:] != x.shape[1:] or perturbed.shape[1] == 0:
            raise InputError(f"option perturbed of shape {tuple(getattr(perturbed, 'shape', ()))}; expected "
                             f"({len(x)}, n, {', '.join(map(str, x.shape[1:]))})")  # fmt: skip
        check_finite(perturbed, "option perturbed", "input")
        n_samples = perturbed.shape[1]
    module = _layer(model, layer)
    relative = RELATIVE_CHANGES[change]
    with eval_mode(model):
        device = model_device(model, x)
        x, maps = x.detach().to(device), maps.detach().to(device)
        max_batch = resolve_max_batch(max_batch, x)
        with torch.no_grad():
            target = resolve_targets(model, x, target, max_batch)
            predicted, representation, h = _forward_all(model, x, module, ros_output, max_batch)
        best, kept = {name: [] for name in STABILITIES}, []
        per_call = max(1, max_batch // n_samples)
        for start in range(0, len(x), per_call):
            inputs = torch.arange(start, min(start + per_call, len(x)), device=device)
            if perturbed is None:
                x_new = uniform_noise(x[inputs], n_samples, radius, seed, "evaluation", offset=offset + start)
            else:
                x_new = perturbed[start:start + len(inputs)].to(device, x.dtype)
            x_new = x_new.flatten(0, 1)
            rows = inputs.repeat_interleave(n_samples)
            with torch.enable_grad():  # gradient explainers, also inside a Metric's update (torchmetrics: no_grad)
                maps_new = explain_fn(x_new, target[rows])
            if not isinstance(maps_new, torch.Tensor) or tuple(maps_new.shape) != (len(x_new), *unit_shape):
                raise InputError(f"explain_fn returned maps of shape {tuple(getattr(maps_new, 'shape', ()))}; "
                                 f"expected {(len(x_new), *unit_shape)}, as maps")  # fmt: skip
            check_finite(maps_new, "explain_fn's maps of the perturbed inputs", "row")
            with torch.no_grad():
                predicted_new, representation_new, h_new = _forward_all(model, x_new, module, ros_output, max_batch)
                explanation = relative(maps[rows], maps_new.detach().to(device, maps.dtype), p, eps_min)
                denominators = {
                    "ris": relative(x[rows], x_new, p, eps_min),
                    "rrs": relative(representation[rows], representation_new, p, eps_min),
                    "ros": _norm(h[rows] - h_new, p),
                }
                same = (predicted_new == predicted[rows]).view(len(inputs), n_samples)
                kept.append(same.sum(1))
                for name, denominator in denominators.items():
                    ratio = (explanation / denominator.clamp_min(eps_min)).to(maps.dtype).view(len(inputs), n_samples)
                    best[name].append(torch.where(same, ratio, -torch.inf).amax(1))
    kept = torch.cat(kept)
    return {**{name: torch.where(kept > 0, torch.cat(v), torch.nan) for name, v in best.items()}, "kept": kept}


@METRICS.register("relative_stability", needs=("model", "maps", "explain_fn"), higher_is_better=False,
                  function=relative_stability)  # fmt: skip
class RelativeStability(MeanOverInputs):
    """Mean RIS, RRS and ROS (lower is better) over the inputs scored by ``update`` that
    have a score; ``compute()`` returns {"ris", "rrs", "ros"}.

    ``update(model, x, maps, target=None, explain_fn=...)`` scores inputs x with their maps
    through ``relative_stability`` with this metric's options; one metric yields all three
    (states: a vector of the three sums, ``evaluators.metrics.base``). Inputs whose samples
    all flipped the prediction are counted in the state ``left_out``.

    Args (those of ``relative_stability``): n_samples, radius, p, eps_min, change, layer,
    ros_output, seed, max_batch.
    """

    higher_is_better = False
    leaves_out_undefined = True

    def __init__(self, n_samples: int = M_EVAL, radius: float = RADIUS, p: float = 2.0, eps_min: float = EPS_MIN,
                 change: str = "elementwise", layer: str | None = None, ros_output: str = "logit", seed: int = 0,
                 max_batch: int | None = None, **kwargs) -> None:  # fmt: skip
        _check_options(n_samples, radius, p, eps_min, change, ros_output)
        super().__init__({"n_samples": n_samples, "radius": radius, "p": p, "eps_min": eps_min, "change": change,
                          "layer": layer, "ros_output": ros_output, "seed": seed, "max_batch": max_batch},
                         (len(STABILITIES),), **kwargs)  # fmt: skip

    def scores(self, model: nn.Module, x: torch.Tensor, maps: torch.Tensor, target=None,
               explain_fn: Callable | None = None) -> torch.Tensor:  # fmt: skip
        """(N, 3) RIS, RRS, ROS; NaN where every sample flipped the prediction."""
        scores = relative_stability(model, x, maps, require_explain_fn(explain_fn, self), target, **self.options)
        return torch.stack([scores[name] for name in STABILITIES], 1)

    def compute(self) -> dict[str, torch.Tensor]:
        return dict(zip(STABILITIES, super().compute()))


# The public, checked entry points (maps with NaN or ±inf refused: tests/faults/test_nonfinite_maps.py);
# the other functions here are steps inside ``relative_stability``, which checks their maps once.
__all__ = ["RELATIVE_CHANGES", "STABILITIES", "RelativeStability", "relative_stability"]
