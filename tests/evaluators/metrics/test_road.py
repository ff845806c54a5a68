"""ROAD (evaluators/metrics/road.py) against direct float64 implementations (one percentage and
one input at a time, with NumPy), the noise-free linear imputation against
scipy.sparse.linalg.spsolve per image, and Quantus 0.6.0's ROAD and imputation where the
definitions match; seeding and the Metrics. Its bad options: test_fidelity_metrics.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import sparse
from scipy.sparse.linalg import spsolve

from evaluators.metrics.road import PERCENTAGES, ROADLeRF, ROADMoRF, linear_imputation, road_curves
from tests.evaluators.metrics.test_fidelity_metrics import data, replace_units, scalar_output, tiny_cnn
from tests.support.tiny_models import tiny_mlp


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
