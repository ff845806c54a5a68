"""Decker et al. (2024)'s aggregators of k explainers: convex weights per input that minimise
a quadratic quality metric, and the two baselines they compare with.

Symbols (the paper's §4 and App. C.2): for one input x, φ_1 … φ_k its k post-processed
maps (below), E = (φ_1, …, φ_k) ∈ R^{d×k} (d pixels or features), ω ∈ Ω = {ω ≥ 0, Σ_i ω_i = 1}
and the aggregate φ_ω = E ω = Σ_i ω_i φ_i. A generalised L2 metric Q(φ) = E‖γ_1 φ − γ_2‖²
(Definition 4.1) is, over Ω (where γ_2 = γ_2 Σ_i ω_i), a quadratic form Q(φ_ω) = ωᵀΓω with
Γ = E[(γ_1 E − γ_2 1ᵀ)ᵀ(γ_1 E − γ_2 1ᵀ)] (k × k, symmetric PSD), so the best weights solve the
QP min_{ω∈Ω} ωᵀΓω (``evaluators.aggregators.simplex_qp``). Theorem 4.2: Q(φ_ω) ≤ Σ_i ω_i Q(φ_i), so the
minimiser is at least as good as every single explainer (ω = e_i) on the samples Γ is
estimated from. Γ is estimated per input on m_agg = 50 samples (§5, App. C.2), drawn from the
``"fitting"`` stream of ``evaluators.metrics.perturbations``, independent of the metrics'
``"evaluation"`` draws (m_eval = 200) for the same seed (see that module's docstring).

* ``agg_robust``: Γ_robust = (1/m) Σ_s (E − E_s)ᵀ(E − E_s), E_s the maps at x + ε_s, ε_s ~
  U[−r, r] per element (r = 0.1): ωᵀΓ_robust ω = (1/m) Σ_s ‖φ_ω(x) − φ_ω(x + ε_s)‖², the mean
  squared (undivided) sensitivity of the aggregate with the weights held fixed
  (γ_1 = I_d, γ_2 = φ(x + ε)). All N·m noisy inputs are explained in batched calls of each
  explainer, max(1, ⌊max_batch / m⌋) inputs (all their m samples) per call.
* ``agg_faith``: Γ_faith from Decker et al.'s infidelity perturbations (random 20 % of the
  SLIC superpixels replaced from a blurred copy, σ = 10; tabular: 20 % of the features
  replaced by the training means; ``evaluators.metrics.infidelity.subset_perturbations``).
  With a_{s,i} = I_sᵀφ_i the attribution of explainer i removed by sample s, Δ_s =
  f(x) − f(h(x, x_b, I_s)) on the raw class logit (a tabular model's explained output), and
  Yeh et al.'s scale per explainer column, β_i = Σ_s a_{s,i} Δ_s / Σ_s a_{s,i}² (as the
  reference code; 0 where a column is all zero):

      G_{s,i} = β_i a_{s,i} − Δ_s,   Γ_faith = (1/m) GᵀG,
      ωᵀΓ_faith ω = (1/m) Σ_s (Σ_i ω_i β_i a_{s,i} − Δ_s)²   (using Σ_i ω_i = 1),

  the unnormalised infidelity (``infidelity(normalize=False)``) of ψ_ω = Σ_i ω_i β_i φ_i
  (the bound it gives: docs/optimised_aggregation.md). The map returned is φ_ω = Σ_i ω_i φ_i,
  the paper's φ_ω (docs/optimised_aggregation.md says when it differs from ψ_ω).
* ``agg_opt``: Γ = λ Γ_robust / ‖Γ_robust‖_F + (1 − λ) Γ_faith / ‖Γ_faith‖_F, λ = ½ (App. C.2:
  "normalized both metrics using the Frobenius norm of the respective parameter matrix";
  a zero matrix contributes nothing). Both use m_agg = ``n_samples``.
* ``agg_mean``: ω = (1/k, …, 1/k) (Rieger & Hansen's AGG-Mean).
* ``agg_var``: (1/k) Σ_i φ_i / (σ + ε) = μ / (σ + ε), σ the feature-wise population std of
  the k maps (Decker et al.'s statement of Rieger & Hansen's AGG-Var, §3.2; computed by
  ``pixel_aggregators.var`` with its ε = 1 and δ = ``eps``). Per-feature weights, so no
  ω is returned (None). ε = 0.226 (the reference code's).

**Maps.** Each explainer i of ``explainers`` (registry name -> options for
``evaluators.maps.explain``) explains the target class (images: the predicted class
unless given, fixed for the perturbed copies as well; tabular: the positive class).
Image attributions (N, C, H, W) are summed over channels (``Modality.reduce(how=reduce)``,
``"sum"``), then post-processed as the reference's explainers do by default: absolute value
(``absolute``), min-max to [0, 1] (``normalisation="linear"``, any name of
``normalisations.NORMALISATIONS``; a constant map becomes zeros), and a Gaussian smoothing
of σ = 1 (``smoothing``; torchvision's reflect padding, kernel to 4σ). Tabular maps (N, d)
are not smoothed (``smoothing`` must stay None or 0). The same post-processing applies to
the maps at perturbed inputs; the aggregate E ω is not post-processed.

Maps with NaN or ±inf are refused as soon as an explainer returns them (``InputError``
naming the explainer and the map), and so are inputs x with NaN or ±inf.

Every optimised aggregator (registered in ``AGGREGATORS`` with ``kind="optimised"``) is
``(model, x, target, explainers, **options)
-> (maps (N, *S), weights (N, k) float64 or None)``, with x on the model's device and
``target`` already resolved (``resolve_targets``); ``optimised_aggregation`` checks the
arguments and resolves the target. Options: those of ``explainer_maps`` (reduce, absolute,
normalisation, smoothing, max_batch) and each function's own.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from evaluators.aggregators.normalisations import normalise
from evaluators.aggregators.pixel_aggregators import aggregate
from evaluators.aggregators.registry import AGGREGATORS
from evaluators.aggregators.simplex_qp import solve_simplex_qp
from foundation.finite import check_finite
from evaluators.maps import explain, explainer_names
from evaluators.metrics.infidelity import least_squares_scale, subset_perturbations
from evaluators.metrics.model_scores import check_inputs, resolve_targets
from evaluators.metrics.perturbations import (
    BLUR_SIGMA,
    COMPACTNESS,
    N_SEGMENTS,
    RADIUS,
    SHARE,
    check_count,
    check_real,
    gaussian_blur,
    uniform_noise,
)
from foundation.batching import resolve_max_batch
from foundation.devices import model_device
from foundation.errors import InputError
from foundation.modality import Modality, modality_of
from foundation.seeds import derived_seed, input_index
from lightning_modules.interface import eval_mode

M_AGG = 50  # Decker et al.: weights fitted on 50 samples
LAMBDA = 0.5  # AGG_opt's share of Γ_robust
SMOOTHING = 1.0  # the reference's scipy.ndimage.gaussian_filter(sigma=(1, 1)) of every image map
VAR_EPS = 0.226  # the reference code's constant (it adds it to the variance); see agg_var


def postprocess(maps: torch.Tensor, modality: Modality, absolute: bool = True, normalisation: str = "linear",
                smoothing: float | None = None) -> torch.Tensor:  # fmt: skip
    """Maps (R, *S) of ``modality`` as the reference post-processes them: |φ| (``absolute``), then
    ``normalise(·, normalisation)`` per map, then (units with neighbours, ``Modality.spatial``:
    pixels) a Gaussian smoothing of σ = ``smoothing`` (None: 1 on images, none on tabular rows; 0: none)."""
    if absolute:
        maps = maps.abs()
    maps = normalise(maps, normalisation, modality.map_dims)
    if not modality.spatial:
        if smoothing:
            raise InputError(f"option smoothing={smoothing!r}: {modality.kind} {modality.unit} maps have no "
                             "neighbourhood to smooth over; expected None or 0")  # fmt: skip
        return maps
    sigma = SMOOTHING if smoothing is None else check_real("smoothing", smoothing, 0, low_open=False)
    return gaussian_blur(maps, sigma) if sigma > 0 else maps


def explainer_maps(model: nn.Module, x: torch.Tensor, target: torch.Tensor | None, explainers: dict[str, dict],
                   reduce: str = "sum", absolute: bool = True, normalisation: str = "linear",
                   smoothing: float | None = None, max_batch: int | None = None, seed: int = 0,
                   index: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """(N, k, *S) the post-processed maps of inputs x (N, ...) by the k explainers, in
    ``explainers``' order: images reduced over channels by ``Modality.reduce(how=reduce)``; see
    the module's docstring. ``target``: a LongTensor (N,) or None (the default). Every explainer
    draws from ``seed`` and the inputs' indices ``index`` (``evaluators.maps.explain``)
    unless its options name a seed of their own. An explainer's maps with NaN or ±inf are
    refused, the error naming it."""
    modality = modality_of(x)
    stack = []
    for name, options in explainers.items():
        options = {"seed": seed, "index": index, **(options or {})}
        maps = explain(model, x, name, target=target, max_batch=max_batch, **options)
        maps = modality.reduce(maps, reduce) if modality.recognises(maps) else maps
        expected = modality.scored_shape(x)
        if maps.shape != expected:
            raise InputError(f"explainer {name!r} gave maps of shape {tuple(maps.shape)}; expected {tuple(expected)} "
                             "(explain a population's members one at a time)")  # fmt: skip
        check_finite(maps, f"explainer {name!r}", "map")
        stack.append(postprocess(maps.detach(), modality, absolute, normalisation, smoothing))
    return torch.stack(stack, 1)


def combine(maps: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(N, *S) Σ_i ω_i φ_i of maps (N, k, *S) and weights (N, k)."""
    return torch.einsum("nk...,nk->n...", maps, weights.to(maps))


def robust_gamma(model: nn.Module, x: torch.Tensor, target: torch.Tensor | None, explainers: dict[str, dict],
                 maps: torch.Tensor, n_samples: int = M_AGG, radius: float = RADIUS, seed: int = 0,
                 **map_options) -> torch.Tensor:  # fmt: skip
    """(N, k, k) float64 Γ_robust = (1/m) Σ_s (E − E_s)ᵀ(E − E_s) of inputs x with maps E
    ``maps`` (N, k, *S), E_s the maps (same ``map_options``) at x + ε_s, ε_s ~ U[−radius,
    radius] from the ``"fitting"`` stream; explained max(1, ⌊max_batch / m⌋) inputs per call,
    the explainers drawing from (``derived_seed(seed, 1)``, i·m + s) for sample s of the input
    with index i (``map_options["index"]``, consecutive, default 0 … N − 1), its noise from index i."""
    n_samples = check_count("n_samples", n_samples)
    per_call = max(1, resolve_max_batch(map_options.get("max_batch"), x) // n_samples)
    index = torch.tensor(input_index(map_options.pop("index", None), len(x)))
    gammas = []
    for start in range(0, len(x), per_call):
        inputs = slice(start, min(start + per_call, len(x)))
        noisy = uniform_noise(x[inputs], n_samples, radius, seed, "fitting", offset=int(index[start]))
        noisy = noisy.flatten(0, 1)
        rows_target = None if target is None else target[inputs].repeat_interleave(n_samples)
        rows_index = (index[inputs, None] * n_samples + torch.arange(n_samples)).flatten()
        perturbed = explainer_maps(model, noisy, rows_target, explainers, **map_options,
                                   seed=derived_seed(seed, 1), index=rows_index)  # fmt: skip
        clean = maps[inputs].flatten(2).double()
        difference = clean[:, None] - perturbed.flatten(2).double().view(-1, n_samples, *clean.shape[1:])
        gammas.append(torch.einsum("nskd,nsld->nkl", difference, difference) / n_samples)
    return torch.cat(gammas)


def faith_gamma(model: nn.Module, x: torch.Tensor, target: torch.Tensor | None, maps: torch.Tensor,
                n_samples: int = M_AGG, share: float = SHARE, baseline: torch.Tensor | None = None,
                blur_sigma: float = BLUR_SIGMA, n_segments: int = N_SEGMENTS, compactness: float = COMPACTNESS,
                seed: int = 0, max_batch: int | None = None, offset: int = 0) -> torch.Tensor:  # fmt: skip
    """(N, k, k) float64 Γ_faith = (1/m) GᵀG, G_{s,i} = β_i I_sᵀφ_i − Δ_s (the module's
    docstring), of inputs x with maps ``maps`` (N, k, *S), on m subset perturbations from
    the ``"fitting"`` stream (options as ``subset_perturbations``)."""
    samples = subset_perturbations(model, x, target, n_samples, share, baseline, blur_sigma, n_segments, compactness,
                                   seed, "fitting", max_batch, offset=offset)  # fmt: skip
    sums = samples.attribution_sums(maps.movedim(1, -1).double())  # (N, m, k)
    deltas = samples.deltas.double()
    columns = least_squares_scale(sums, deltas)[:, None] * sums - deltas[..., None]
    return columns.transpose(1, 2) @ columns / columns.shape[1]


def _frobenius_normalised(gamma: torch.Tensor) -> torch.Tensor:
    norm = torch.linalg.matrix_norm(gamma)[:, None, None]
    return torch.where(norm > 0, gamma / torch.where(norm > 0, norm, 1), 0)


def opt_gamma(robust: torch.Tensor, faith: torch.Tensor, lam: float = LAMBDA) -> torch.Tensor:
    """AGG_opt's Γ = λ Γ_robust / ‖Γ_robust‖_F + (1 − λ) Γ_faith / ‖Γ_faith‖_F."""
    return lam * _frobenius_normalised(robust) + (1 - lam) * _frobenius_normalised(faith)


def variance_aggregate(maps: torch.Tensor, map_dims: int, eps: float = VAR_EPS) -> torch.Tensor:
    """AGG_var of maps (N, k, *S): μ / (σ + ε) per feature over the k maps."""
    return aggregate(maps.movedim(1, 0), "var", map_dims, eps=1.0, delta=eps)


# --- the aggregators: (model, x, target, explainers, **options) -> (maps, weights or None) ------------------
@AGGREGATORS.register("agg_mean", kind="optimised", needs=("model", "x", "explainers"))
def agg_mean(model, x, target, explainers, **map_options):
    """Equal weights 1/k."""
    maps = explainer_maps(model, x, target, explainers, **map_options)
    weights = torch.full(maps.shape[:2], 1 / maps.shape[1], dtype=torch.float64, device=maps.device)
    return combine(maps, weights), weights


@AGGREGATORS.register("agg_var", kind="optimised", needs=("model", "x", "explainers"))
def agg_var(model, x, target, explainers, eps: float = VAR_EPS, **map_options):
    """μ / (σ + ε) per feature; no weights."""
    maps = explainer_maps(model, x, target, explainers, **map_options)
    return variance_aggregate(maps, modality_of(x).map_dims, eps), None


@AGGREGATORS.register("agg_robust", kind="optimised", needs=("model", "x", "explainers"))
def agg_robust(model, x, target, explainers, n_samples: int = M_AGG, radius: float = RADIUS, seed: int = 0,
               **map_options):  # fmt: skip
    """ω = argmin ωᵀΓ_robust ω."""
    maps = explainer_maps(model, x, target, explainers, seed=seed, **map_options)
    weights = solve_simplex_qp(robust_gamma(model, x, target, explainers, maps, n_samples, radius, seed,
                                            **map_options))  # fmt: skip
    return combine(maps, weights), weights


@AGGREGATORS.register("agg_faith", kind="optimised", needs=("model", "x", "explainers"))
def agg_faith(model, x, target, explainers, n_samples: int = M_AGG, share: float = SHARE,
              baseline: torch.Tensor | None = None, blur_sigma: float = BLUR_SIGMA, n_segments: int = N_SEGMENTS,
              compactness: float = COMPACTNESS, seed: int = 0, **map_options):  # fmt: skip
    """ω = argmin ωᵀΓ_faith ω."""
    maps = explainer_maps(model, x, target, explainers, seed=seed, **map_options)
    gamma = faith_gamma(model, x, target, maps, n_samples, share, baseline, blur_sigma, n_segments, compactness, seed,
                        map_options.get("max_batch"))  # fmt: skip
    weights = solve_simplex_qp(gamma)
    return combine(maps, weights), weights


@AGGREGATORS.register("agg_opt", kind="optimised", needs=("model", "x", "explainers"))
def agg_opt(model, x, target, explainers, n_samples: int = M_AGG, radius: float = RADIUS, share: float = SHARE,
            baseline: torch.Tensor | None = None, blur_sigma: float = BLUR_SIGMA, n_segments: int = N_SEGMENTS,
            compactness: float = COMPACTNESS, seed: int = 0, lam: float = LAMBDA, **map_options):  # fmt: skip
    """ω = argmin ωᵀ(λ Γ_robust / ‖Γ_robust‖_F + (1 − λ) Γ_faith / ‖Γ_faith‖_F)ω."""
    lam = check_real("lam", lam, 0, 1, low_open=False)
    maps = explainer_maps(model, x, target, explainers, seed=seed, **map_options)
    robust = robust_gamma(model, x, target, explainers, maps, n_samples, radius, seed, **map_options)
    faith = faith_gamma(model, x, target, maps, n_samples, share, baseline, blur_sigma, n_segments, compactness, seed,
                        map_options.get("max_batch"))  # fmt: skip
    weights = solve_simplex_qp(opt_gamma(robust, faith, lam))
    return combine(maps, weights), weights


def aggregator_options(method: str) -> list[str]:
    """The keyword options ``optimised_aggregation`` accepts for ``method``."""
    own = list(inspect.signature(AGGREGATORS[method].obj).parameters)[4:-1]
    return own + list(inspect.signature(explainer_maps).parameters)[4:]


def optimised_aggregation(model: nn.Module, x: torch.Tensor, method: str, explainers: dict[str, dict], target=None,
                          **options) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """The aggregate maps (N, *S) of inputs x (images (N, C, H, W) or tabular rows (N, d)) by
    the optimised aggregator ``method`` of ``AGGREGATORS`` over ``explainers`` (registry name -> options of
    ``evaluators.maps.explain``), and its weights (N, k) (None for ``agg_var``), on the
    model's device; ``target``: None (the default target, ``interface.default_targets``), an
    int or N labels. See the module's docstring for the options."""
    if method not in AGGREGATORS.names(kind="optimised"):
        raise InputError(f"unknown optimised aggregator {method!r}; expected one of "
                         f"{AGGREGATORS.names(kind='optimised')}")  # fmt: skip
    check_inputs(model, x)
    names = explainer_names(model, x)
    if not isinstance(explainers, dict) or not explainers or any(
            name not in names or not isinstance(o, (dict, type(None))) for name, o in explainers.items()):  # fmt: skip
        raise InputError(f"option explainers={explainers!r}; expected a non-empty dict of explainer names (some of "
                         f"{names}) to their options (a dict or None)")  # fmt: skip
    unknown = sorted(set(options) - set(aggregator_options(method)))
    if unknown:
        raise InputError(f"option(s) {unknown} for optimised aggregator {method!r}; expected some of "
                         f"{aggregator_options(method)}")  # fmt: skip
    with eval_mode(model):  # tabular explainers do not switch modes themselves (dropout)
        x = x.detach().to(model_device(model, x))
        target = resolve_targets(model, x, target, options.get("max_batch"))
        return AGGREGATORS[method].obj(model, x, target, explainers, **options)


# The public, checked entry points (maps with NaN or ±inf refused: tests/faults/test_nonfinite_maps.py);
# the other functions here are steps inside ``optimised_aggregation`` and ``explainer_maps``, which
# check their maps once.
__all__ = ["aggregator_options", "explainer_maps", "optimised_aggregation",
           "variance_aggregate"]
