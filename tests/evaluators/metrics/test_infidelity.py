"""Decker et al.'s perturbations (evaluators.metrics.perturbations), Infidelity and Average-/Max-
Sensitivity: against Captum's ``infidelity(normalize=True)`` and ``sensitivity_max`` fed the same
perturbations, Quantus' AvgSensitivity/MaxSensitivity fed the same noise, scipy's Gaussian filter,
scikit-image's SLIC, direct float64 loops and models whose answer is known.

Quantus' Infidelity is not compared: it perturbs square patches (or single pixels) by a baseline
value, not random 20 % of the superpixels replaced from a blurred copy, and offers no hook that
returns the binary I with the perturbed input; Captum's does (``perturb_func``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from captum.metrics import infidelity as captum_infidelity
from captum.metrics import sensitivity_max
from scipy import ndimage, stats
from skimage.segmentation import slic
from torch import nn

from evaluators.maps import explain
from evaluators.metrics.infidelity import Infidelity, infidelity, subset_perturbations
from evaluators.metrics.perturbations import (
    feature_groups,
    gaussian_blur,
    sample_generator,
    subset_choices,
    superpixels,
    uniform_noise,
    unit_masks,
)
from evaluators.metrics.sensitivity import AverageSensitivity, MaxSensitivity, sensitivities
from foundation.errors import InputError
from lightning_modules import MLPClassifier


def tiny_cnn(channels: int = 3, classes: int = 4, size: int = 12, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(channels, 3, 3, padding=1), nn.ReLU(), nn.Flatten(),
                        nn.Linear(3 * size * size, classes))  # fmt: skip
    return net.double().eval()


def tiny_mlp(d: int = 6) -> nn.Module:
    torch.manual_seed(0)
    return MLPClassifier(in_features=d, hidden=(8,)).double().eval()


def images(n: int = 3, channels: int = 3, size: int = 12, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, channels, size, size, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# --- perturbations ----------------------------------------------------------------------------------
def test_uniform_noise_is_uniform_in_the_ball_and_seeded_per_input():
    x = images(3)
    noisy = uniform_noise(x, 40, radius=0.1, seed=5)
    noise = (noisy - x[:, None]).flatten()
    assert noisy.shape == (3, 40, 3, 12, 12) and noise.abs().max() <= 0.1
    assert stats.kstest(noise.numpy(), stats.uniform(loc=-0.1, scale=0.2).cdf).pvalue > 1e-3
    # an input's noise depends on (seed, stream, index) only: not on the batch, chunking or dtype path
    torch.testing.assert_close(uniform_noise(x[2:], 40, 0.1, seed=5, offset=2)[0], noisy[2], rtol=0, atol=0)
    assert not torch.equal(uniform_noise(x, 40, 0.1, seed=5, stream="fitting"), noisy)
    assert not torch.equal(uniform_noise(x, 40, 0.1, seed=6), noisy)
    torch.testing.assert_close(uniform_noise(x, 40, 0.1, seed=5), noisy, rtol=0, atol=0)


def test_fitting_and_evaluation_streams_are_independent_generators():
    draws = {stream: torch.rand(1000, generator=sample_generator(0, stream, "noise", 0))
             for stream in ("evaluation", "fitting")}  # fmt: skip
    assert abs(np.corrcoef(draws["evaluation"], draws["fitting"])[0, 1]) < 0.1
    assert not torch.equal(torch.rand(5, generator=sample_generator(0, "fitting", "noise", 0)),
                           torch.rand(5, generator=sample_generator(0, "fitting", "subsets", 0)))  # fmt: skip


@pytest.mark.parametrize("sigma", [1.0, 10.0])
def test_gaussian_blur_is_scipys_filter_with_mirror_padding(sigma):
    x = images(2, size=32)
    radius = min(int(4 * sigma + 0.5), 31)
    ours = gaussian_blur(x, sigma).numpy()
    for image, blurred in zip(x.numpy(), ours):
        for channel, out in zip(image, blurred):
            reference = ndimage.gaussian_filter(channel, sigma, mode="mirror", radius=radius)
            np.testing.assert_allclose(out, reference, rtol=0, atol=1e-12)


def test_superpixels_are_slic_on_the_min_max_scaled_image():
    x = images(2, size=16)
    x[1] = 0.1 * x[1] + 3.0 * (torch.arange(16) < 8).view(16, 1)  # top and bottom halves of very different colour
    labels = superpixels(x, n_segments=8, compactness=10.0)
    for image, ours in zip(x.numpy(), labels.numpy()):
        scaled = (image - image.min()) / (image.max() - image.min())
        reference = slic(scaled.transpose(1, 2, 0), n_segments=8, compactness=10.0, sigma=1, start_label=0)
        assert np.array_equal(ours, reference)  # same partition, labels 0 … K − 1
        assert set(np.unique(ours)) == set(range(ours.max() + 1))
    assert not np.intersect1d(labels[1, :6].unique().numpy(), labels[1, 10:].unique().numpy()).size
    gray = superpixels(images(1, channels=1, size=16), n_segments=4)
    assert gray.shape == (1, 16, 16) and gray.max() >= 1


def test_subset_choices_remove_a_uniform_share_of_each_inputs_groups():
    groups = torch.stack([torch.arange(10).repeat_interleave(3), torch.arange(30) % 5])  # K = 10 and K = 5
    chosen = subset_choices(groups, 2000, share=0.2, seed=3)
    assert chosen.shape == (2, 2000, 10)
    assert (chosen[0].sum(1) == 2).all() and (chosen[1].sum(1) == 1).all() and not chosen[1, :, 5:].any()
    for frequencies, k in ((chosen[0].double().mean(0), 10), (chosen[1, :, :5].double().mean(0), 5)):
        expected = int(0.2 * k) / k
        assert (frequencies - expected).abs().max() < 4 * (expected * (1 - expected) / 2000) ** 0.5
    assert (subset_choices(groups, 4, share=0.01).sum(-1) == 1).all()  # at least one group
    masks = unit_masks(groups[:1].expand(3, -1), chosen[0, :3])
    assert torch.equal(masks, chosen[0, :3].gather(1, groups[:1].expand(3, -1)))


# --- infidelity -------------------------------------------------------------------------------------
def direct_infidelity(model, x, maps, samples, target, base, normalize=True) -> np.ndarray:
    """Per input and sample, in float64 Python: the perturbed input built unit by unit from the
    sample's removed groups, Δ = f(x) − f(x̃) on the logit, a = Σ of the map over the removed
    units, then β and the mean squared residual."""
    out = []
    for i in range(len(x)):
        groups = samples.groups[i].numpy()
        clean = model(x[i : i + 1])[0, target[i]].item()
        a, deltas = [], []
        for chosen in samples.chosen[i].numpy():
            perturbed = x[i].clone()
            total = 0.0
            for p, group in np.ndenumerate(groups):
                if chosen[group]:
                    perturbed[(slice(None), *p)] = base[i][(slice(None), *p)]
                    total += maps[i][p].item()
            a.append(total)
            deltas.append(clean - model(perturbed[None])[0, target[i]].item())
        a, deltas = np.array(a), np.array(deltas)
        beta = (a @ deltas) / (a @ a) if normalize else 1.0
        out.append(np.mean((beta * a - deltas) ** 2))
    return np.array(out)


@pytest.mark.parametrize("normalize", [True, False])
def test_infidelity_is_a_direct_loop_and_captums_on_the_same_perturbations(normalize):
    model, x = tiny_cnn(), images(3)
    maps = torch.rand(3, 12, 12, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    target = torch.tensor([0, 3, 1])
    samples = subset_perturbations(model, x, target, n_samples=7, n_segments=10, blur_sigma=2.0, seed=4, max_batch=5)
    ours = infidelity(maps, samples, normalize=normalize).numpy()
    base = gaussian_blur(x, 2.0)
    np.testing.assert_allclose(ours, direct_infidelity(model, x, maps, samples, target, base, normalize), rtol=1e-10)

    removed = torch.cat([unit_masks(samples.groups[i].expand(7, -1, -1), samples.chosen[i]) for i in range(3)])

    def perturb(inputs):  # Captum repeats each input 7 times, input-major, as our samples
        masks = removed[:, None].expand_as(inputs)
        channel0 = torch.zeros_like(inputs)
        channel0[:, 0] = removed.double()
        return channel0, torch.where(masks, base.repeat_interleave(7, 0), inputs)

    attributions = torch.zeros_like(x)
    attributions[:, 0] = maps  # with the mask on channel 0, Σ I ⊙ attributions = Iᵀφ per pixel
    theirs = captum_infidelity(model, perturb, x, attributions, target=target, n_perturb_samples=7, normalize=normalize)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-10)


def test_infidelity_of_tabular_rows_replaced_by_feature_means():
    model, x = tiny_mlp(), torch.randn(4, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    means = torch.linspace(-0.5, 0.5, 6, dtype=torch.float64)
    maps = torch.randn(4, 6, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    samples = subset_perturbations(model, x, n_samples=9, baseline=means, seed=1)
    assert torch.equal(samples.groups, feature_groups(x)) and (samples.chosen.sum(-1) == 1).all()  # ⌊0.2 · 6⌋
    removed = samples.chosen.flatten(0, 1)

    def perturb(inputs):
        return removed.double(), torch.where(removed, means, inputs)

    theirs = captum_infidelity(model.explained_output, perturb, x, maps, n_perturb_samples=9, normalize=True)
    np.testing.assert_allclose(infidelity(maps, samples).numpy(), theirs.numpy(), rtol=1e-10)


def test_a_linear_models_exact_attribution_has_zero_infidelity():
    """f(x) = Σ w ⊙ x: removing units changes f by Σ over them of w ⊙ (x − x_b) exactly, so the
    map φ_p = Σ_c w_cp (x_cp − x_b,cp) has β = 1 and infidelity 0; a wrong map does not."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 12 * 12, 2)).double().eval()
    x = images(2)
    base = gaussian_blur(x, 10.0)
    w = model[1].weight[1].detach().view(3, 12, 12)
    exact = (w * (x - base)).sum(1)
    samples = subset_perturbations(model, x, 1, n_samples=20, n_segments=12)
    np.testing.assert_allclose(infidelity(exact, samples).numpy(), 0, atol=1e-20)
    np.testing.assert_allclose(infidelity(3 * exact, samples).numpy(), 0, atol=1e-20)  # scale-free
    assert (infidelity(3 * exact, samples, normalize=False) > 1e-3).all()
    assert (infidelity(exact.flip(-1), samples) > 1e-3).all()


def test_infidelity_metric_averages_updates():
    model, x = tiny_cnn(), images(4)
    maps = torch.rand(4, 12, 12, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    metric = Infidelity(n_samples=5, n_segments=8)
    metric.update(model, x[:2], maps[:2])
    metric.update(model, x[2:], maps[2:])
    options = {"n_samples": 5, "n_segments": 8}
    first = infidelity(maps[:2], subset_perturbations(model, x[:2], **options))
    second = infidelity(maps[2:], subset_perturbations(model, x[2:], **options))
    torch.testing.assert_close(metric.compute(), torch.cat([first, second]).mean(), rtol=1e-12, atol=0)


def test_infidelity_errors():
    model, x = tiny_cnn(), images(2)
    with pytest.raises(InputError, match="maps of shape"):
        infidelity(torch.rand(2, 3, 12, 12, dtype=torch.float64), subset_perturbations(model, x, n_samples=2))
    with pytest.raises(InputError, match="feature means"):
        subset_perturbations(tiny_mlp(), torch.randn(2, 6, dtype=torch.float64))
    with pytest.raises(InputError, match="option share"):
        subset_perturbations(model, x, share=1.5)
    with pytest.raises(InputError, match="option target"):
        subset_perturbations(model, x, target="cat")
    with pytest.raises(InputError, match="inputs x of shape"):
        subset_perturbations(model, x[0])
    with pytest.raises(InputError, match="option stream"):
        subset_perturbations(model, x, stream="test")


# --- sensitivity ------------------------------------------------------------------------------------
def saliency_fn(model):
    return lambda rows, target: explain(model, rows, "saliency", target=target).sum(1)


def test_sensitivity_is_a_direct_loop_and_captums_sensitivity_max():
    model, x = tiny_cnn(), images(3)
    target = torch.tensor([2, 0, 1])
    explain_fn = saliency_fn(model)
    maps = explain_fn(x, target)
    distances = sensitivities(explain_fn, x, maps, target, n_samples=6, radius=0.1, seed=2, max_batch=12)
    noisy = uniform_noise(x, 6, 0.1, seed=2)
    for i in range(3):  # one perturbed input at a time, float64 numpy
        for s in range(6):
            e = explain(model, noisy[i, s][None], "saliency", target=int(target[i]))[0].sum(0).numpy()
            expected = np.linalg.norm(e - maps[i].numpy()) / np.linalg.norm(maps[i].numpy())
            np.testing.assert_allclose(distances[i, s].item(), expected, rtol=1e-10)

    def perturb(inputs, radius):
        return noisy.flatten(0, 1)

    def captum_fn(inputs, target):  # Captum passes x itself as a one-tensor tuple and expects one back
        rows = inputs[0] if isinstance(inputs, tuple) else inputs
        maps = explain(model, rows, "saliency", target=target).sum(1, keepdim=True).expand_as(rows) / 3 ** 0.5
        return (maps,) if isinstance(inputs, tuple) else maps

    theirs = sensitivity_max(captum_fn, x, perturb, n_perturb_samples=6, target=target)
    np.testing.assert_allclose(distances.amax(1).numpy(), theirs.numpy(), rtol=1e-10)


def test_sensitivity_of_a_linear_explanation_is_the_norm_of_the_scaled_noise():
    """e(x) = w ⊙ x: e(x + ε) − e(x) = w ⊙ ε, so d_s = ‖w ⊙ ε_s‖ (/ ‖w ⊙ x‖); a constant
    explanation has sensitivity 0; the rows reach explain_fn whole inputs at a time."""
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    w = torch.tensor([1.0, -2.0, 0.5, 0.0], dtype=torch.float64)
    calls = []

    def explain_fn(rows, target):
        calls.append(len(rows))
        return rows * w

    distances = sensitivities(explain_fn, x, x * w, n_samples=4, relative=False, seed=1, max_batch=9)
    assert calls == [8, 8, 4]  # ⌊9 / 4⌋ = 2 inputs of 4 samples per call
    noise = uniform_noise(x, 4, 0.1, seed=1) - x[:, None]
    np.testing.assert_allclose(distances.numpy(), (noise * w).norm(dim=-1).numpy(), rtol=1e-12)
    relative = sensitivities(lambda rows, t: rows * w, x, x * w, n_samples=4, seed=1)
    np.testing.assert_allclose(relative.numpy(), (distances / (x * w).norm(dim=1, keepdim=True)).numpy(), rtol=1e-12)
    constant = sensitivities(lambda rows, t: torch.ones_like(rows), x, torch.ones_like(x), n_samples=4)
    assert constant.abs().max() == 0


def test_quantus_avg_and_max_sensitivity_fed_our_noise():
    """Quantus 0.6.0 (Decker et al.'s evaluation code) divides ‖e(x + ε) − e(x)‖ by ‖e(x)‖ (Frobenius),
    as ours with relative=True. Its default noise is U[−0.2, 0.2] (``lower_bound=0.2``; Decker et al.
    state 0.1); here its ``perturb_func`` returns our noisy inputs step by step, so both see the
    same perturbations."""
    quantus = pytest.importorskip("quantus", reason="quantus is not installed (pip install quantus==0.6.0)")
    model = tiny_cnn(channels=1, size=8).float()
    x = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(5))
    target = model(x).argmax(-1)
    n = 5
    noisy = uniform_noise(x, n, 0.1, seed=3)

    def quantus_explain(model, inputs, targets, **kwargs):
        rows = torch.as_tensor(inputs)
        return explain(model, rows, "saliency", target=torch.as_tensor(targets)).detach().numpy()

    def ours_fn(rows, target_rows):
        return explain(model, rows, "saliency", target=target_rows)

    maps = ours_fn(x, target)
    ours = sensitivities(ours_fn, x, maps, target, n_samples=n, seed=3)
    for name, statistic in (("AvgSensitivity", ours.mean(1)), ("MaxSensitivity", ours.amax(1))):
        step = iter(range(n))

        def perturb(arr, indices, **kwargs):
            return noisy[:, next(step)].reshape(len(arr), -1).numpy()

        metric = getattr(quantus, name)(nr_samples=n, perturb_func=perturb, normalise=False, abs=False,
                                        disable_warnings=True, display_progressbar=False)  # fmt: skip
        theirs = metric(model=model, x_batch=x.numpy(), y_batch=target.numpy(), a_batch=maps.detach().numpy(),
                        explain_func=quantus_explain, device="cpu")  # fmt: skip
        np.testing.assert_allclose(statistic.numpy(), np.asarray(theirs), rtol=1e-5)


def test_sensitivity_metrics_average_updates():
    model, x = tiny_cnn(), images(4)
    explain_fn = saliency_fn(model)
    target = torch.tensor([0, 1, 2, 3])
    maps = explain_fn(x, target)
    average, maximum = AverageSensitivity(n_samples=3), MaxSensitivity(n_samples=3)
    for metric in (average, maximum):
        metric.update(None, x[:3], maps[:3], target[:3], explain_fn=explain_fn)
        metric.update(None, x[3:], maps[3:], target[3:], explain_fn=explain_fn)
    first = sensitivities(explain_fn, x[:3], maps[:3], target[:3], n_samples=3)
    second = sensitivities(explain_fn, x[3:], maps[3:], target[3:], n_samples=3)
    both = torch.cat([first, second])
    torch.testing.assert_close(average.compute(), both.mean(1).mean(), rtol=1e-12, atol=0)
    torch.testing.assert_close(maximum.compute(), both.amax(1).mean(), rtol=1e-12, atol=0)


def test_sensitivity_errors():
    x = torch.randn(2, 4, dtype=torch.float64)
    with pytest.raises(InputError, match="explain_fn returned maps"):
        sensitivities(lambda rows, t: rows[:, :2], x, x, n_samples=2)
    with pytest.raises(InputError, match="maps of shape"):
        sensitivities(lambda rows, t: rows, x, x[:1], n_samples=2)
    with pytest.raises(InputError, match="option radius"):
        sensitivities(lambda rows, t: rows, x, x, radius=-1.0)
    with pytest.raises(InputError, match="option n_samples"):
        sensitivities(lambda rows, t: rows, x, x, n_samples=0)
