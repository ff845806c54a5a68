"""Infidelity (evaluators/metrics/infidelity.py): against Captum's ``infidelity(normalize=True)``
fed the same perturbations, direct float64 loops and models whose answer is known. The
perturbations: test_perturbations.py; Average-/Max-Sensitivity: test_sensitivity.py.

Quantus' Infidelity is not compared: it perturbs square patches (or single pixels) by a baseline
value, not random 20 % of the superpixels replaced from a blurred copy, and offers no hook that
returns the binary I with the perturbed input; Captum's does (``perturb_func``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from captum.metrics import infidelity as captum_infidelity
from torch import nn

from evaluators.metrics.infidelity import Infidelity, infidelity, subset_perturbations
from evaluators.metrics.perturbations import feature_groups, gaussian_blur, unit_masks
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
