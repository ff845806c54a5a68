"""Decker et al.'s optimised aggregators (evaluators.aggregators.optimised_aggregators): Γ_robust and
Γ_faith against direct float64 loops (one input, one sample, one explainer call at a time, the
maps post-processed in NumPy/SciPy) on a tiny CNN and a tiny MLP; the weights against a brute
force over a simplex grid; Decker's theorem on the fitting samples; degenerate inputs; errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy import ndimage
from torch import nn

from evaluators.aggregators.optimised_aggregators import (
    VAR_EPS,
    aggregator_options,
    combine,
    explainer_maps,
    faith_gamma,
    optimised_aggregation,
    robust_gamma,
)
from evaluators.aggregators.registry import AGGREGATORS
from evaluators.maps import explain
from evaluators.metrics.infidelity import infidelity, least_squares_scale, subset_perturbations
from evaluators.metrics.perturbations import gaussian_blur, subset_choices, superpixels, uniform_noise
from evaluators.metrics.sensitivity import sensitivities
from foundation.errors import InputError
from tests.support.tiny_models import tiny_mlp

EXPLAINERS = {"saliency": {}, "input_x_gradient": {}, "integrated_gradients": {"n_steps": 8}}
SIZE = 10


def tiny_cnn(classes: int = 4, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * SIZE * SIZE, classes))
    return net.double().eval()


def setting(kind: str):
    """(model, inputs, resolved target, options of the faith samples)."""
    gen = torch.Generator().manual_seed(3)
    if kind == "images":
        x = torch.randn(2, 3, SIZE, SIZE, generator=gen, dtype=torch.float64)
        return tiny_cnn(), x, torch.tensor([1, 3]), {"n_segments": 12, "blur_sigma": 3.0}
    means = torch.linspace(-0.3, 0.3, 7, dtype=torch.float64)
    return tiny_mlp(7), torch.randn(3, 7, generator=gen, dtype=torch.float64), None, {"baseline": means}


def numpy_map(model, row, name, target) -> np.ndarray:
    """One input's post-processed map, explained alone: channels summed, |·|, min-max, and (images)
    SciPy's Gaussian filter σ = 1 with mirror padding (torchvision's reflect)."""
    if target is None:
        e = explain(model, row[None], name, **EXPLAINERS[name])[0].detach().numpy()
    else:
        e = explain(model, row[None], name, target=int(target), **EXPLAINERS[name])[0].sum(0).detach().numpy()
    e = np.abs(e)
    e = (e - e.min()) / (e.max() - e.min())
    return e if target is None else ndimage.gaussian_filter(e, 1.0, mode="mirror", truncate=4.0)


def numpy_stack(model, row, target) -> np.ndarray:
    """(d, k): E of one input."""
    return np.stack([numpy_map(model, row, name, target).ravel() for name in EXPLAINERS], axis=1)


@pytest.mark.parametrize("kind", ["images", "tabular"])
def test_robust_gamma_is_a_per_input_per_sample_loop(kind):
    model, x, target, _ = setting(kind)
    maps = explainer_maps(model, x, target, EXPLAINERS)
    for i in range(len(x)):
        t = None if target is None else target[i]
        np.testing.assert_allclose(maps[i].flatten(1).T.numpy(), numpy_stack(model, x[i], t), rtol=0, atol=1e-12)
    gamma = robust_gamma(model, x, target, EXPLAINERS, maps, n_samples=4, seed=7, max_batch=4)  # one input a call
    for i in range(len(x)):
        t = None if target is None else target[i]
        e = numpy_stack(model, x[i], t)
        noisy = uniform_noise(x[i : i + 1], 4, 0.1, seed=7, stream="fitting", offset=i)[0]
        expected = np.zeros((3, 3))
        for row in noisy:
            difference = e - numpy_stack(model, row, t)
            expected += difference.T @ difference / 4
        np.testing.assert_allclose(gamma[i].numpy(), expected, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(robust_gamma(model, x, target, EXPLAINERS, maps, n_samples=4, seed=7), gamma)


@pytest.mark.parametrize("kind", ["images", "tabular"])
def test_faith_gamma_is_a_per_input_per_sample_loop(kind):
    model, x, target, options = setting(kind)
    maps = explainer_maps(model, x, target, EXPLAINERS)
    gamma = faith_gamma(model, x, target, maps, n_samples=6, seed=2, **options)
    if kind == "images":
        groups, base = superpixels(x, 12), gaussian_blur(x, 3.0)
    else:
        groups, base = torch.arange(7).expand(len(x), -1), options["baseline"].expand_as(x)
    chosen = subset_choices(groups, 6, 0.2, seed=2, stream="fitting")
    for i in range(len(x)):
        t = None if target is None else target[i]

        def score(v):  # the explained output of one input
            return (model.explained_output(v[None]) if t is None else model(v[None])[:, t]).item()

        e = numpy_stack(model, x[i], t)
        labels = groups[i].numpy().ravel()
        a, deltas = [], []
        for removed_groups in chosen[i].numpy():
            removed = removed_groups[labels]  # per unit
            perturbed = x[i].clone().reshape(-1 if t is None else 3, len(labels))
            perturbed[..., removed] = base[i].reshape(perturbed.shape)[..., removed]
            deltas.append(score(x[i]) - score(perturbed.reshape(x[i].shape)))
            a.append(e[removed].sum(0))
        a, deltas = np.array(a), np.array(deltas)  # (m, k), (m,)
        beta = (a * deltas[:, None]).sum(0) / (a * a).sum(0)
        g = beta * a - deltas[:, None]
        np.testing.assert_allclose(gamma[i].numpy(), g.T @ g / 6, rtol=1e-9, atol=1e-12)


def simplex_grid(step: int = 200) -> np.ndarray:
    return np.array([(i / step, j / step, (step - i - j) / step)
                     for i, j in itertools.product(range(step + 1), repeat=2) if i + j <= step])  # fmt: skip


@pytest.mark.parametrize("method", ["agg_robust", "agg_faith", "agg_opt"])
def test_weights_minimise_the_quadratic_form_over_a_simplex_grid(method):
    model, x, target, options = setting("images")
    maps = explainer_maps(model, x, target, EXPLAINERS)
    robust = robust_gamma(model, x, target, EXPLAINERS, maps, n_samples=5, seed=0)
    faith = faith_gamma(model, x, target, maps, n_samples=5, seed=0, **options)
    gamma = {"agg_robust": robust, "agg_faith": faith,
             "agg_opt": 0.5 * robust / robust.norm(dim=(1, 2), keepdim=True)
             + 0.5 * faith / faith.norm(dim=(1, 2), keepdim=True)}[method]  # fmt: skip
    _, weights = optimised_aggregation(model, x, method, EXPLAINERS, target=target, n_samples=5, seed=0,
                                       **({} if method == "agg_robust" else options))  # fmt: skip
    grid = simplex_grid()
    for w, g in zip(weights.numpy(), gamma.numpy()):
        assert w.min() >= 0 and abs(w.sum() - 1) < 1e-9
        objective, grid_objectives = w @ g @ w, np.einsum("gk,kl,gl->g", grid, g, grid)
        assert objective <= grid_objectives.min() + 1e-5 * np.abs(g).max()  # cvxpy's tolerance
        assert objective >= grid_objectives.min() - 0.02 * np.abs(g).max()  # the grid is 1/200 apart


@pytest.mark.parametrize("kind", ["images", "tabular"])
def test_agg_faith_meets_deckers_bound_on_its_fitting_samples(kind):
    """ωᵀΓ_faith ω is the unnormalised infidelity of ψ_ω = Σ ω_i β_i φ_i on the fitting samples, at
    most every single explainer's (normalised) infidelity there, and ψ_ω's normalised infidelity
    is at most that (the module's docstring)."""
    model, x, target, options = setting(kind)
    maps, weights = optimised_aggregation(model, x, "agg_faith", EXPLAINERS, target=target, n_samples=8, seed=3,
                                          **options)  # fmt: skip
    base = explainer_maps(model, x, target, EXPLAINERS)
    torch.testing.assert_close(maps, combine(base, weights))
    samples = subset_perturbations(model, x, target, n_samples=8, seed=3, stream="fitting", **options)
    singles = torch.stack([infidelity(base[:, i], samples) for i in range(3)], 1)
    beta = least_squares_scale(samples.attribution_sums(base.movedim(1, -1)), samples.deltas)
    psi = combine(base, weights * beta)
    objective = torch.einsum("nk,nkl,nl->n", weights, faith_gamma(model, x, target, base, 8, seed=3, **options),
                             weights)  # fmt: skip
    torch.testing.assert_close(infidelity(psi, samples, normalize=False), objective, rtol=1e-9, atol=1e-12)
    assert (objective <= singles.amin(1) + 1e-10).all()
    assert (infidelity(psi, samples) <= objective + 1e-10).all()


@pytest.mark.parametrize("kind", ["images", "tabular"])
def test_agg_robust_meets_deckers_bound_on_its_fitting_samples(kind):
    """With the weights held fixed, the aggregate's mean squared sensitivity on the fitting noise
    is ωᵀΓ_robust ω, at most every single explainer's."""
    model, x, target, _ = setting(kind)
    maps, weights = optimised_aggregation(model, x, "agg_robust", EXPLAINERS, target=target, n_samples=6, seed=1)
    base = explainer_maps(model, x, target, EXPLAINERS)
    rows = len(x) * 6

    def squared(explain_fn, clean):
        distances = sensitivities(explain_fn, x, clean, target, n_samples=6, relative=False, seed=1,
                                  stream="fitting", max_batch=rows)  # fmt: skip
        return distances.pow(2).mean(1)

    def aggregate_fn(noisy, t):
        return combine(explainer_maps(model, noisy, t, EXPLAINERS), weights.repeat_interleave(6, 0))

    def single_fn(i):
        return lambda noisy, t: explainer_maps(model, noisy, t, EXPLAINERS)[:, i]

    aggregate = squared(aggregate_fn, maps)
    singles = torch.stack([squared(single_fn(i), base[:, i]) for i in range(3)], 1)
    objective = torch.einsum("nk,nkl,nl->n", weights, robust_gamma(model, x, target, EXPLAINERS, base, 6, seed=1),
                             weights)  # fmt: skip
    torch.testing.assert_close(aggregate, objective, rtol=1e-9, atol=1e-12)
    assert (aggregate <= singles.amin(1) + 1e-10).all()


def own_options(method: str, **options) -> dict:
    return {name: value for name, value in options.items() if name in aggregator_options(method)}


def test_identical_explainers_aggregate_to_their_common_map():
    """On a linear model, Integrated Gradients (zero baseline), Input × Gradient and DeepLift all
    give x ⊙ w: every Γ is constant, any weights on the simplex do, and every aggregate is that map."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * SIZE * SIZE, 3)).double().eval()
    x = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    same = {"integrated_gradients": {"n_steps": 4}, "input_x_gradient": {}, "deeplift": {}}
    common = explainer_maps(model, x, model(x).argmax(-1), {"input_x_gradient": {}})[:, 0]
    for method in AGGREGATORS.names(kind="optimised"):
        maps, weights = optimised_aggregation(model, x, method, same, **own_options(method, n_samples=3, n_segments=10))
        if weights is None:  # agg_var: μ / (0 + ε)
            torch.testing.assert_close(maps * VAR_EPS, common, rtol=1e-6, atol=1e-12)
            continue
        assert (weights >= 0).all() and torch.allclose(weights.sum(1), torch.ones(2, dtype=torch.float64))
        torch.testing.assert_close(maps, common, rtol=0, atol=1e-10)


def test_one_explainer_has_weight_one():
    model, x, target, options = setting("images")
    single = {"saliency": {}}
    maps, weights = optimised_aggregation(model, x, "agg_opt", single, target=target, n_samples=3, **options)
    assert torch.equal(weights, torch.ones(2, 1, dtype=torch.float64))
    torch.testing.assert_close(maps, explainer_maps(model, x, target, single)[:, 0], rtol=0, atol=0)


def test_tabular_aggregators_give_feature_maps_and_simplex_weights():
    model, x, _, options = setting("tabular")
    for method in AGGREGATORS.names(kind="optimised"):
        chosen = own_options(method, n_samples=4, **options)
        maps, weights = optimised_aggregation(model, x, method, EXPLAINERS, **chosen)
        assert maps.shape == x.shape and torch.isfinite(maps).all()
        if weights is not None:
            assert weights.shape == (3, 3) and (weights >= 0).all()
            torch.testing.assert_close(weights.sum(1), torch.ones(3, dtype=torch.float64))
    model.train()
    optimised_aggregation(model, x, "agg_mean", EXPLAINERS)
    assert model.training  # the mode is restored


def test_post_processing_options():
    model, x, target, _ = setting("images")
    raw = explain(model, x, "saliency", target=target).sum(1)
    plain = explainer_maps(model, x, target, {"saliency": {}}, absolute=False, normalisation="none", smoothing=0)
    torch.testing.assert_close(plain[:, 0], raw.detach())
    signed = explainer_maps(model, x, target, {"saliency": {}}, absolute=False, smoothing=0, reduce="max_abs")
    assert signed.min() == 0 and signed.amax(dim=(2, 3)).eq(1).all()


def test_optimised_aggregation_errors():
    model, x, target, options = setting("images")
    with pytest.raises(InputError, match="unknown optimised aggregator"):
        optimised_aggregation(model, x, "agg_best", EXPLAINERS)
    with pytest.raises(InputError, match=r"option\(s\) \['radius'\]"):
        optimised_aggregation(model, x, "agg_faith", EXPLAINERS, radius=0.2)
    with pytest.raises(InputError, match="option explainers"):
        optimised_aggregation(model, x, "agg_mean", {"no_such_method": {}})
    with pytest.raises(InputError, match="option explainers"):
        optimised_aggregation(model, x, "agg_mean", {})
    with pytest.raises(InputError, match="option target"):
        optimised_aggregation(model, x, "agg_mean", EXPLAINERS, target=2.5)
    with pytest.raises(InputError, match="option lam"):
        optimised_aggregation(model, x, "agg_opt", EXPLAINERS, lam=1.5, n_samples=2)
    mlp, rows, _, _ = setting("tabular")
    with pytest.raises(InputError, match="option smoothing"):
        optimised_aggregation(mlp, rows, "agg_mean", EXPLAINERS, smoothing=1.0)
    with pytest.raises(InputError, match="feature means"):
        optimised_aggregation(mlp, rows, "agg_faith", EXPLAINERS, n_samples=2)
    with pytest.raises(InputError, match="inputs x of shape"):
        optimised_aggregation(mlp, x, "agg_mean", EXPLAINERS)
