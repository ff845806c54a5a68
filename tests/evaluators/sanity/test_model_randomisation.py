"""Model parameter randomisation (evaluators/sanity/model_randomisation.py) against float64 hand
computations and Quantus 0.6's ``MPRT`` where their definitions match (docs/sanity_checks.md#definitions
says where they do not). The layers it randomises: test_layers.py; the random-logit test: test_random_logit.py."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import torch
from torch import nn

from evaluators.sanity import RandomisationScores, model_randomisation, random_logit
from foundation.errors import InputError
from lightning_modules.image_classifier import create_image_model


def linear_pair(seed=0):
    """f(x) = W2 (W1 x + b1) + b2 in float64: its saliency of class t is (W2 W1)[t] for any x."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 5), nn.Linear(5, 3)).double()


def fresh_linear(n_in, n_out, seed):
    """A layer as its constructor initialises it after ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    return nn.Linear(n_in, n_out, dtype=torch.float64)


def trained_like_resnet8(seed=0):
    """A random ResNet-8 whose BatchNorm layers look trained (running statistics and affine
    parameters away from their initial 0, 1), so resetting them changes the maps."""
    torch.manual_seed(seed)
    model = create_image_model("resnet8", 10)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.3)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.normal_(0, 0.2)
    return model.eval()


def spearman_rows(a, b):
    return [scipy.stats.spearmanr(x, y)[0] for x, y in zip(np.asarray(a), np.asarray(b))]


@pytest.mark.parametrize("mode", ["cascading", "independent"])
def test_linear_pair_by_hand(mode):
    """Saliency of a two-layer linear map, per step, against W2' W1 and W2' W1' (cascading) or
    W2 W1' (independent), the new layers drawn as their constructor draws from seed + position."""
    model, seed = linear_pair(), 7
    w1, w2 = model[0].weight.detach().clone(), model[1].weight.detach().clone()
    new1, new2 = fresh_linear(8, 5, seed + 0).weight.detach(), fresh_linear(5, 3, seed + 1).weight.detach()
    x, y = torch.randn(6, 8, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1, 2])
    state = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    got = model_randomisation(model, x, y, ["saliency"], mode, ["spearman", "spearman_abs"], seed=seed,
                              keep_maps=True)  # fmt: skip
    assert got.layers == ["1", "0"] and got.scores.shape == (2, 1, 2, 6) and got.maps["saliency"].shape == (3, 6, 8)
    torch.testing.assert_close(got.maps["saliency"][0], (w2 @ w1)[y], rtol=0, atol=1e-12)
    steps = [new2 @ w1, new2 @ new1] if mode == "cascading" else [new2 @ w1, w2 @ new1]
    for step, product in enumerate(steps):
        torch.testing.assert_close(got.maps["saliency"][1 + step], product[y], rtol=0, atol=1e-12)
        a, b = product[y], (w2 @ w1)[y]
        np.testing.assert_allclose(got.scores[step, 0, 0], spearman_rows(a, b), atol=1e-12)
        np.testing.assert_allclose(got.scores[step, 0, 1], spearman_rows(a.abs(), b.abs()), atol=1e-12)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())  # the user's model untouched
    assert torch.equal(torch.get_rng_state(), rng)  # and the global random state


def test_kept_maps_of_chosen_inputs_and_the_original_against_itself():
    """keep_maps=<indices> keeps exactly those inputs' maps of every stage (keep_maps=True's rows),
    and ``itself`` is each original map against itself: 1, NaN for a constant (all-zero) map."""
    model, seed = linear_pair(), 3
    x, y = torch.randn(6, 8, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1, 2])
    x[4] = 0.0  # Input × Gradient of a zero input: a constant map
    every = model_randomisation(model, x, y, ["input_x_gradient"], "cascading", ["spearman", "spearman_abs"],
                                seed=seed, keep_maps=True)  # fmt: skip
    some = model_randomisation(model, x, y, ["input_x_gradient"], "cascading", ["spearman", "spearman_abs"],
                               seed=seed, keep_maps=torch.tensor([4, 1]))  # fmt: skip
    assert some.maps["input_x_gradient"].shape == (3, 2, 8)
    assert torch.equal(some.maps["input_x_gradient"], every.maps["input_x_gradient"][:, [4, 1]])
    torch.testing.assert_close(some.scores, every.scores, equal_nan=True, rtol=0, atol=0)
    expected = torch.ones(1, 2, 6, dtype=torch.float64)
    expected[..., 4] = float("nan")
    torch.testing.assert_close(some.itself, expected, equal_nan=True, rtol=0, atol=1e-12)
    assert model_randomisation(model, x, y, ["saliency"], measures=["spearman"], seed=seed).maps is None


def test_mean_over_inputs_skips_nan():
    scores = torch.tensor([[[[0.5, float("nan"), 0.1]], [[float("nan")] * 3]]], dtype=torch.float64)  # (1, 2, 1, 3)
    means, counts = RandomisationScores("cascading", ["fc"], ["a", "b"], ["spearman"], scores).mean()
    assert means[0, 0, 0] == pytest.approx(0.3, abs=1e-15) and means[0, 1, 0].isnan()
    assert counts.tolist() == [[[2], [0]]]


def quantus_explain(method):
    def explain_func(model, inputs, targets, **kwargs):
        import quantus

        return quantus.explain(model, inputs, targets, method=method)

    return explain_func


@pytest.mark.parametrize("mode, order, methods", [("cascading", "top_down", ["Gradient", "InputXGradient"]),
                                                  ("independent", "independent", ["Gradient"])])
def test_mprt_against_quantus(mode, order, methods):
    """Quantus 0.6 ``MPRT`` with Spearman on absolute maps (its default; ``normalise=False``:
    its float32 division by the batch's largest value can merge two values into a tie,
    bench/sanity_checks.py) and seed s re-initialises every layer from s + 1: ours with
    ``same_seed=True``, seed s + 1, ``spearman_abs``."""
    quantus = pytest.importorskip("quantus", reason="quantus is not installed (pip install quantus==0.6.0)")
    model = trained_like_resnet8()
    x, y = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1)), torch.tensor([3, 1, 4, 1])
    explainers = ["saliency", "input_x_gradient"][:len(methods)]
    ours = model_randomisation(model, x, y, explainers, mode, ["spearman_abs"], seed=43, same_seed=True)
    for e, method in enumerate(methods):
        metric = quantus.MPRT(similarity_func=quantus.similarity_func.correlation_spearman, layer_order=order,
                              seed=42, normalise=False, disable_warnings=True)  # fmt: skip
        theirs = metric(model=model, x_batch=x.numpy(), y_batch=y.numpy(), a_batch=None,
                        explain_func=quantus_explain(method), device="cpu")  # fmt: skip
        assert set(theirs) - {"original"} == set(ours.layers)
        for step, layer in enumerate(ours.layers):
            np.testing.assert_allclose(ours.scores[step, e, 0], theirs[layer], rtol=0, atol=1e-5, err_msg=layer)
    assert (ours.scores[1:] - ours.scores[:-1]).abs().amax() > 0.05  # each layer's scores its own: the check can fail


def test_bad_options():
    model, x, y = linear_pair(), torch.randn(3, 8, dtype=torch.float64), torch.tensor([0, 1, 2])
    for kwargs, message in (({"explainers": ["nope"]}, "unknown explainer 'nope'"),
                            ({"explainers": "saliency"}, "option explainers="),
                            ({"explainers": ["saliency"], "measures": ["pearson"]}, "option measures="),
                            ({"explainers": ["saliency"], "measures": ["ssim"]}, "'ssim' takes image maps"),
                            ({"explainers": ["saliency"], "mode": "top_down"}, "option mode="),
                            ({"explainers": ["saliency"], "seed": -1}, "option seed="),
                            ({"explainers": ["saliency"], "reduction": "max"}, "option reduction=")):  # fmt: skip
        with pytest.raises(InputError, match=message):
            model_randomisation(model, x, y, **kwargs)
    with pytest.raises(InputError, match="expected classes 0 … 2"):
        random_logit(model, x, torch.tensor([0, 1, 3]), ["saliency"], ["spearman"])
