"""Faithfulness correlation (evaluators/metrics/faithfulness_correlation.py) against a direct float64
implementation of its formula (one input and one subset at a time, with NumPy's Pearson), Quantus
0.6.0's on its own subsets, and a hand-computed answer (Gradient × Input of a linear logit: 1).
Its bad options: test_fidelity_metrics.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evaluators.metrics.faithfulness_correlation import FaithfulnessCorrelation, faithfulness_correlation
from evaluators.metrics.infidelity import SubsetSamples, subset_perturbations
from evaluators.metrics.perturbations import gaussian_blur, pixel_groups
from tests.evaluators.metrics.test_fidelity_metrics import LinearScore, data, replace_units, scalar_output, tiny_cnn
from tests.support.tiny_models import tiny_mlp


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
