"""Model parameter randomisation and the random-logit test (evaluators/sanity) against float64
hand computations and Quantus 0.6's ``MPRT`` and ``RandomLogit`` where their definitions match
(docs/sanity_checks.md#definitions says where they do not)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import torch
from torch import nn

from evaluators.sanity import (RandomisationScores, model_randomisation, other_classes, randomisable_layers,
                               random_logit, randomised_models)
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


def test_layers_in_module_order_and_cascade():
    model = trained_like_resnet8()
    names = randomisable_layers(model)
    assert names[:3] == ["conv1", "bn1", "layers.0.conv1"] and names[-1] == "fc" and len(names) == 15
    original = {k: v.clone() for k, v in model.state_dict().items()}
    for step, (name, randomised) in enumerate(randomised_models(model, "cascading", seed=3)):
        assert name == names[-1 - step]
        changed = {k.rsplit(".", 1)[0] for k, v in randomised.state_dict().items() if not torch.equal(v, original[k])}
        assert changed == set(names[len(names) - 1 - step:]), name  # exactly this layer and every one above
        if name.startswith("layers.1.bn"):  # BatchNorm reset as at construction
            bn = dict(randomised.named_modules())[name]
            assert torch.equal(bn.running_mean, torch.zeros(16 * 2)) and torch.equal(bn.running_var, torch.ones(32))
            assert torch.equal(bn.weight, torch.ones(32)) and int(bn.num_batches_tracked) == 0
    for name, randomised in randomised_models(model, "independent", seed=3):
        changed = {k.rsplit(".", 1)[0] for k, v in randomised.state_dict().items() if not torch.equal(v, original[k])}
        assert changed == {name}, name


def test_layers_of_a_custom_model():
    class Scaled(nn.Module):  # a parameter without reset_parameters: never randomised
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(3))

        def forward(self, x):
            return x * self.scale

    model = nn.Sequential(nn.Linear(4, 3), Scaled(), nn.ReLU(), nn.BatchNorm1d(3, affine=False), nn.Linear(3, 2))
    assert randomisable_layers(model) == ["0", "3", "4"]
    with pytest.raises(InputError, match="no layer to randomise"):
        next(randomised_models(nn.Sequential(nn.ReLU(), Scaled())))
    with pytest.raises(InputError, match="mode='top_down'"):
        next(randomised_models(model, "top_down"))


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


def test_random_logit_against_quantus_and_by_hand():
    quantus = pytest.importorskip("quantus", reason="quantus is not installed (pip install quantus==0.6.0)")
    model = trained_like_resnet8(1)
    x, y = torch.randn(6, 3, 32, 32, generator=torch.Generator().manual_seed(2)), torch.tensor([0, 9, 3, 3, 5, 2])
    ours = random_logit(model, x, y, ["saliency"], ["spearman", "ssim"], seed=5)["saliency"]
    metric = quantus.RandomLogit(num_classes=10, seed=5, similarity_func=quantus.similarity_func.correlation_spearman,
                                 normalise=False, disable_warnings=True)  # fmt: skip
    theirs = metric(model=model, x_batch=x.numpy(), y_batch=y.numpy(), a_batch=None,
                    explain_func=quantus_explain("Gradient"), device="cpu")  # fmt: skip
    np.testing.assert_allclose(ours["spearman"], theirs, rtol=0, atol=1e-5)
    # the other class by hand: j-th of the classes other than y, j from NumPy's RandomState(5)
    j = np.random.RandomState(5).randint(0, 9, 6)
    expected = [[c for c in range(10) if c != t][k] for t, k in zip(y.tolist(), j)]
    assert other_classes(y, 10, 5).tolist() == expected
    from evaluators.maps import explain
    from foundation.modality import reduce_map
    from skimage.metrics import structural_similarity

    a = reduce_map(explain(model, x, "saliency", target=y), "sum").double().numpy()
    b = reduce_map(explain(model, x, "saliency", target=torch.tensor(expected)), "sum").double().numpy()
    ssim = [structural_similarity(p, q, data_range=max(p.max(), q.max()) - min(p.min(), q.min())) for p, q in zip(a, b)]
    np.testing.assert_allclose(ours["ssim"], ssim, atol=1e-6)


def test_other_classes_never_the_target():
    target = torch.arange(4).repeat(500)
    other = other_classes(target, 4, 0)
    assert (other != target).all() and set(other.tolist()) == {0, 1, 2, 3}
    counts = torch.bincount(other[target == 0], minlength=4)[1:]  # uniform over the 3 others
    assert counts.min() > 120


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
