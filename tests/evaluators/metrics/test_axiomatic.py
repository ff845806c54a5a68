"""The axiomatic metrics (evaluators.metrics.axiomatic): equal to Quantus 0.6's Completeness,
NonSensitivity and InputInvariance on a small seeded CNN (with the settings that match ours,
each named where it is passed), equal to hand computations on linear models, and refusing bad
input with an InputError naming what."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from evaluators.metrics import axiomatic as ax
from evaluators.metrics.registry import METRICS
from foundation.errors import InputError

N, C, H, W = 6, 1, 6, 6


def cnn() -> nn.Module:
    """An unpadded 3 x 3 convolution first (Quantus shifts a convolution's bias only), float32."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(C, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 4 * 4, 4)).eval()


def case():
    model = cnn()
    x = torch.randn(N, C, H, W, generator=torch.Generator().manual_seed(3))
    return model, x, torch.tensor([0, 1, 2, 3, 0, 1])


def explainer(model: nn.Module, times_input: bool):
    """Gradient (× input) of the target logit summed over channels: ours (inputs, target) and
    Quantus's explain_func (model, inputs, targets) -> (N, 1, H, W) arrays."""

    def maps(m, v, t):
        v = torch.as_tensor(v).detach().requires_grad_()
        (grad,) = torch.autograd.grad(m(v).gather(1, torch.as_tensor(t)[:, None]).sum(), v)
        return (grad * v if times_input else grad).sum(1).detach()

    def quantus_maps(model, inputs, targets, **_):
        return maps(model, inputs, targets)[:, None].numpy()

    return (lambda v, t: maps(model, v, t)), quantus_maps


def run_quantus(name: str, model, x, y, maps, **options):
    quantus = pytest.importorskip("quantus")
    metric = getattr(quantus, name)(disable_warnings=True, **options.pop("init", {}))
    return np.asarray(metric(model=model, x_batch=x.numpy(), y_batch=y.numpy(), a_batch=maps[:, None].numpy(),
                             **options), dtype=float)  # fmt: skip


def test_completeness_equals_quantus():
    """Maps whose one nonzero entry is the logit's change to the black baseline (complete, to the
    bit) on even inputs and that change plus 1 on odd ones; Quantus with ``normalise=False``
    (its default divides the maps by their largest value, which breaks completeness)."""
    model, x, y = case()
    with torch.no_grad():
        black = x.flatten(1).amin(1).view(-1, 1, 1, 1).expand_as(x)
        change = model(x).gather(1, y[:, None])[:, 0] - model(black).gather(1, y[:, None])[:, 0]
    maps = torch.zeros(N, H, W)
    maps[:, 2, 3] = change + torch.arange(N).remainder(2)
    expected = run_quantus("Completeness", model, x, y, maps, init={"normalise": False})
    np.testing.assert_array_equal(ax.completeness(model, x, maps, y).numpy(), expected)
    assert expected.tolist() == [1, 0, 1, 0, 1, 0]
    torch.testing.assert_close(ax.completeness_gap(model, x, maps, y), torch.arange(N).remainder(2).float())


@pytest.mark.parametrize("eps", [1e-5, 0.05])
def test_non_sensitivity_equals_quantus(eps):
    """Gradient × input maps with two pixels zeroed; Quantus normalising each map by its own
    largest value (``normalise_axes``), as ours, and its default probabilities (softmax)."""
    model, x, y = case()
    ours, _ = explainer(model, times_input=True)
    maps = ours(x, y)
    maps[:, :2, 0] = 0
    expected = run_quantus("NonSensitivity", model, x, y, maps, softmax=True,
                           init={"eps": eps, "normalise_func_kwargs": {"normalise_axes": (1, 2, 3)}})  # fmt: skip
    got = ax.non_sensitivity(model, x, maps, y, eps=eps, max_batch=7)  # chunks across inputs
    np.testing.assert_array_equal(got.numpy(), expected)
    assert len(set(expected.tolist())) > 1


@pytest.mark.parametrize("times_input", [False, True])
def test_input_invariance_equals_quantus(times_input):
    """Gradients are invariant (every input 1), gradient × input is not (0). Quantus 0.6 leaves
    entry 0 of each input unshifted (``perturb_batch`` passes ``indices[i][1:]``); it is given a
    ``perturb_func`` that shifts every entry, as the definition (and ours) does."""
    model, x, y = case()
    ours, theirs = explainer(model, times_input)
    maps = ours(x, y)

    def shift_every_entry(arr, indices, input_shift, **_):
        return arr + input_shift

    expected = run_quantus("InputInvariance", model, x, y, maps, explain_func=theirs,
                           init={"perturb_func": shift_every_entry})  # fmt: skip
    got = ax.input_invariance(model, x, maps, ours, y)
    np.testing.assert_array_equal(got.numpy(), expected)
    assert expected.tolist() == [0.0 if times_input else 1.0] * N


def linear_model() -> nn.Module:
    model = nn.Linear(3, 2).double()
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 0.0, 2.0], [0.5, -1.0, 0.0]]))
        model.bias.copy_(torch.tensor([0.3, -0.2]))
    return model.eval()


def test_completeness_and_non_sensitivity_by_hand():
    """f = x₀ + 2 x₂ + 0.3 (class 0). Baseline 0: the map w ⊙ x sums to f(x) − f(0) (gap 0,
    complete); the map (1, 0, 0) misses 2 x₂ (2 on both rows). Non-sensitivity of (0.5, 0, 0) at x = (1, 1, 1):
    entry 1 is a non-feature without effect (agree), entry 2 a non-feature with effect (count 1),
    entry 0 a feature with effect (agree): 1; the map (1, 1, 1) counts entry 1 only: 1."""
    model, x, target = linear_model(), torch.tensor([[1.0, 1.0, 1.0], [2.0, -1.0, 0.5]]).double(), 0
    maps = x * model.weight[0].detach()
    torch.testing.assert_close(ax.completeness_gap(model, x, maps, target, baseline=0.0), torch.zeros(2).double())
    assert ax.completeness(model, x, maps, target, baseline=0.0, atol=1e-12).tolist() == [1, 1]
    torch.testing.assert_close(ax.completeness_gap(model, x, torch.tensor([[1.0, 0, 0]] * 2).double(), target,
                                                   baseline=0.0), torch.tensor([2.0, 2.0]).double())  # fmt: skip
    row = x[:1]
    for map_, expected in (([0.5, 0.0, 0.0], 1.0), ([1.0, 1.0, 1.0], 1.0), ([1.0, 0.0, 3.0], 0.0)):
        got = ax.non_sensitivity(model, row, torch.tensor([map_]).double(), target, baseline=0.0, output="logit")
        assert got.tolist() == [expected], map_


def test_the_shifted_first_layer_keeps_the_outputs_and_is_restored():
    """b − c W 1 makes model(x + c) = model(x), for a linear layer and an unpadded convolution."""
    for model, x in ((linear_model(), torch.randn(4, 3).double()), (cnn().double(), torch.randn(2, C, H, W).double())):
        bias = ax.first_layer(model).bias.detach().clone()
        with ax.shifted_first_layer(model, -1.0), torch.no_grad():
            shifted = model(x - 1.0)
        torch.testing.assert_close(shifted, model(x).detach())
        assert torch.equal(ax.first_layer(model).bias, bias)


def test_the_metrics_by_name_and_their_directions():
    names = ("completeness", "completeness_gap", "non_sensitivity", "input_invariance")
    assert [METRICS[n].higher_is_better for n in names] == [True, False, False, True]
    model, x, y = case()
    ours, _ = explainer(model, times_input=False)
    metric = METRICS["input_invariance"].obj()
    metric.update(model, x, ours(x, y), y, explain_fn=ours)  # torchmetrics runs update without gradients
    assert metric.compute().item() == 1.0


def test_bad_input_is_refused_naming_what():
    model, x, y = case()
    maps = torch.rand(N, H, W)
    with pytest.raises(InputError, match=r"maps of shape \(6, 5, 6\); expected \(6, 6, 6\)"):
        ax.completeness(model, x, maps[:, 1:], y)
    with pytest.raises(InputError, match=r"maps: map 2 has 1 NaN value"):
        ax.non_sensitivity(model, x, maps.index_put((torch.tensor([2]), torch.tensor([0]), torch.tensor([0])),
                                                    torch.tensor(float("nan"))), y)  # fmt: skip
    with pytest.raises(InputError, match=r"option baseline='grey'; expected one of \['black', 'white', 'mean'\]"):
        ax.completeness(model, x, maps, y, baseline="grey")
    with pytest.raises(InputError, match="needs explain_fn="):
        ax.input_invariance(model, x, maps, None, y)
    with pytest.raises(InputError, match="first layer is Linear.*with a bias"):
        ax.input_invariance(nn.Sequential(nn.Flatten(), nn.Linear(C * H * W, 4, bias=False)), x, maps,
                            lambda v, t: maps, y)  # fmt: skip
    with pytest.raises(InputError, match=r"maps of the shifted inputs have shape \(6, 36\)"):
        ax.input_invariance(model, x, maps, lambda v, t: maps.flatten(1), y)
