"""Aggregators of an ensemble of normalised explanation maps (Mahlau & Nolde 2022, §3.2).

``aggregate(stack, name, map_dims=2, **params)`` merges a stack (k, N, *S) of k base
attributions of N inputs, already normalised (``evaluators.aggregators.normalisations``; the
paper's Table 1 uses z-scores), into one map per input, (N, *S): S is (H, W) for pixel
maps (``map_dims=2``) and (d,) for tabular feature maps (``map_dims=1``). Every
aggregator but ``rbm`` works pixel by pixel, in torch, batched on the stack's device; the
output has the stack's dtype (float32 and float64 both work).

Symbols (the paper's): E the k maps of one input; per pixel (i, j), eqs. 6-7,
μ = (1/k) Σ_e e_ij and σ = √((1/k) Σ_e (e_ij − μ)²) (the population std over the k
maps); E⁺ = max_ij μ, the mean attribution of the input's most important pixel; Φ and φ
the standard normal CDF and density; the gap D = μ − E⁺ − ε and Z = D / σ.

* ``mean``, eq. 5: μ.
* ``percentile(q=25)``: the q-th percentile of the k values, linear interpolation between
  the sorted values at virtual index (k − 1) q / 100 (numpy's default method); q = 50 is
  the median, 25 the lower quartile of Table 1.
* ``ucb(eps=-0.5)``, eq. 8: μ + ε σ.
* ``pi(eps=-4)``, eq. 9: Φ(Z).
* ``ei(eps=-6)``, eq. 10: Φ(Z) D + σ φ(Z).
* ``ci``: ``ei`` with the contextual exploration rate of eq. 11 (Jasrasaria & Pyzer-Knapp),
  ε = (1 / (P E⁺)) Σ_ij σ², P the number of pixels, one ε per input, taken as written
  (a negative E⁺ gives a negative ε); where E⁺ = 0 the ratio is undefined and ε = 0.
* ``api(a=-7, b=2, n=91)``, ``aei(a=-10, b=5, n=151)``, eqs. 14-15: PI and EI averaged
  over n exploration rates ε_m = a + m (b − a) / (n − 1), m = 0 … n − 1, which stand for
  the averages over ε ∈ [a, b] of eqs. 12-13 (the paper does not give n; the error of the
  n-point mean: docs/aggregation.md).
* ``var(eps=1e-7, delta=1e-7)``, eq. 16: (1/k) Σ_e e_ij / (ε σ + δ) = μ / (ε σ + δ), with
  ε ≥ 0 and δ > 0 (the paper does not state δ; why 1e-7: docs/aggregation.md). With both
  at 1e-7, ``var`` ranks pixels by μ / (σ + 1).
* ``rbm(alpha=1e-4, k=100, batch_size=10, seed=0)``: Borisov et al. (2021), see :func:`rbm`.

Where σ = 0 (the k maps agree at a pixel) Z is undefined and the limit σ → 0+ is used:
PI = 1, ½, 0 as D > 0, D = 0, D < 0; EI = max(D, 0) (so CI likewise); API and AEI average
those limits over their ε grid; VAR = μ / δ. σ is set to exactly 0 where the k values are
equal. No aggregator returns NaN on finite input, and ``aggregate`` takes no other: a
stack holding NaN or ±inf is refused (``InputError`` naming the stack entry and its map).
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable

import numpy as np
import torch
from sklearn.neural_network import BernoulliRBM

from evaluators.aggregators.normalisations import check_maps, linear, normalise
from evaluators.aggregators.registry import AGGREGATORS
from foundation.finite import check_finite
from evaluators.metrics.perturbations import check_count
from foundation.errors import InputError


def _real(option: str, value, expected: str = "a finite real number", valid: Callable = lambda v: True) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or not valid(value):
        raise InputError(f"option {option}={value!r}; expected {expected}")
    return float(value)


def moments(stack: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eqs. 6-7: per-pixel mean μ and population std σ over the k maps of ``stack``
    (k, N, *S), both (N, *S); σ is exactly 0 where the k values are equal."""
    sigma = stack.std(0, correction=0)
    return stack.mean(0), torch.where(stack.amax(0) > stack.amin(0), sigma, 0)


def best_mean(mu: torch.Tensor, map_dims: int) -> torch.Tensor:
    """E⁺ = max over each map's pixels of μ, shaped to broadcast against μ (N, *S)."""
    return mu.flatten(-map_dims).amax(-1).reshape(mu.shape[:-map_dims] + (1,) * map_dims)


def _gap(stack: torch.Tensor, map_dims: int) -> tuple[torch.Tensor, torch.Tensor]:
    """μ − E⁺ and σ."""
    mu, sigma = moments(stack)
    return mu - best_mean(mu, map_dims), sigma


def _z(gap: torch.Tensor, sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Z = D / σ where σ > 0 (D where σ = 0, unused there) and the mask σ > 0."""
    positive = sigma > 0
    return gap / torch.where(positive, sigma, 1), positive


def improvement_probability(gap: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Eq. 9 given D and σ: Φ(D / σ); where σ = 0, 1, ½ or 0 as D >, =, < 0."""
    z, positive = _z(gap, sigma)
    return torch.where(positive, torch.special.ndtr(z), 0.5 * (1 + torch.sign(gap)))


def expected_improvement(gap: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Eq. 10 given D and σ: Φ(Z) D + σ φ(Z); where σ = 0, max(D, 0)."""
    z, positive = _z(gap, sigma)
    density = torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return torch.where(positive, torch.special.ndtr(z) * gap + sigma * density, gap.clamp(min=0))


@AGGREGATORS.register("mean", kind="pixel", needs=("maps",))
def mean(stack: torch.Tensor, map_dims: int = 2) -> torch.Tensor:
    """Eq. 5: the mean of the k maps."""
    return stack.mean(0)


@AGGREGATORS.register("percentile", kind="pixel", needs=("maps",))
def percentile(stack: torch.Tensor, map_dims: int = 2, q: float = 25.0) -> torch.Tensor:
    """The q-th percentile of the k values per pixel, interpolated linearly between the
    sorted values at virtual index (k − 1) q / 100 (numpy's default ``linear`` method)."""
    q = _real("q", q, "a number in [0, 100]", lambda v: 0 <= v <= 100)
    ordered = stack.sort(0).values
    position = (stack.shape[0] - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, stack.shape[0] - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@AGGREGATORS.register("ucb", kind="pixel", needs=("maps",))
def ucb(stack: torch.Tensor, map_dims: int = 2, eps: float = -0.5) -> torch.Tensor:
    """Eq. 8: μ + ε σ."""
    eps = _real("eps", eps)
    mu, sigma = moments(stack)
    return mu + eps * sigma


@AGGREGATORS.register("pi", kind="pixel", needs=("maps",))
def pi(stack: torch.Tensor, map_dims: int = 2, eps: float = -4.0) -> torch.Tensor:
    """Eq. 9: Φ((μ − E⁺ − ε) / σ) (limits where σ = 0: see the module's docstring)."""
    eps = _real("eps", eps)
    gap, sigma = _gap(stack, map_dims)
    return improvement_probability(gap - eps, sigma)


@AGGREGATORS.register("ei", kind="pixel", needs=("maps",))
def ei(stack: torch.Tensor, map_dims: int = 2, eps: float = -6.0) -> torch.Tensor:
    """Eq. 10: Φ(Z) (μ − E⁺ − ε) + σ φ(Z) (max(μ − E⁺ − ε, 0) where σ = 0)."""
    eps = _real("eps", eps)
    gap, sigma = _gap(stack, map_dims)
    return expected_improvement(gap - eps, sigma)


@AGGREGATORS.register("ci", kind="pixel", needs=("maps",))
def ci(stack: torch.Tensor, map_dims: int = 2) -> torch.Tensor:
    """Contextual improvement: eq. 10 with ε = mean over pixels of σ², divided by E⁺
    (eq. 11), per input; ε = 0 where E⁺ = 0."""
    mu, sigma = moments(stack)
    top = best_mean(mu, map_dims)
    spread = (sigma * sigma).flatten(-map_dims).mean(-1).reshape(top.shape)
    nonzero = top != 0
    eps = torch.where(nonzero, spread / torch.where(nonzero, top, 1), 0)
    return expected_improvement(mu - top - eps, sigma)


def _exploration_grid(a, b, n) -> list[float]:
    """Eqs. 14-15's n rates ε_m = a + m (b − a) / (n − 1)."""
    a, b = _real("a", a), _real("b", b, f"a finite real number > a={a}", lambda v: v > a)
    n = check_count("n", n, 2)
    return [a + m * (b - a) / (n - 1) for m in range(n)]


@AGGREGATORS.register("api", kind="pixel", needs=("maps",))
def api(stack: torch.Tensor, map_dims: int = 2, a: float = -7.0, b: float = 2.0, n: int = 91) -> torch.Tensor:
    """Eq. 14: PI averaged over n evenly spaced ε in [a, b] (eq. 12's average; n: see the
    module's docstring)."""
    grid = _exploration_grid(a, b, n)
    gap, sigma = _gap(stack, map_dims)
    return sum(improvement_probability(gap - eps, sigma) for eps in grid) / len(grid)


@AGGREGATORS.register("aei", kind="pixel", needs=("maps",))
def aei(stack: torch.Tensor, map_dims: int = 2, a: float = -10.0, b: float = 5.0, n: int = 151) -> torch.Tensor:
    """Eq. 15: EI averaged over n evenly spaced ε in [a, b] (eq. 13's average)."""
    grid = _exploration_grid(a, b, n)
    gap, sigma = _gap(stack, map_dims)
    return sum(expected_improvement(gap - eps, sigma) for eps in grid) / len(grid)


@AGGREGATORS.register("var", kind="pixel", needs=("maps",))
def var(stack: torch.Tensor, map_dims: int = 2, eps: float = 1e-7, delta: float = 1e-7) -> torch.Tensor:
    """Eq. 16: (1/k) Σ_e e / (ε σ + δ) = μ / (ε σ + δ), ε ≥ 0, δ > 0 (δ: see the module's docstring)."""
    eps = _real("eps", eps, "a finite number >= 0", lambda v: v >= 0)
    delta = _real("delta", delta, "a finite number > 0", lambda v: v > 0)
    mu, sigma = moments(stack)
    return mu / (eps * sigma + delta)


def rbm_map(feed: np.ndarray, mean_map: np.ndarray, alpha: float, k: int, batch_size: int, seed: int) -> np.ndarray:
    """One input's RBM aggregate: ``feed`` (P, k maps) in [0, 1], one row per pixel;
    returns P(h = 1 | v) of the one hidden unit per pixel, flipped to 1 − P where it
    covaries negatively with ``mean_map`` (P,)."""
    machine = BernoulliRBM(n_components=1, learning_rate=alpha, n_iter=k, batch_size=batch_size, random_state=seed)
    hidden = machine.fit(feed).transform(feed)[:, 0]
    covariance = np.dot(hidden - hidden.mean(), mean_map - mean_map.mean())
    return 1 - hidden if covariance < 0 else hidden


@AGGREGATORS.register("rbm", kind="pixel", needs=("maps",))
def rbm(stack: torch.Tensor, map_dims: int = 2, alpha: float = 1e-4, k: int = 100, batch_size: int = 10,
        seed: int = 0) -> torch.Tensor:  # fmt: skip
    """Borisov et al. (2021): a restricted Boltzmann machine fitted per input.

    Their unsupervised ensemble treats the pixels of one input as the samples and its k
    base attributions as the visible units: each base map is min-max scaled to [0, 1]
    over its pixels (``normalisations.linear``, the scaling of their code; a constant map
    feeds zeros; negative values are not clipped, as the maps arrive already
    normalised, z-scored in the paper's Table 1), a Bernoulli RBM with one hidden unit is
    fitted to those P rows by scikit-learn's ``BernoulliRBM`` (persistent contrastive
    divergence; ``learning_rate=alpha``, ``n_iter=k`` epochs, ``batch_size``,
    ``random_state=seed`` for every input, so an input's map does not depend on the
    others in the batch), and the aggregated map is the hidden unit's activation
    probability P(h = 1 | v) per pixel, in [0, 1], flipped to 1 − P(h = 1 | v) where it
    covaries negatively with the mean map μ (eq. 5; why: docs/aggregation.md). Runs in
    float64 through NumPy on the CPU, one input at a time; the result returns to the
    stack's device and dtype. Here k is the paper's number of training
    iterations, not the ensemble size.
    """
    alpha = _real("alpha", alpha, "a finite number > 0", lambda v: v > 0)
    k, batch_size = check_count("k", k, 1), check_count("batch_size", batch_size, 1)
    seed = check_count("seed", seed, 0)
    maps = stack.detach().to("cpu", torch.float64)
    pixels = math.prod(stack.shape[-map_dims:])
    feed = linear(maps, map_dims).reshape(stack.shape[0], -1, pixels).permute(1, 2, 0).numpy()
    mean_maps = maps.mean(0).reshape(-1, pixels).numpy()
    merged = np.stack([rbm_map(f, m, alpha, k, batch_size, seed) for f, m in zip(feed, mean_maps)])
    return torch.from_numpy(merged).reshape(stack.shape[1:]).to(device=stack.device, dtype=stack.dtype)


def aggregator_options(name: str) -> list[str]:
    """The keyword options of pixel aggregator ``name`` (those after stack and map_dims)."""
    return list(inspect.signature(AGGREGATORS[name].obj).parameters)[2:]


def aggregate(stack: torch.Tensor, name: str, map_dims: int = 2, **params) -> torch.Tensor:
    """Merge ``stack`` (k, N, *S) of k normalised maps, S its last ``map_dims`` dims, into
    (N, *S) by the pixel aggregator ``name`` of ``AGGREGATORS`` with options ``params`` (see the module's
    docstring); same dtype and device as ``stack``. A stack with NaN or ±inf is refused."""
    if name not in AGGREGATORS.names(kind="pixel"):
        raise InputError(f"unknown pixel aggregator {name!r}; expected one of {AGGREGATORS.names(kind='pixel')}")
    check_maps(stack, map_dims, 2, "(k, N, *S) with S the last map_dims dims")
    check_finite(stack, "stack", "map", map_dims, stacked=True)
    unknown = sorted(set(params) - set(aggregator_options(name)))
    if unknown:
        raise InputError(f"option(s) {unknown} for pixel aggregator {name!r}; expected some of "
                         f"{aggregator_options(name)}")
    return AGGREGATORS[name].obj(stack, map_dims, **params)


def aggregate_all(base: dict[str, torch.Tensor], normalisation: str, aggregators: dict[str, dict],
                  map_dims: int = 2) -> dict[str, torch.Tensor]:  # fmt: skip
    """Every aggregator's map of base maps ``base`` (name -> (N, *S)), each normalised by
    ``normalisation`` and stacked in ``base``'s order: aggregator name -> (N, *S). Base maps
    with NaN or ±inf are refused, the error naming their key."""
    stack = torch.stack([normalise(m, normalisation, map_dims, f"base maps {name!r}") for name, m in base.items()])
    return {name: aggregate(stack, name, map_dims, **(params or {})) for name, params in aggregators.items()}


# The public, checked entry points (maps with NaN or ±inf refused: tests/faults/test_nonfinite_maps.py);
# the other functions here are steps inside ``aggregate``, which checks their maps once.
__all__ = ["aggregate", "aggregate_all", "aggregator_options"]
