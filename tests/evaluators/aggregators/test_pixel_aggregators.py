"""Pixel aggregators (Mahlau & Nolde 2022, eqs. 5-16) against direct float64 NumPy/SciPy
computations written here, map by map and pixel by pixel; the σ = 0 limits, ties and constant
maps; float32; the RBM aggregator against scikit-learn; bad input. The normalisations (eqs. 1-4):
test_normalisations.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate
from scipy.stats import norm, spearmanr
from sklearn.neural_network import BernoulliRBM

from evaluators.aggregators.normalisations import normalise
from evaluators.aggregators.pixel_aggregators import aggregate
from evaluators.aggregators.registry import AGGREGATORS
from foundation.errors import InputError

SHAPES = {2: (3, 4, 5), 1: (3, 7)}  # map_dims -> (N, *S)
OPTIONS = {  # non-default options, besides the defaults ({})
    "mean": {}, "percentile": {"q": 62.5}, "ucb": {"eps": 0.7}, "pi": {"eps": 0.0}, "ei": {"eps": 0.3},
    "ci": {}, "api": {"a": -1.0, "b": 1.5, "n": 6}, "aei": {"a": -2.0, "b": 0.5, "n": 4},
    "var": {"eps": 0.5, "delta": 0.25},
}


# ---------- references: one map, one pixel at a time, float64 ----------

def reference_pi(d: float, s: float) -> float:
    if s > 0:
        return norm.cdf(d / s)
    return 1.0 if d > 0 else 0.5 if d == 0 else 0.0


def reference_ei(d: float, s: float) -> float:
    if s > 0:
        return norm.cdf(d / s) * d + s * norm.pdf(d / s)
    return max(d, 0.0)


def reference_aggregate(stack: np.ndarray, name: str, map_dims: int, **o) -> np.ndarray:
    """Eqs. 5-16 for each input of ``stack`` (k, N, *S) separately, pixel by pixel."""
    k, pixels = stack.shape[0], math.prod(stack.shape[-map_dims:])
    images = stack.reshape(k, -1, pixels)
    out = np.zeros(images.shape[1:])
    for i in range(images.shape[1]):
        e = images[:, i]
        mu = e.sum(0) / k
        sd = np.sqrt(((e - mu) ** 2).sum(0) / k)
        sd[e.max(0) == e.min(0)] = 0.0  # the k maps agree: σ = 0 exactly
        top = mu.max()
        for p in range(pixels):
            if name == "mean":
                out[i, p] = mu[p]
            elif name == "percentile":
                out[i, p] = np.percentile(e[:, p], o.get("q", 25))
            elif name == "ucb":
                out[i, p] = mu[p] + o.get("eps", -0.5) * sd[p]
            elif name == "pi":
                out[i, p] = reference_pi(mu[p] - top - o.get("eps", -4), sd[p])
            elif name == "ei":
                out[i, p] = reference_ei(mu[p] - top - o.get("eps", -6), sd[p])
            elif name == "ci":
                eps = (sd ** 2).sum() / (pixels * top) if top != 0 else 0.0
                out[i, p] = reference_ei(mu[p] - top - eps, sd[p])
            elif name in ("api", "aei"):
                a, b, n = o.get("a", -7 if name == "api" else -10), o.get("b", 2 if name == "api" else 5), \
                    o.get("n", 91 if name == "api" else 151)
                g = reference_pi if name == "api" else reference_ei
                out[i, p] = sum(g(mu[p] - top - (m * (b - a) / (n - 1) + a), sd[p]) for m in range(n)) / n
            elif name == "var":
                out[i, p] = np.mean(e[:, p] / (o.get("eps", 1e-7) * sd[p] + o.get("delta", 1e-7)))
    return out.reshape(stack.shape[1:])


def random_stack(k: int, map_dims: int, seed: int) -> np.ndarray:
    """z-scored maps rounded to halves (ties within and between maps), then: input 0's k
    maps all equal (σ = 0 everywhere), input 1's maps agreeing on 3 pixels, and one
    constant base map for input 2."""
    rng = np.random.default_rng(seed)
    stack = normalise(torch.from_numpy(rng.normal(size=(k,) + SHAPES[map_dims])), "z", map_dims).numpy()
    stack = np.round(stack * 2) / 2
    flat = stack.reshape(k, stack.shape[1], -1)  # a view
    flat[:, 1, :3] = rng.normal(size=3)
    stack[:, 0] = stack[0, 0]
    stack[1, 2] = 0.7
    return stack


# ---------- aggregators ----------

@pytest.mark.parametrize("map_dims", [2, 1])
@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.parametrize("default", [True, False])
def test_aggregators_match_reference(name, map_dims, default):
    options = {} if default else OPTIONS[name]
    stack = random_stack(5, map_dims, seed=2)
    out = aggregate(torch.from_numpy(stack), name, map_dims, **options)
    assert out.shape == stack.shape[1:] and out.dtype == torch.float64 and torch.isfinite(out).all()
    expected = reference_aggregate(stack, name, map_dims, **options)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-10, atol=1e-12)
    out32 = aggregate(torch.from_numpy(stack).float(), name, map_dims, **options)
    assert out32.dtype == torch.float32 and torch.isfinite(out32).all()
    scale = np.abs(expected).max()
    np.testing.assert_allclose(out32.numpy(), expected, rtol=1e-4, atol=1e-5 * scale)


def test_sigma_zero_limits_by_hand():
    # one input, 2 maps that agree everywhere: μ = (0, 1, 2, 2), E⁺ = 2, σ = 0
    stack = torch.tensor([[0.0, 1.0, 2.0, 2.0]] * 2, dtype=torch.float64).reshape(2, 1, 4)
    assert aggregate(stack, "pi", 1, eps=0.0).tolist() == [[0.0, 0.0, 0.5, 0.5]]
    assert aggregate(stack, "pi", 1, eps=-1.5).tolist() == [[0.0, 1.0, 1.0, 1.0]]
    assert aggregate(stack, "ei", 1, eps=-1.5).tolist() == [[0.0, 0.5, 1.5, 1.5]]  # max(μ − 2 + 1.5, 0)
    assert aggregate(stack, "ci", 1).tolist() == [[0.0, 0.0, 0.0, 0.0]]  # ε = 0 / 2 = 0
    assert aggregate(stack, "var", 1, eps=3.0, delta=0.5).tolist() == [[0.0, 2.0, 4.0, 4.0]]  # μ / δ
    # ε ∈ {−1, 0, 1}; D − ε at pixel 1: 0, −1, −2 -> (½ + 0 + 0) / 3; at pixels 2, 3: 1, 0, −1 -> ½
    assert aggregate(stack, "api", 1, a=-1.0, b=1.0, n=3).flatten().tolist() == pytest.approx([0, 1 / 6, 0.5, 0.5])
    # the limits are the σ -> 0+ values: maps 1e-9 apart give (nearly) the same numbers
    close = stack.clone()
    close[1] += 1e-9
    for name, options in [("pi", {"eps": -1.5}), ("ei", {"eps": -1.5}), ("aei", {})]:
        torch.testing.assert_close(aggregate(close, name, 1, **options), aggregate(stack, name, 1, **options),
                                   rtol=0, atol=1e-8)


def test_all_zero_stack_gives_no_nan():
    stack = torch.zeros(3, 2, 4, 4)
    for name in AGGREGATORS.names(kind="pixel"):
        assert torch.isfinite(aggregate(stack, name)).all(), name


def test_eq14_average_is_within_its_bound_of_the_integral():
    """Eqs. 14-15 stand for eqs. 12-13: for PI and EI, decreasing in ε, the n-point mean is
    within |g(a) − g(b)| / n of the exact average, here by numerical quadrature."""
    stack = random_stack(4, 1, seed=3)[:, 1:]
    for name, g, (a, b, n) in [("api", reference_pi, (-7, 2, 91)), ("aei", reference_ei, (-10, 5, 151))]:
        out = aggregate(torch.from_numpy(stack), name, 1).numpy()
        for i in range(stack.shape[1]):
            mu, sd = stack[:, i].mean(0), stack[:, i].std(0)
            for p in range(stack.shape[2]):
                d = mu[p] - mu.max()
                exact = integrate.quad(lambda eps: g(d - eps, sd[p]), a, b, points=[d], limit=200)[0] / (b - a)
                assert abs(out[i, p] - exact) <= abs(g(d - a, sd[p]) - g(d - b, sd[p])) / n + 1e-7


# ---------- RBM (Borisov et al. 2021) ----------

def test_rbm_matches_a_direct_bernoulli_rbm_and_is_deterministic():
    stack = random_stack(4, 2, seed=4)
    out = aggregate(torch.from_numpy(stack), "rbm", alpha=1e-2, k=20, seed=7)
    assert out.shape == stack.shape[1:] and out.dtype == torch.float64
    assert torch.equal(out, aggregate(torch.from_numpy(stack), "rbm", alpha=1e-2, k=20, seed=7))
    assert not torch.equal(out, aggregate(torch.from_numpy(stack), "rbm", alpha=1e-2, k=20, seed=8))
    image = stack[:, 2].reshape(4, -1)  # input 2 (one of its base maps is constant)
    span = image.max(1, keepdims=True) - image.min(1, keepdims=True)
    feed = np.where(span > 0, (image - image.min(1, keepdims=True)) / np.where(span > 0, span, 1), 0).T
    hidden = BernoulliRBM(n_components=1, learning_rate=1e-2, n_iter=20, random_state=7).fit(feed).transform(feed)[:, 0]
    if np.corrcoef(hidden, image.mean(0))[0, 1] < 0:
        hidden = 1 - hidden
    np.testing.assert_allclose(out[2].numpy().ravel(), hidden, rtol=0, atol=1e-12)
    out32 = aggregate(torch.from_numpy(stack).float(), "rbm", alpha=1e-2, k=20, seed=7)
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32[2].double(), out[2], rtol=0, atol=1e-6)


def test_rbm_on_agreeing_maps_ranks_like_the_mean():
    """k maps that are positive affine transforms of one map feed the RBM k equal columns:
    whatever the seed (and whichever sign the hidden unit learned), its map ranks the
    pixels as the mean does."""
    rng = np.random.default_rng(5)
    base = rng.normal(size=(2, 9))
    stack = rng.uniform(0.5, 3, size=(4, 1, 1)) * base + rng.normal(size=(4, 1, 1))
    flipped = 0
    for seed in range(4):
        out = aggregate(torch.from_numpy(stack), "rbm", 1, seed=seed).numpy()
        for i in range(2):
            assert spearmanr(out[i], stack[:, i].mean(0))[0] == pytest.approx(1.0)
        feed = np.repeat(((base[0] - base[0].min()) / np.ptp(base[0]))[:, None], 4, 1)
        raw = BernoulliRBM(n_components=1, learning_rate=1e-4, n_iter=100, random_state=seed).fit(feed).transform(feed)
        flipped += np.corrcoef(raw[:, 0], base[0])[0, 1] < 0
    assert flipped  # some seeds' hidden units were anti-correlated: the flip was exercised


# ---------- bad input ----------

@pytest.mark.parametrize("call, option", [
    (lambda s: aggregate(s, "median"), "median"),
    (lambda s: aggregate(s, "mean", foo=1), "foo"),
    (lambda s: aggregate(s, "percentile", q=101), "q=101"),
    (lambda s: aggregate(s, "ucb", eps="x"), "eps="),
    (lambda s: aggregate(s, "pi", eps=math.nan), "eps="),
    (lambda s: aggregate(s, "api", n=1), "n=1"),
    (lambda s: aggregate(s, "aei", a=1.0, b=1.0), "b=1.0"),
    (lambda s: aggregate(s, "var", delta=0), "delta=0"),
    (lambda s: aggregate(s, "var", eps=-1.0), "eps=-1.0"),
    (lambda s: aggregate(s, "rbm", alpha=0), "alpha=0"),
    (lambda s: aggregate(s, "rbm", k=2.5), "k=2.5"),
    (lambda s: aggregate(s, "mean", map_dims=0), "map_dims=0"),
    (lambda s: aggregate(s[0], "mean"), "(k, N, *S)"),
    (lambda s: aggregate(s.long(), "mean"), "floating-point"),
    (lambda s: normalise(s, "minmax"), "how='minmax'"),
    (lambda s: normalise(s, "z", map_dims=True), "map_dims=True"),
])
def test_bad_input_raises_input_error(call, option):
    with pytest.raises(InputError) as info:
        call(torch.zeros(3, 2, 4, 4))
    assert option in str(info.value)
