"""Average- and Max-Sensitivity (evaluators/metrics/sensitivity.py): against Captum's
``sensitivity_max`` and Quantus' AvgSensitivity/MaxSensitivity fed the same noise, a direct
float64 loop, and a linear explanation whose answer is the norm of the scaled noise."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from captum.metrics import sensitivity_max

from evaluators.maps import explain
from evaluators.metrics.perturbations import uniform_noise
from evaluators.metrics.sensitivity import AverageSensitivity, MaxSensitivity, sensitivities
from foundation.errors import InputError
from tests.evaluators.metrics.test_infidelity import images, tiny_cnn


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
