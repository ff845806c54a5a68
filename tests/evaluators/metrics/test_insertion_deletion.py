"""Insertion and deletion curves (evaluators.metrics.insertion_deletion) against a naive
loop that builds every step's input unit by unit, in float64; AUCs against numpy; the
blur kernel against scipy; a model whose answer is known; the Metrics; errors; Quantus."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from evaluators.metrics.insertion_deletion import (
    BASELINES,
    DeletionAUC,
    InsertionAUC,
    auc,
    insertion_deletion_curves,
    rise_blur_kernel,
)
from foundation.errors import InputError
from lightning_modules.ensembles import MLPEnsemble
from tests.support.tiny_models import tiny_conv_net as tiny_cnn, tiny_mlp


def reference_curves(model, x, maps, mode, target, steps, baseline, seed=0, stats=None, softmax=True) -> np.ndarray:
    """Step by step, one input at a time: units sorted by Python's stable ``sorted`` over the
    documented random permutation (ties keep its order), k_s = floor(s n / S) units moved,
    each copied from the end input by hand; the probability is a softmax computed here (or,
    ``softmax=False``, the model's own ``probabilities``: an ensemble's mean probabilities)."""
    tabular = x.dim() == 2
    n = maps[0].numel()
    generator = torch.Generator().manual_seed(seed)
    perms = [torch.randperm(n, generator=generator).tolist() for _ in range(len(x))]
    if isinstance(baseline, torch.Tensor):
        base = baseline.expand_as(x).numpy()
    elif baseline == "normal":
        noise = torch.randn(x.shape, generator=generator, dtype=x.dtype).numpy()
        xs = x.numpy()
        if stats is None:
            mean, std = xs.mean(axis=(2, 3), keepdims=True), xs.std(axis=(2, 3), keepdims=True)
        else:
            shape = (1, -1) + (1,) * (x.dim() - 2)
            mean, std = (np.reshape(np.asarray(v), shape) for v in stats)
        base = mean + std * noise
    elif baseline == "blur":
        base = BASELINES["blur"](x, None, None).numpy()  # checked against scipy below
    else:
        base = np.zeros(x.shape)
    curves = np.zeros((len(x), steps + 1))
    for i in range(len(x)):
        flat_map = maps[i].flatten().tolist()
        order = sorted(perms[i], key=lambda u: -flat_map[u])
        start, end = (base[i], x[i].numpy()) if mode == "insertion" else (x[i].numpy(), base[i])
        for s in range(steps + 1):
            current = start.copy()
            for u in order[: math.floor(s * n / steps)]:
                if tabular:
                    current[u] = end[u]
                else:
                    r, c = divmod(u, x.shape[3])
                    current[:, r, c] = end[:, r, c]
            scores = model if softmax else model.probabilities
            probabilities = scores(torch.from_numpy(current)[None]).detach().numpy()[0]
            if softmax:
                probabilities = np.exp(probabilities - probabilities.max())
                probabilities /= probabilities.sum()
            curves[i, s] = probabilities[target[i]]
    return curves


def curve_auc(model, x, maps, mode, **options) -> torch.Tensor:
    fractions, curves = insertion_deletion_curves(model, x, maps, mode, **options)
    return auc(curves, fractions)


@pytest.mark.parametrize("mode", ["insertion", "deletion"])
@pytest.mark.parametrize("steps, baseline, ties, max_batch", [
    (1, "zero", False, 256), (7, "normal", False, 5), (30, "blur", True, 1), (None, "tensor", True, 64),
    (4, "normal", True, 256),
])  # fmt: skip
def test_image_curves_equal_a_naive_loop(mode, steps, baseline, ties, max_batch):
    model = tiny_cnn()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 2, 5, 6, generator=gen, dtype=torch.float64)
    maps = torch.rand(3, 5, 6, generator=gen, dtype=torch.float64)
    if ties:  # a handful of levels: most pixels tie, and ties straddle the step boundaries
        maps = (maps * 3).floor()
    if baseline == "tensor":
        baseline = torch.randn(2, 5, 6, generator=gen, dtype=torch.float64)
    fractions, curves = insertion_deletion_curves(model, x, maps, mode, steps=steps, baseline=baseline, seed=3,
                                                  max_batch=max_batch)  # fmt: skip
    n = 30
    s = math.ceil(n / 50) if steps is None else steps
    target = model(x).argmax(-1)
    expected = reference_curves(model, x, maps, mode, target, s, baseline, seed=3)
    np.testing.assert_allclose(curves.numpy(), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fractions.numpy(), [math.floor(k * n / s) / n for k in range(s + 1)], rtol=1e-15)
    assert curves.dtype == torch.float64


def test_given_targets_and_training_set_stats():
    model = tiny_cnn()
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(4, 2, 5, 6, generator=gen, dtype=torch.float64)
    maps = torch.randn(4, 5, 6, generator=gen, dtype=torch.float64)
    target = torch.tensor([0, 3, 1, 2])
    stats = ([0.5, -1.0], [2.0, 0.1])
    for mode in ("insertion", "deletion"):
        _, curves = insertion_deletion_curves(model, x, maps, mode, target=target, steps=6, stats=stats)
        expected = reference_curves(model, x, maps, mode, target, 6, "normal", stats=stats)
        np.testing.assert_allclose(curves.numpy(), expected, rtol=0, atol=1e-12)
    _, one_class = insertion_deletion_curves(model, x, maps, "deletion", target=2, steps=6)
    np.testing.assert_allclose(one_class[:, 0].numpy(), model(x).softmax(-1)[:, 2].detach().numpy(), atol=1e-12)


@pytest.mark.parametrize("mode", ["insertion", "deletion"])
def test_tabular_curves_equal_a_naive_loop_on_the_positive_class(mode):
    model = tiny_mlp()
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    maps = torch.randn(5, 6, generator=gen, dtype=torch.float64).round()  # ties
    means = torch.randn(6, generator=gen, dtype=torch.float64)
    positive = [1] * len(x)
    fractions, curves = insertion_deletion_curves(model, x, maps, mode, baseline=means)
    assert curves.shape == (5, 7)  # one feature per step by default
    np.testing.assert_allclose(fractions.numpy(), np.arange(7) / 6)
    expected = reference_curves(model, x, maps, mode, positive, 6, means)
    np.testing.assert_allclose(curves.numpy(), expected, rtol=0, atol=1e-12)
    stats = (means, torch.rand(6, generator=gen, dtype=torch.float64) + 0.5)
    _, curves = insertion_deletion_curves(model, x, maps, mode, steps=3, stats=stats, target=1, seed=5)
    expected = reference_curves(model, x, maps, mode, positive, 3, "normal", seed=5, stats=stats)
    np.testing.assert_allclose(curves.numpy(), expected, rtol=0, atol=1e-12)


def test_an_ensemble_is_scored_on_its_mean_positive_class_probability():
    gen = torch.Generator().manual_seed(11)
    shapes = [((3, 5, 6), (3, 1, 5)), ((3, 2, 5), (3, 1, 2))]  # 3 members, 6 -> 5 -> 2
    ensemble = MLPEnsemble([torch.randn(w, generator=gen, dtype=torch.float64) for w, _ in shapes],
                           [torch.randn(b, generator=gen, dtype=torch.float64) for _, b in shapes])  # fmt: skip
    x = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    maps = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    _, curves = insertion_deletion_curves(ensemble, x, maps, "deletion", baseline="zero", steps=3)
    expected = reference_curves(ensemble, x, maps, "deletion", [1] * 4, 3, "zero", softmax=False)
    np.testing.assert_allclose(curves.numpy(), expected, rtol=0, atol=1e-12)


def test_auc_is_numpy_trapezoid_over_the_fractions():
    gen = torch.Generator().manual_seed(5)
    curves = torch.rand(4, 9, generator=gen, dtype=torch.float64)
    fractions = torch.cat([torch.zeros(1), torch.rand(7, generator=gen).sort().values, torch.ones(1)]).double()
    np.testing.assert_allclose(auc(curves, fractions).numpy(), np.trapezoid(curves.numpy(), fractions.numpy()))
    uniform = torch.linspace(0, 1, 9, dtype=torch.float64)  # RISE: (sum - ends / 2) / (points - 1)
    rise = (curves.sum(1) - curves[:, 0] / 2 - curves[:, -1] / 2) / 8
    np.testing.assert_allclose(auc(curves, uniform).numpy(), rise.numpy())


class BlockModel(nn.Module):
    """Logits (0, 10 Σ of the top-left 2 x 2 block): only that block matters."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        score = 10 * x[:, :, :2, :2].sum((1, 2, 3))
        return torch.stack([torch.zeros_like(score), score], -1)


def test_the_map_that_ranks_the_models_block_first_scores_best():
    x = torch.ones(1, 1, 8, 8, dtype=torch.float64)
    block = torch.zeros(1, 8, 8, dtype=torch.float64)
    block[:, :2, :2] = 1.0
    ramp = torch.arange(64, dtype=torch.float64).view(1, 8, 8) / 64
    noise = torch.rand(1, 8, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    maps = {"block first": block + ramp, "random": noise, "block last": -block + ramp}

    def areas(m: torch.Tensor) -> list[float]:
        return [curve_auc(BlockModel(), x, m, mode, target=1, steps=16, baseline="zero").item()
                for mode in ("insertion", "deletion")]

    (ins_best, del_best), (ins_random, del_random), (ins_worst, del_worst) = (areas(m) for m in maps.values())
    assert ins_best > ins_random > ins_worst and del_best < del_random < del_worst
    # block first: p = 1/(1 + e^-40) from the first step on, after 0.5 at s = 0 (by hand)
    p = 1 / (1 + math.exp(-40))
    assert ins_best == pytest.approx((0.5 + p) / 2 / 16 + p * 15 / 16, abs=1e-12)
    assert ins_worst == pytest.approx(0.5 * 15 / 16 + (0.5 + p) / 2 / 16, abs=1e-12)


def test_blur_is_rises_kernel_and_zero_padding():
    from scipy import ndimage

    delta = np.zeros((11, 11))
    delta[5, 5] = 1.0
    kernel = ndimage.gaussian_filter(delta, 5)  # RISE's gkern(11, 5)
    np.testing.assert_allclose(torch.outer(rise_blur_kernel(), rise_blur_kernel()).numpy(), kernel, atol=1e-15)
    x = torch.randn(2, 3, 9, 13, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    blurred = BASELINES["blur"](x, None, None)
    expected = np.stack([[ndimage.convolve(c, kernel, mode="constant") for c in image] for image in x.numpy()])
    np.testing.assert_allclose(blurred.numpy(), expected, atol=1e-12)


def test_normal_baseline_has_the_requested_statistics():
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    x = x * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64).view(1, 3, 1, 1) + 5
    own = BASELINES["normal"](x, None, torch.Generator().manual_seed(0))
    np.testing.assert_allclose(own.mean((2, 3)).numpy(), x.mean((2, 3)).numpy(), atol=0.15)
    np.testing.assert_allclose(own.std((2, 3)).numpy(), x.std((2, 3)).numpy(), rtol=0.05)
    given = BASELINES["normal"](x, ([0.0, 1.0, 2.0], [1.0, 1.0, 0.5]), torch.Generator().manual_seed(0))
    np.testing.assert_allclose(given.mean((0, 2, 3)).numpy(), [0.0, 1.0, 2.0], atol=0.05)
    np.testing.assert_allclose(given.std((0, 2, 3)).numpy(), [1.0, 1.0, 0.5], rtol=0.05)


@pytest.mark.parametrize("metric_class, mode", [(InsertionAUC, "insertion"), (DeletionAUC, "deletion")])
def test_metrics_are_the_mean_functional_auc_over_updates(metric_class, mode):
    model = tiny_cnn()
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(6, 2, 5, 6, generator=gen, dtype=torch.float64)
    maps = torch.randn(6, 5, 6, generator=gen, dtype=torch.float64)
    areas = [curve_auc(model, part, m, mode, steps=5, seed=1) for part, m in ((x[:2], maps[:2]), (x[2:], maps[2:]))]
    metric = metric_class(steps=5, seed=1)
    metric.update(model, x[:2], maps[:2])
    metric.update(model, x[2:], maps[2:])
    assert metric.compute().item() == pytest.approx(torch.cat(areas).mean().item(), abs=1e-12)
    # without random draws (zero baseline, no ties) one update and two agree
    whole, split = metric_class(steps=5, baseline="zero"), metric_class(steps=5, baseline="zero")
    whole.update(model, x, maps)
    split.update(model, x[:3], maps[:3])
    split.update(model, x[3:], maps[3:])
    assert whole.compute().item() == pytest.approx(split.compute().item(), abs=1e-12)
    assert metric_class.higher_is_better is (mode == "insertion")
    assert not list(metric.parameters())  # the model is not held by the metric


@pytest.mark.parametrize("call, option", [
    (lambda m, x, a: insertion_deletion_curves(m, x, a, "removal"), "mode="),
    (lambda m, x, a: insertion_deletion_curves(m, x, a[:, :4], "insertion"), "maps of shape"),
    (lambda m, x, a: insertion_deletion_curves(m, x, a[:, None].expand(-1, 2, -1, -1), "deletion"), "reduce_map"),
    (lambda m, x, a: insertion_deletion_curves(m, x, a, "insertion", baseline="mean"), "baseline="),
    (lambda m, x, a: insertion_deletion_curves(m, x, a, "insertion", baseline=torch.zeros(3, 5, 6)), "baseline"),
    (lambda m, x, a: insertion_deletion_curves(m, x, a, "insertion", baseline="zero", stats=([0, 0], [1, 1])),
     "stats"),
    (lambda m, x, a: insertion_deletion_curves(m, x, a, "insertion", stats=([0, 0, 0], [1, 1, 1])), "stats"),
    (lambda m, x, a: insertion_deletion_curves(m, x, a, "insertion", steps=31), "steps="),
    (lambda m, x, a: insertion_deletion_curves(m, x, a, "insertion", steps=0), "steps="),
    (lambda m, x, a: insertion_deletion_curves(m, x, a, "insertion", target=[1, 2, 3]), "target="),
    (lambda m, x, a: insertion_deletion_curves(m, x, a, "insertion", max_batch=0), "max_batch="),
    (lambda m, x, a: insertion_deletion_curves(m, x[0], a, "insertion"), "inputs x"),
    (lambda m, x, a: insertion_deletion_curves(m, x, a * float("nan"), "insertion"), "NaN"),
    (lambda m, x, a: InsertionAUC(baseline="grey"), "baseline="),
])  # fmt: skip
def test_bad_image_input_raises_input_error_naming_the_option(call, option):
    x = torch.randn(3, 2, 5, 6, dtype=torch.float64)
    with pytest.raises(InputError, match=option):
        call(tiny_cnn(), x, torch.rand(3, 5, 6, dtype=torch.float64))


@pytest.mark.parametrize("options, option", [
    ({"baseline": "blur"}, "baseline='blur'"),
    ({"baseline": "normal"}, "stats"),
    ({"baseline": "zero", "target": 2}, "target="),  # a binary model: classes 0 and 1
    ({"baseline": "zero", "target": torch.tensor([1, 0, 5])}, "target="),
    ({"baseline": "normal", "stats": torch.zeros(2, 6)}, "stats"),
])  # fmt: skip
def test_bad_tabular_input_raises_input_error_naming_the_option(options, option):
    x = torch.randn(3, 6, dtype=torch.float64)
    with pytest.raises(InputError, match=option):
        insertion_deletion_curves(tiny_mlp(), x, torch.rand(3, 6, dtype=torch.float64), "deletion", **options)


def test_quantus_pixel_flipping_is_our_deletion_curve():
    """Quantus 0.6.0's PixelFlipping on one-channel images with a constant 0 baseline: its S
    points after each step of 4 pixels are our deletion curve without the clean point."""
    quantus = pytest.importorskip("quantus", reason="quantus is not installed (pip install quantus==0.6.0)")
    model = tiny_cnn(channels=1, classes=3, h=8, w=8).float()
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(4, 1, 8, 8, generator=gen)
    maps = torch.rand(4, 8, 8, generator=gen)
    target = model(x).argmax(-1)
    metric = quantus.PixelFlipping(features_in_step=4, perturb_baseline=0.0, normalise=False, abs=False,
                                   disable_warnings=True, display_progressbar=False)  # fmt: skip
    theirs = np.asarray(metric(model=model, x_batch=x.numpy(), y_batch=target.numpy(), a_batch=maps[:, None].numpy(),
                               channel_first=True, softmax=True, device="cpu"))  # fmt: skip
    _, ours = insertion_deletion_curves(model, x, maps, "deletion", steps=16, baseline="zero")
    np.testing.assert_allclose(ours[:, 1:].numpy(), theirs, rtol=0, atol=1e-5)


class RecordLayout(nn.Module):
    """The tiny CNN, noting whether each batch it sees is in channels-last memory format."""

    def __init__(self) -> None:
        super().__init__()
        self.net, self.channels_last = tiny_cnn(), []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.channels_last.append(x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous())
        return self.net(x)


def test_perturbed_images_keep_the_inputs_memory_format():
    gen = torch.Generator().manual_seed(10)
    x = torch.randn(3, 2, 5, 6, generator=gen, dtype=torch.float64)
    maps = torch.rand(3, 5, 6, generator=gen, dtype=torch.float64)
    model = RecordLayout()
    _, plain = insertion_deletion_curves(model, x, maps, "deletion", steps=5, target=0, max_batch=4)
    assert not any(model.channels_last)
    model.channels_last.clear()
    fast = x.contiguous(memory_format=torch.channels_last)
    _, curves = insertion_deletion_curves(model, fast, maps, "deletion", steps=5, target=0, max_batch=4)
    assert all(model.channels_last) and len(model.channels_last) == 5  # 18 rows, 4 per pass
    np.testing.assert_allclose(curves.numpy(), plain.numpy(), rtol=0, atol=1e-12)
