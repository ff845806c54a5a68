"""Faithfulness correlation and ROAD (evaluators.metrics; relative stability: test_relative_stability.py) against
direct float64 implementations of their formulas (one input, one subset, one
percentage, one sample at a time, with NumPy and SciPy), against Quantus 0.6.0 where its
definitions match with the same perturbations, and hand-computed answers; the
imputation against scipy.sparse.linalg.spsolve per image; seeding; the Metrics; errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import sparse
from scipy.sparse.linalg import spsolve
from torch import nn

from evaluators.metrics.faithfulness_correlation import FaithfulnessCorrelation, faithfulness_correlation
from evaluators.metrics.infidelity import SubsetSamples, subset_perturbations
from evaluators.metrics.perturbations import gaussian_blur, pixel_groups
from evaluators.metrics.relative_stability import RelativeStability, relative_stability
from evaluators.metrics.road import PERCENTAGES, ROADLeRF, ROADMoRF, linear_imputation, road_curves
from foundation.errors import InputError
from tests.support.tiny_models import tiny_conv_net, tiny_mlp


def tiny_cnn(**options) -> nn.Module:
    """:func:`tiny_conv_net` with Softplus, so that the model is smooth."""
    return tiny_conv_net(activation=nn.Softplus, **options)


def data(shape, seed: int, maps_shape=None):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    maps_shape = maps_shape or ((shape[0], *shape[2:]) if len(shape) == 4 else shape)
    return x, torch.randn(*maps_shape, generator=gen, dtype=torch.float64)


def scalar_output(model, single: np.ndarray, target: int, output: str) -> float:
    """f of one input, by hand: the target's logit (a tabular model's explained output) or
    its softmax probability computed here."""
    batch = torch.from_numpy(single)[None]
    if output == "logit" and hasattr(model, "explained_output"):
        return model.explained_output(batch).item()
    logits = model(batch).detach().numpy()[0]
    if output == "logit":
        return float(logits[target])
    e = np.exp(logits - logits.max())
    return float(e[target] / e.sum())


def replace_units(single: np.ndarray, units, values: np.ndarray) -> np.ndarray:
    """``single`` with the given flat units (pixels: all channels; features) taken from ``values``."""
    out = single.copy()
    for u in units:
        if single.ndim == 1:
            out[u] = values[u]
        else:
            r, c = divmod(int(u), single.shape[2])
            out[:, r, c] = values[:, r, c]
    return out


# --- faithfulness correlation -------------------------------------------------------------------------
def reference_fcor(model, x, maps, samples, base, target) -> np.ndarray:
    """Per input, for each sample of ``samples`` (its groups and chosen groups): the removed
    units listed one by one, x_S built by hand from ``base``, f(x) − f(x_S) of the target's
    logit (a tabular model's explained output), the map's sum over S, numpy's Pearson."""
    scores = []
    for i in range(len(x)):
        xi, flat_map = x[i].numpy(), maps[i].flatten().numpy()
        labels = samples.groups[i].flatten().tolist()
        clean = scalar_output(model, xi, target[i], "logit")
        masses, drops = [], []
        for chosen in samples.chosen[i].tolist():
            units = [u for u, label in enumerate(labels) if chosen[label]]
            drops.append(clean - scalar_output(model, replace_units(xi, units, base[i]), target[i], "logit"))
            masses.append(sum(flat_map[u] for u in units))
        scores.append(np.corrcoef(masses, drops)[0, 1])
    return np.array(scores)


@pytest.mark.parametrize("units, baseline, share", [("superpixels", None, 0.2), ("pixels", None, 0.1),
                                                    ("pixels", "zeros", 0.5), ("superpixels", "tensor", 0.4)])
def test_fcor_images_equal_a_direct_loop_on_the_infidelity_samples(units, baseline, share):
    model = tiny_cnn(channels=3, h=16, w=16)
    x, maps = data((3, 3, 16, 16), 1)
    if baseline is None:
        base = gaussian_blur(x, 10.0).numpy()  # the default replacement (checked against scipy in its own tests)
    else:
        baseline = torch.zeros(3, 16, 16, dtype=torch.float64) if baseline == "zeros" else x.flip(2)
        base = baseline.expand_as(x).numpy()
    samples = subset_perturbations(model, x, n_samples=7, share=share, baseline=baseline, units=units, seed=4)
    fcor = faithfulness_correlation(maps, samples)
    if units == "pixels":  # each pixel its own group, ⌊share H W⌋ of them per sample
        assert torch.equal(samples.groups, torch.arange(256).view(1, 16, 16).expand(3, -1, -1))
        assert samples.chosen.sum(2).eq(int(share * 256)).all()
    else:  # SLIC's 50-odd superpixels
        assert samples.groups.flatten(1).amax(1).lt(100).all()
    expected = reference_fcor(model, x, maps, samples, base, model(x).argmax(-1).tolist())
    np.testing.assert_allclose(fcor.numpy(), expected, rtol=0, atol=1e-10)
    assert fcor.dtype == torch.float64


def test_fcor_tabular_rows_use_the_explained_output_and_given_means():
    model = tiny_mlp()
    x, maps = data((4, 6), 3)
    means = torch.randn(6, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    samples = subset_perturbations(model, x, n_samples=8, share=0.34, baseline=means)
    expected = reference_fcor(model, x, maps, samples, means.expand_as(x).numpy(), [1] * 4)
    np.testing.assert_allclose(faithfulness_correlation(maps, samples).numpy(), expected, rtol=0, atol=1e-10)


class LinearScore(nn.Module):
    """Logits (0, Σ w x) of one-channel images: removing S (to 0) drops the logit by Σ_S w x."""

    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.w = nn.Parameter(w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        score = (x[:, 0] * self.w).sum((1, 2))
        return torch.stack([torch.zeros_like(score), score], -1)


def test_fcor_of_gradient_times_input_on_a_linear_logit_is_one():
    gen = torch.Generator().manual_seed(6)
    model = LinearScore(torch.randn(4, 4, generator=gen, dtype=torch.float64))
    x = torch.randn(5, 1, 4, 4, generator=gen, dtype=torch.float64)
    exact = (x[:, 0] * model.w).detach()  # Δf = Σ_S w_i x_i exactly
    for units in ("pixels", "superpixels"):
        samples = subset_perturbations(model, x, target=1, n_samples=20, share=0.3, units=units,
                                       baseline=torch.zeros(1, 4, 4, dtype=torch.float64))  # fmt: skip
        np.testing.assert_allclose(faithfulness_correlation(exact, samples).numpy(), 1.0, atol=1e-12)
        np.testing.assert_allclose(faithfulness_correlation(-exact, samples).numpy(), -1.0, atol=1e-12)
    equal_sizes = subset_perturbations(model, x, target=1, n_samples=20, share=0.3, units="pixels")
    constant = faithfulness_correlation(torch.ones(5, 4, 4, dtype=torch.float64), equal_sizes)
    assert constant.isnan().all()  # 4 pixels of mass 1 in every sample: no correlation defined


def test_fcor_metric_is_the_mean_over_defined_inputs():
    model = tiny_cnn(channels=3, h=10, w=10)
    x, maps = data((5, 3, 10, 10), 8)
    maps[2] = 1.0  # a constant map on pixel subsets of one size: FCOR undefined, left out
    options = {"n_samples": 6, "share": 0.1, "units": "pixels", "seed": 3}
    parts = [faithfulness_correlation(maps[s], subset_perturbations(model, x[s], **options))
             for s in (slice(0, 2), slice(2, 5))]  # fmt: skip
    metric = FaithfulnessCorrelation(**options)
    metric.update(model, x[:2], maps[:2])
    metric.update(model, x[2:], maps[2:])
    values = torch.cat(parts)
    assert values[2].isnan() and metric.left_out.item() == 1 and metric.count.item() == 4
    assert metric.compute().item() == pytest.approx(values[~values.isnan()].mean().item(), abs=1e-12)
    assert FaithfulnessCorrelation.higher_is_better and not list(metric.parameters())


def test_quantus_faithfulness_correlation_equals_ours_on_its_subsets():
    """Quantus 0.6.0's FaithfulnessCorrelation (logits, constant 0 baseline, no
    normalisation) on one-channel images, whose elements are pixels: its np.random.choice
    subsets, replayed, as the samples' chosen pixels, with the output drops of a direct
    loop. float32 (Quantus casts to it)."""
    quantus = pytest.importorskip("quantus", reason="quantus is not installed (pip install quantus==0.6.0)")
    model = tiny_cnn(channels=1, classes=3, h=8, w=8).float()
    gen = torch.Generator().manual_seed(9)
    x, maps = torch.randn(5, 1, 8, 8, generator=gen), torch.rand(5, 8, 8, generator=gen)
    target = model(x).argmax(-1)
    np.random.seed(3)
    metric = quantus.FaithfulnessCorrelation(nr_runs=20, subset_size=10, perturb_baseline=0.0, normalise=False,
                                             abs=False, return_aggregate=False, disable_warnings=True)  # fmt: skip
    theirs = metric(model=model, x_batch=x.numpy(), y_batch=target.numpy(), a_batch=maps[:, None].numpy(),
                    channel_first=True, device="cpu")  # fmt: skip
    np.random.seed(3)
    chosen = torch.zeros(20, 5, 64, dtype=torch.bool)  # Quantus: for each run, one draw per input
    for run in range(20):
        for i in range(5):
            chosen[run, i, np.random.choice(64, 10, replace=False)] = True
    chosen = chosen.transpose(0, 1)
    with torch.no_grad():
        perturbed = torch.where(chosen.view(5, 20, 1, 8, 8), 0.0, x[:, None])
        drops = model(x).gather(1, target[:, None]) - model(perturbed.flatten(0, 1)).view(5, 20, 3).gather(
            2, target.view(5, 1, 1).expand(5, 20, 1))[..., 0]
    samples = SubsetSamples(pixel_groups(x), chosen, drops)
    np.testing.assert_allclose(faithfulness_correlation(maps, samples).numpy(), np.asarray(theirs), rtol=0, atol=1e-5)


# --- ROAD ---------------------------------------------------------------------------------------------
NEIGHBOURS = [((di, dj), 1 / 6 if di == 0 or dj == 0 else 1 / 12)
              for di in (-1, 0, 1) for dj in (-1, 0, 1) if (di, dj) != (0, 0)]  # fmt: skip


def spsolve_imputation(image: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """One image (C, H, W): the sparse system of the removed pixels, written pixel by
    pixel, solved by scipy.sparse.linalg.spsolve for all channels."""
    channels, height, width = image.shape
    pixels = [(r, c) for r in range(height) for c in range(width) if removed[r, c]]
    index = {p: k for k, p in enumerate(pixels)}
    a = sparse.lil_matrix((len(pixels), len(pixels)))
    b = np.zeros((len(pixels), channels))
    for k, (r, c) in enumerate(pixels):
        for (dr, dc), w in NEIGHBOURS:
            rr, cc = r + dr, c + dc
            if 0 <= rr < height and 0 <= cc < width:
                a[k, k] += w
                if removed[rr, cc]:
                    a[k, index[(rr, cc)]] -= w
                else:
                    b[k] += w * image[:, rr, cc]
    solution = spsolve(a.tocsc(), b).reshape(len(pixels), channels)
    out = image.copy()
    for k, (r, c) in enumerate(pixels):
        out[:, r, c] = solution[k]
    return out


@pytest.mark.parametrize("shape, share", [((3, 2, 5, 7), 0.3), ((2, 3, 16, 16), 0.9), ((2, 1, 9, 4), 0.99)])
def test_linear_imputation_equals_a_sparse_solve_per_image(shape, share):
    gen = torch.Generator().manual_seed(10)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    removed = torch.rand(shape[0], *shape[2:], generator=gen) < share
    removed[:, -1, 0] = False  # every image keeps a pixel
    removed[0, 1:4, 1:3] = True  # a hole
    ours = linear_imputation(x, removed)
    for i in range(shape[0]):
        np.testing.assert_allclose(ours[i].numpy(), spsolve_imputation(x[i].numpy(), removed[i].numpy()),
                                   rtol=0, atol=1e-9)  # fmt: skip
    assert torch.equal(ours[~removed[:, None].expand_as(x)], x[~removed[:, None].expand_as(x)])


def test_linear_imputation_in_float32_and_of_a_single_kept_pixel():
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(2, 3, 12, 10, generator=gen)
    removed = torch.ones(2, 12, 10, dtype=torch.bool)
    removed[0, 5, 5] = removed[1, 0, 9] = False
    ours = linear_imputation(x, removed)
    assert ours.dtype == torch.float32
    # one kept pixel: every removed pixel takes its value (the mean of equal neighbours)
    np.testing.assert_allclose(ours[0].numpy(), x[0, :, 5, 5, None, None].expand(3, 12, 10).numpy(), atol=1e-5)
    np.testing.assert_allclose(ours[1].numpy(), x[1, :, 0, 9, None, None].expand(3, 12, 10).numpy(), atol=1e-5)


def test_quantus_noisy_linear_imputation_equals_ours_without_noise():
    quantus = pytest.importorskip("quantus", reason="quantus is not installed (pip install quantus==0.6.0)")
    from quantus.functions.perturb_func import noisy_linear_imputation

    gen = torch.Generator().manual_seed(12)
    x = torch.randn(2, 3, 9, 11, generator=gen, dtype=torch.float64)
    removed = torch.rand(2, 9, 11, generator=gen) < 0.6
    ours = linear_imputation(x, removed)
    for i in range(2):
        theirs = noisy_linear_imputation(x[i].numpy(), np.flatnonzero(removed[i].numpy()), noise=0.0)
        np.testing.assert_allclose(ours[i].numpy(), theirs, rtol=0, atol=1e-9)
    assert quantus is not None


def reference_road(model, x, maps, order, percentages, target, output, noise, seed, means=None) -> np.ndarray:
    """One input and one percentage at a time: the documented tie order (a randperm per
    input, then Python's stable sort), ⌊n p / 100⌋ units removed, the image imputed by the
    sparse solve (a row by the means), the documented noise added to the removed units."""
    gen = torch.Generator().manual_seed(seed)
    n = maps[0].numel()
    perms = [torch.randperm(n, generator=gen).tolist() for _ in range(len(x))]
    sign = -1 if order == "morf" else 1
    curves = np.zeros((len(x), len(percentages)))
    for i in range(len(x)):
        flat_map = maps[i].flatten().tolist()
        ranked = sorted(perms[i], key=lambda u: sign * flat_map[u])
        xi = x[i].numpy()
        for j, p in enumerate(percentages):
            units = ranked[: math.floor(n * p / 100)]
            draw = torch.randn(x.shape[1:], generator=gen, dtype=x.dtype).numpy()
            if xi.ndim == 1:
                filled = means.numpy() + noise * draw
            else:
                removed = np.zeros(xi.shape[1:], dtype=bool)
                removed.flat[units] = True
                filled = spsolve_imputation(xi, removed) + noise * draw
            imputed = replace_units(xi, units, filled)
            if output == "accuracy":
                curves[i, j] = float(model(torch.from_numpy(imputed)[None]).argmax(-1).item() == target[i])
            else:
                curves[i, j] = scalar_output(model, imputed, target[i], output)
    return curves


@pytest.mark.parametrize("order, output, percentages, ties, max_batch", [
    ("morf", "probability", PERCENTAGES, False, 256), ("lerf", "logit", (0, 25, 50, 99.5), True, 5),
    ("morf", "accuracy", (5, 95), True, 1), ("lerf", "probability", (33.3,), False, 4),
])  # fmt: skip
def test_road_image_curves_equal_a_direct_loop(order, output, percentages, ties, max_batch):
    model = tiny_cnn()
    x, maps = data((3, 2, 5, 6), 13)
    if ties:
        maps = maps.round()
    got_percentages, curves = road_curves(model, x, maps, order, percentages, output=output, noise=0.05, seed=2,
                                          max_batch=max_batch)  # fmt: skip
    target = model(x).argmax(-1).tolist()
    expected = reference_road(model, x, maps, order, percentages, target, output, 0.05, 2)
    np.testing.assert_allclose(curves.numpy(), expected, rtol=0, atol=1e-9)
    np.testing.assert_allclose(got_percentages.numpy(), percentages)


def test_road_tabular_rows_take_the_feature_means_plus_noise():
    model = tiny_mlp()
    x, maps = data((4, 6), 14)
    means = torch.randn(6, generator=torch.Generator().manual_seed(15), dtype=torch.float64)
    for order, output in (("morf", "logit"), ("lerf", "probability")):
        _, curves = road_curves(model, x, maps, order, (0, 20, 50, 90), output=output, feature_means=means, seed=1)
        expected = reference_road(model, x, maps, order, (0, 20, 50, 90), [1] * 4, output, 0.01, 1, means)
        np.testing.assert_allclose(curves.numpy(), expected, rtol=0, atol=1e-12)


def test_road_difference_is_the_change_from_the_clean_input_and_zero_percent_is_clean():
    model = tiny_cnn()
    x, maps = data((3, 2, 5, 6), 16)
    _, levels = road_curves(model, x, maps, "morf", (0, 40), output="logit")
    _, changes = road_curves(model, x, maps, "morf", (0, 40), output="logit", difference=True)
    clean = model(x).gather(1, model(x).argmax(-1, keepdim=True))[:, 0].detach()
    np.testing.assert_allclose(levels[:, 0].numpy(), clean.numpy(), atol=1e-12)
    np.testing.assert_allclose(changes.numpy(), (levels - clean[:, None]).numpy(), atol=1e-12)


def test_road_is_seeded_and_the_order_matters():
    model = tiny_cnn()
    x, maps = data((4, 2, 5, 6), 17)
    _, a = road_curves(model, x, maps, seed=3, max_batch=256)
    _, b = road_curves(model, x, maps, seed=3, max_batch=7)
    _, c = road_curves(model, x, maps, seed=4)
    _, lerf = road_curves(model, x, maps, "lerf", seed=3)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-12)
    assert not np.allclose(a.numpy(), c.numpy()) and not np.allclose(a.numpy(), lerf.numpy())


@pytest.mark.parametrize("metric_class, order", [(ROADMoRF, "morf"), (ROADLeRF, "lerf")])
def test_road_metrics_are_the_mean_functional_curve(metric_class, order):
    model = tiny_cnn()
    x, maps = data((5, 2, 5, 6), 18)
    options = {"percentages": (10, 50, 90), "output": "logit", "difference": True, "seed": 2}
    parts = [road_curves(model, x[s], maps[s], order, **options)[1] for s in (slice(0, 2), slice(2, 5))]
    metric = metric_class(**options)
    metric.update(model, x[:2], maps[:2])
    metric.update(model, x[2:], maps[2:])
    np.testing.assert_allclose(metric.compute().numpy(), torch.cat(parts).mean(0).numpy(), atol=1e-12)
    assert metric_class.higher_is_better is (order == "lerf")
    assert not list(metric.parameters())


def test_quantus_road_equals_our_morf_accuracy_on_one_channel_images():
    """Quantus 0.6.0's ROAD (MoRF accuracy, noisy linear imputation) on one-channel images,
    where its channel-element ranking is our pixel ranking, with noise 0 (its noise comes
    from numpy's global generator) and distinct map values (its argsort breaks ties its
    own way)."""
    quantus = pytest.importorskip("quantus", reason="quantus is not installed (pip install quantus==0.6.0)")
    model = tiny_cnn(channels=1, classes=3, h=8, w=8).float()
    gen = torch.Generator().manual_seed(19)
    x, maps = torch.randn(6, 1, 8, 8, generator=gen), torch.rand(6, 8, 8, generator=gen)
    target = model(x).argmax(-1)
    percentages = [10, 30, 50, 70, 90]
    metric = quantus.ROAD(percentages=percentages, noise=0.0, normalise=False, abs=False, disable_warnings=True)
    theirs = metric(model=model, x_batch=x.numpy(), y_batch=target.numpy(), a_batch=maps[:, None].numpy(),
                    channel_first=True, device="cpu")  # fmt: skip
    _, curves = road_curves(model, x, maps, "morf", percentages, output="accuracy", noise=0.0)
    np.testing.assert_allclose(curves.mean(0).numpy(), [theirs[p] for p in percentages], atol=1e-12)


# --- errors -------------------------------------------------------------------------------------------
def _explain(v, t):
    return v.sum(1)


def _fcor(m, x, a, target=None, **options):
    metric = FaithfulnessCorrelation(n_samples=3, **options)
    metric.update(m, x, a, target)


@pytest.mark.parametrize("call, option", [
    (lambda m, x, a: _fcor(m, x, a, share=1.5), "option share"),
    (lambda m, x, a: _fcor(m, x, a, units="patches"), "units="),
    (lambda m, x, a: _fcor(m, x, a[:, :4]), "maps of shape"),
    (lambda m, x, a: faithfulness_correlation(a[:, None], subset_perturbations(m, x, n_samples=2)), "maps of shape"),
    (lambda m, x, a: road_curves(m, x, a, "top"), "order="),
    (lambda m, x, a: road_curves(m, x, a, percentages=(10, 100)), "percentages="),
    (lambda m, x, a: road_curves(m, x, a, percentages=()), "percentages="),
    (lambda m, x, a: road_curves(m, x, a, output="auc"), "output="),
    (lambda m, x, a: road_curves(m, x, a, noise=-1.0), "noise="),
    (lambda m, x, a: road_curves(m, x, a, feature_means=torch.zeros(2)), "feature_means"),
    (lambda m, x, a: road_curves(m, x, a, target=[0, 1, 2]), "target="),
    (lambda m, x, a: road_curves(m, x, a * float("nan")), "NaN"),
    (lambda m, x, a: ROADLeRF(percentages=[120]), "percentages="),
    (lambda m, x, a: relative_stability(m, x, a, _explain, n_samples=0), "n_samples="),
    (lambda m, x, a: relative_stability(m, x, a, _explain, radius=0), "radius="),
    (lambda m, x, a: relative_stability(m, x, a, _explain, p=0.5), "p="),
    (lambda m, x, a: relative_stability(m, x, a, _explain, change="log"), "change="),
    (lambda m, x, a: relative_stability(m, x, a, _explain, layer="fc9"), "layer="),
    (lambda m, x, a: relative_stability(m, x, a, _explain, ros_output="probabilities"), "ros_output="),
    (lambda m, x, a: relative_stability(m, x, a, None), "explain_fn="),
    (lambda m, x, a: relative_stability(m, x, a, lambda v, t: v, n_samples=2), "explain_fn returned"),
    (lambda m, x, a: relative_stability(m, x, a, _explain, perturbed=x), "perturbed"),
    (lambda m, x, a: RelativeStability(eps_min=0.0), "eps_min="),
])  # fmt: skip
def test_bad_input_raises_input_error_naming_the_option(call, option):
    x = torch.randn(3, 2, 5, 6, dtype=torch.float64)
    with pytest.raises(InputError, match=option):
        call(tiny_cnn(), x, torch.rand(3, 5, 6, dtype=torch.float64))


@pytest.mark.parametrize("call, option", [
    (lambda m, x, a: _fcor(m, x, a), "feature means"),
    (lambda m, x, a: _fcor(m, x, a, baseline=torch.zeros(6), target=7), "target="),  # no class 7
    (lambda m, x, a: road_curves(m, x, a), "feature_means"),
    (lambda m, x, a: road_curves(m, x, a, feature_means=torch.zeros(5)), "feature_means"),
])  # fmt: skip
def test_bad_tabular_input_raises_input_error_naming_the_option(call, option):
    x = torch.randn(3, 6, dtype=torch.float64)
    with pytest.raises(InputError, match=option):
        call(tiny_mlp(), x, torch.rand(3, 6, dtype=torch.float64))
