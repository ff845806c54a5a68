"""Hedström et al. (2023)'s efficient MPRT (``evaluators.sanity.efficient_mprt``) and the smooth
MPRT (``model_randomisation`` on ``smoothed_maps``, bottom up): by hand on a linear network and
against Quantus 0.6's ``EfficientMPRT`` and ``SmoothMPRT`` on a small CNN."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch
from torch import nn

from evaluators.sanity import discrete_entropy, efficient_mprt, model_randomisation, randomised_models
from evaluators.sanity.maps import maps_of, smoothed_maps
from foundation.errors import InputError


def small_cnn(seed=0):
    """Conv-BN-ReLU-Conv-ReLU-Linear with BatchNorm statistics away from their initial values."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1),
                          nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 5))  # fmt: skip
    model[1].running_mean.normal_(0, 0.3)
    model[1].running_var.uniform_(0.5, 2.0)
    model[1].weight.data.uniform_(0.5, 1.5)
    return model.eval()


def inputs():
    return torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(1)), torch.tensor([3, 1, 4, 0])


def ours_for_quantus(seed):
    """Quantus's ``explain_func``: our saliency (channels summed), as float64 (N, 1, H, W)."""
    def explain_func(model, inputs, targets, **kwargs):
        x = torch.as_tensor(np.asarray(inputs), dtype=torch.float32)
        maps = maps_of(model, x, torch.as_tensor(np.asarray(targets)), "saliency", {}, seed, "sum")
        return maps.unsqueeze(1).double().numpy()

    return explain_func


def test_discrete_entropy_by_hand():
    maps = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 1.0, 2.0, 3.0], [5.0, 5.0, 5.0, 5.0], [0.0, 0.1, 0.2, 3.0]])
    got = discrete_entropy(maps, n_bins=2)
    # halves: {0,0 | 1,1}; {0,1 | 2,3}; one value in one bin; {0, .1, .2 | 3}: shares 3/4, 1/4
    expected = [math.log(2), math.log(2), 0.0, -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)
    assert discrete_entropy(maps[:2], n_bins=4)[1] == pytest.approx(math.log(4), abs=1e-15)
    with pytest.raises(InputError, match="option n_bins=0"):
        discrete_entropy(maps, n_bins=0)
    maps[1, 2] = float("nan")
    with pytest.raises(InputError, match="maps"):
        discrete_entropy(maps)


def test_efficient_mprt_by_hand_on_a_linear_network():
    """f = W2 W1 x: saliency of class t is (W2 W1)[t]; after randomising both layers (bottom up,
    layer j from seed + j) it is (W2' W1')[t]; the score is (H(ê) − H(e)) / H(e) of those rows."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(40, 20), nn.Linear(20, 3)).double()
    x, y = torch.randn(5, 40, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1])
    got = efficient_mprt(model, x, y, ["saliency"], seed=7, n_bins=10)
    randomised = list(randomised_models(model, "bottom_up", 7))[-1][1]
    e = (model[1].weight @ model[0].weight).detach()[y]
    r = (randomised[1].weight @ randomised[0].weight).detach()[y]
    h = [scipy.stats.entropy(np.histogram(row, bins=10)[0]) for row in e.numpy()]
    hr = [scipy.stats.entropy(np.histogram(row, bins=10)[0]) for row in r.numpy()]
    assert got.layers == ["0", "1"] and got.explainers == ["saliency"]
    np.testing.assert_allclose(got.entropy[0], h, rtol=0, atol=1e-15)
    np.testing.assert_allclose(got.scores[0], (np.array(hr) - h) / h, rtol=0, atol=1e-15)
    zero = efficient_mprt(model, torch.zeros(2, 40, dtype=torch.float64), y[:2], ["input_x_gradient"], seed=7)
    assert zero.scores.isnan().all() and zero.mean()[1].tolist() == [0]  # constant maps: NaN, not counted


def test_bottom_up_cascade_ends_with_every_layer_randomised():
    model = small_cnn()
    names = [name for name, _ in randomised_models(model, "bottom_up", 3)]
    assert names == ["0", "1", "3", "6"]
    last_up = list(randomised_models(model, "bottom_up", 3))[-1][1]
    last_down = list(randomised_models(model, "cascading", 3))[-1][1]
    assert all(torch.equal(a, b) for a, b in zip(last_up.state_dict().values(), last_down.state_dict().values()))


def test_efficient_mprt_against_quantus():
    quantus = pytest.importorskip("quantus", reason="quantus is not installed (pip install quantus==0.6.0)")
    model, (x, y) = small_cnn(), inputs()
    ours = efficient_mprt(model, x, y, ["saliency"], seed=43, same_seed=True)
    metric = quantus.EfficientMPRT(layer_order="bottom_up", seed=42, disable_warnings=True)
    theirs = metric(model=model, x_batch=x.numpy(), y_batch=y.numpy(), a_batch=None, explain_func=ours_for_quantus(43),
                    device="cpu")  # fmt: skip
    np.testing.assert_allclose(ours.scores[0], theirs, rtol=0, atol=1e-12)
    assert ours.scores[0].abs().max() > 0.02  # randomising moves the entropy: the check can fail


def test_smoothed_maps_by_hand_and_per_input():
    """Input × Gradient of a linear map W x is W[t] ⊙ x: denoised over S samples it is
    W[t] ⊙ (x + Σ_{s<S−1} z_s σ (max x − min x) / S); one sample is the plain map; an input's
    denoised map does not depend on the other inputs of the call."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 3)).double()
    x, y = torch.randn(4, 6, dtype=torch.float64), torch.tensor([0, 1, 2, 1])
    z = torch.randn(2, 4, 6, dtype=torch.float64)
    got = smoothed_maps(model, x, y, "input_x_gradient", {}, 0, "sum", n_samples=3, noise_magnitude=0.2, noise=z)
    scale = 0.2 * (x.amax(1) - x.amin(1)).view(-1, 1)
    torch.testing.assert_close(got, model[0].weight.detach()[y] * (x + z.sum(0) * scale / 3), rtol=0, atol=1e-12)
    plain = maps_of(model, x, y, "saliency", {}, 0, "sum")
    assert torch.equal(smoothed_maps(model, x, y, "saliency", {}, 0, "sum"), plain)
    both = smoothed_maps(model, x, y, "input_x_gradient", {}, 5, "sum", n_samples=4, noise_magnitude=0.1)
    alone = smoothed_maps(model, x[:1], y[:1], "input_x_gradient", {}, 5, "sum", n_samples=4, noise_magnitude=0.1)
    assert torch.equal(both[:1], alone)
    for option, value in (("n_samples", 0), ("noise_magnitude", -0.1)):
        with pytest.raises(InputError, match=f"option {option}="):
            smoothed_maps(model, x, y, "saliency", {}, 0, "sum", **{"n_samples": 2, "noise_magnitude": 0.1,
                                                                    option: value})  # fmt: skip


def test_smooth_mprt_against_quantus(monkeypatch):
    """Quantus 0.6 ``SmoothMPRT`` (bottom up, Spearman of absolute maps, no normalisation) draws
    its noise from ``np.random.randn`` at every stage: given our draws, the same at every
    stage, it gives our scores, layer by layer; its "original" entry (our denoised map against
    its second denoising of the original model) is 1."""
    quantus = pytest.importorskip("quantus", reason="quantus is not installed (pip install quantus==0.6.0)")
    model, (x, y) = small_cnn(), inputs()
    n_samples, magnitude = 4, 0.2
    z = torch.randn(n_samples - 1, *x.shape, generator=torch.Generator().manual_seed(2))
    ours = model_randomisation(model, x, y, ["saliency"], "bottom_up", ["spearman_abs"], seed=43, same_seed=True,
                               keep_maps=True, n_samples=n_samples, noise_magnitude=magnitude, noise=z)  # fmt: skip
    calls = iter(range(10**6))
    monkeypatch.setattr(np.random, "randn", lambda *shape: z[next(calls) % (n_samples - 1)].double().numpy())
    metric = quantus.SmoothMPRT(similarity_func=quantus.similarity_func.correlation_spearman, layer_order="bottom_up",
                                seed=42, nr_samples=n_samples, noise_magnitude=magnitude, normalise=False,
                                disable_warnings=True)  # fmt: skip
    theirs = metric(model=model, x_batch=x.numpy(), y_batch=y.numpy(),
                    a_batch=ours.maps["saliency"][0, :, None].numpy(), explain_func=ours_for_quantus(43),
                    device="cpu")  # fmt: skip
    np.testing.assert_allclose(theirs["original"], 1.0, rtol=0, atol=1e-12)
    assert list(theirs)[1:] == ours.layers == ["0", "1", "3", "6"]
    for step, layer in enumerate(ours.layers):
        np.testing.assert_allclose(ours.scores[step, 0, 0], theirs[layer], rtol=0, atol=1e-6, err_msg=layer)
    assert (ours.scores[1:] - ours.scores[:-1]).abs().amax() > 0.05  # each layer's scores its own: the check can fail
    plain = model_randomisation(model, x, y, ["saliency"], "bottom_up", ["spearman_abs"], seed=43, same_seed=True)
    assert (plain.scores - ours.scores).abs().amax() > 0.01  # denoising changes the scores
