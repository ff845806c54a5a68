"""The importance estimates ROAR ranks by (Hooker et al. 2019, §4.1): explainers, controls
and aggregated explanations, ``estimator_maps(model, x, name, ...)`` -> maps shaped like x.

``name`` is one of:

* any registry name of ``evaluators.maps.explain`` (``explainer_names(model, x)``): the map e
  of the explained output of the model's default target (``default_targets``, computed once
  per chunk): for images the clean model's predicted class, for tabular models their positive class.
  :data:`ROAR_DEFAULTS` sets the paper's settings where a registry default differs:
  SmoothGrad (SG), SmoothGrad² (SG-SQ) and VarGrad (VAR) average J = 15 noisy estimates
  (``nt_samples=15``), e = (1/J) Σ_j g(x + η_j), (1/J) Σ_j g(x + η_j)² and Var_j g(x + η_j);
  Integrated Gradients uses k = 25 steps (``n_steps=25``) from the registry's reference
  (zeros in the model's input space: for images normalised by the training mean, the
  mean image; the paper's black image is ``baselines=<black in normalised units>``).
  Explicit options override these defaults.
* a control of :data:`ROAR_CONTROLS`, independent of the model:

  - ``random``: i.i.d. uniform scores in [0, 1) per input element, a pure function of
    (``seed``, example index, element) (``datamodules.roar.uniform_hash``): independent of
    the model, of the input's values and of the chunking (against the paper's Bernoulli
    masks: docs/roar.md).
  - ``sobel`` (images only): the Sobel edge magnitude of every channel, as scikit-image's
    ``filters.sobel`` of the 2-D channel (tested equal): with the edge kernel [1, 0, −1]
    along one axis and the smoothing kernel [1, 2, 1]/4 along the other, G_r and G_c,
    e = √((G_r² + G_c²) / 2), borders by edge replication (scipy's ``reflect``).
* ``agg:<aggregator>``, an aggregated explanation over ``explainers`` (option: a list of
  registry names, or a dict name -> options; default :data:`AGG_EXPLAINERS`, the paper's
  base estimators GRAD, IG, GB):

  - ``<aggregator>``, a pixel aggregator of ``AGGREGATORS`` (``mean``, ``ucb``, ``var``
    …, Mahlau & Nolde): each base map is taken in absolute value (``absolute=True``),
    normalised per map over all its elements (``normalisation``, default ``z``, their
    Table 1's) and the k maps merged element by element by ``aggregate``; further options
    (``aggregator_options``) go to the aggregator;
  - ``<aggregator>``, an optimised aggregator of ``AGGREGATORS`` (``agg_mean``,
    ``agg_var``, ``agg_robust``, ``agg_faith``, ``agg_opt``, Decker et al.), through
    ``optimised_aggregation`` with its own post-processing and options; its image maps are
    per pixel (H, W) and are repeated over the C channels.

Batching and seeds (docs/roar.md): chunks of ``chunk`` examples, every explainer called with
``seed`` and the chunk's examples' indices in their split (``index``, default 0 … N-1).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from datamodules.roar import RANDOM_STREAM, uniform_hash
from evaluators.aggregators.normalisations import normalise
from evaluators.aggregators.optimised_aggregators import optimised_aggregation
from evaluators.aggregators.pixel_aggregators import aggregate
from evaluators.aggregators.registry import AGGREGATORS
from foundation.finite import check_finite
from evaluators.maps import EXPLAINERS, explain, explainer_names
from evaluators.maps.registry import definitions
from foundation.batching import resolve_max_batch
from foundation.devices import model_device
from foundation.errors import InputError
from foundation.modality import IMAGES
from lightning_modules.interface import default_targets, eval_mode

CHUNK = 1024
AGG_PREFIX = "agg:"
AGG_EXPLAINERS = ("saliency", "integrated_gradients", "guided_backprop")
ROAR_DEFAULTS: dict[str, dict] = {
    "smoothgrad": {"nt_samples": 15},
    "smoothgrad_sq": {"nt_samples": 15},
    "vargrad": {"nt_samples": 15},
    "integrated_gradients": {"n_steps": 25},
}
SOBEL_EDGE, SOBEL_SMOOTH = (1.0, 0.0, -1.0), (0.25, 0.5, 0.25)


def random_scores(x: torch.Tensor, index: torch.Tensor, seed: int) -> torch.Tensor:
    """The ``random`` control: uniform [0, 1) scores shaped like x from (seed, index, element)."""
    return uniform_hash(seed, index.to(x.device), x[0].numel(), RANDOM_STREAM).to(torch.float32).view(x.shape)


def sobel_scores(x: torch.Tensor, index: torch.Tensor, seed: int) -> torch.Tensor:
    """The ``sobel`` control: the Sobel edge magnitude of each channel of images (N, C, H, W)."""
    if x.dim() != 4:
        raise InputError(f"control 'sobel' needs images (N, C, H, W); got inputs of shape {tuple(x.shape)}")
    edge = torch.tensor(SOBEL_EDGE, dtype=x.dtype, device=x.device)
    smooth = torch.tensor(SOBEL_SMOOTH, dtype=x.dtype, device=x.device)
    kernels = torch.stack([torch.outer(edge, smooth), torch.outer(smooth, edge)])[:, None]  # rows, columns
    planes = F.pad(x.reshape(-1, 1, *x.shape[2:]), (1, 1, 1, 1), mode="replicate")
    grads = F.conv2d(planes, kernels)
    return grads.pow(2).mean(1).sqrt().view(x.shape)


ROAR_CONTROLS: dict[str, Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]] = {
    "random": random_scores,
    "sobel": sobel_scores,
}


def _explainers(explainers, model: nn.Module, x: torch.Tensor) -> dict[str, dict]:
    if isinstance(explainers, (list, tuple)):
        explainers = {name: {} for name in explainers}
    names = explainer_names(model, x)
    if not isinstance(explainers, dict) or not explainers or any(name not in names for name in explainers):
        raise InputError(f"option explainers={explainers!r}; expected a non-empty list of explainer names (some of "
                         f"{names}) or a dict of them to their options")  # fmt: skip
    return {name: {**ROAR_DEFAULTS.get(name, {}), **(o or {})} for name, o in explainers.items()}


def _aggregated(model, x, target, aggregator: str, seed: int, index: torch.Tensor, explainers=AGG_EXPLAINERS,
                normalisation: str = "z", absolute: bool = True, **options) -> torch.Tensor:  # fmt: skip
    explainers = _explainers(explainers, model, x)
    if aggregator in AGGREGATORS.names(kind="optimised"):
        maps, _ = optimised_aggregation(model, x, aggregator, explainers, target=target,
                                        **{"seed": seed, "index": index, **options})  # fmt: skip
        return maps if maps.shape == x.shape else maps[:, None].expand_as(x)
    maps = [explain(model, x, name, target=target, seed=seed, index=index, **o) for name, o in explainers.items()]
    map_dims = x.dim() - 1  # every element of an example: (C, H, W) or (d,)
    stack = torch.stack([normalise(m.abs() if absolute else m, normalisation, map_dims) for m in maps])
    return aggregate(stack, aggregator, map_dims, **options)


def estimator_names(model: nn.Module, x: torch.Tensor) -> list[str]:
    """The names ``estimator_maps`` takes for ``model`` and inputs like x: explainers
    (``explainer_names``), controls (``sobel`` for images), ``agg:`` aggregates."""
    controls = list(ROAR_CONTROLS) if IMAGES.recognises(x) else ["random"]
    aggregates = [AGG_PREFIX + a for a in AGGREGATORS.names()]
    return explainer_names(model, x) + controls + aggregates


def estimator_definitions(name: str, options: dict) -> dict[str, int]:
    """The definitions (``evaluators.maps.registry.definitions``) of the explainers behind estimator
    ``name`` with ``options`` (itself; an aggregate's ``explainers``) that are not version 1 (the
    methods whose draws became per input with issue 42): part of the cache keys, so maps of an
    earlier definition miss while a deterministic estimator's key stays what it was."""
    names = options.get("explainers", AGG_EXPLAINERS) if name.startswith(AGG_PREFIX) else [name]
    return {m: v for m, v in definitions(n for n in names if n in EXPLAINERS).items() if v != 1}


def _check_name(model: nn.Module, x: torch.Tensor, name: str) -> None:
    if name not in estimator_names(model, x):
        raise InputError(f"unknown ROAR estimator {name!r}; expected one of {estimator_names(model, x)}")


def _estimate(model, x, name, target, index, seed, options) -> torch.Tensor:
    """One chunk's maps, every explainer drawing from (seed, the examples' indices)."""
    if name in ROAR_CONTROLS:
        return ROAR_CONTROLS[name](x, index, seed)
    target = default_targets(model, x, target, resolve_max_batch(None, x))
    if name.startswith(AGG_PREFIX):
        return _aggregated(model, x, target, name[len(AGG_PREFIX):], seed=seed, index=index, **options)
    return explain(model, x, name, target=target, seed=seed, index=index,
                   **{**ROAR_DEFAULTS.get(name, {}), **options})  # fmt: skip


def estimator_maps(model: nn.Module, x: torch.Tensor, name: str, target=None, chunk: int = CHUNK, seed: int = 0,
                   index: torch.Tensor | None = None, **options) -> torch.Tensor:  # fmt: skip
    """Maps of estimator ``name`` (see the module's docstring) for inputs x (images (N, C, H,
    W) or rows (N, d)), shaped like x, on the model's device, detached. ``target``: images
    only, None (the predicted class), an int or N labels; ``options`` go to the estimator.
    Maps with NaN or ±inf (a model whose scores are not finite) are refused, the error naming
    the estimator and the example (its ``index``), so none is ever cached or ranked by."""
    _check_name(model, x, name)
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
        raise InputError(f"option chunk={chunk!r}; expected a positive integer (examples per chunk)")
    n = len(x)
    index = torch.arange(n) if index is None else torch.as_tensor(index)
    if index.shape != (n,):
        raise InputError(f"option index of shape {tuple(index.shape)}; expected ({n},), one per example")
    if isinstance(target, torch.Tensor) and target.shape != (n,):
        raise InputError(f"option target of shape {tuple(target.shape)}; expected ({n},) labels or an int")
    device = model_device(model, x)
    with eval_mode(model):
        parts = []
        for start in range(0, n, chunk):
            part = slice(start, min(start + chunk, n))
            t = target[part] if isinstance(target, torch.Tensor) else target
            parts.append(_estimate(model, x[part].to(device), name, t, index[part], seed, options).detach())
            check_finite(parts[-1], f"ROAR estimator {name!r}: maps", "example", numbers=index[part])
        return torch.cat(parts)
