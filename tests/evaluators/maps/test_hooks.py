"""DeepLift, DeepLiftShap and GuidedBackprop (Captum's module-hook methods) on networks with
functional relus, a ReLU module called several times and in-place ReLUs: the registry's maps
equal Captum's on a hand-built network with one ``nn.ReLU`` module per call, DeepLift sums to
f(x) − f(0), the user's model is left as it was, and a network torch.fx cannot trace is one
InputError saying how to fix it."""

from __future__ import annotations

import copy

import pytest
import torch
from captum import attr
from torch import nn
from torch.nn import functional as F

from evaluators.maps import explain
from evaluators.maps.hooks import hookable
from foundation.errors import InputError

TOL = {"rtol": 1e-5, "atol": 1e-6}


class Functional(nn.Module):
    """Three functional relus (``F.relu``, ``torch.relu``, ``Tensor.relu_``) and one in-place
    ``nn.ReLU`` module called twice."""

    def __init__(self, channels: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.relu, self.fc = nn.Conv2d(channels, 6, 3), nn.ReLU(inplace=True), nn.Linear(6, 4)

    def forward(self, x):
        h = self.relu(F.relu(self.conv(x)) - 0.05)
        h = torch.relu(h - 0.1).relu_()
        return self.fc(self.relu(h - 0.02).mean((2, 3)))


class ByHand(nn.Module):
    """``Functional`` written with one ``nn.ReLU`` module per call (the hand-built reference)."""

    def __init__(self, model: Functional) -> None:
        super().__init__()
        self.conv, self.fc = copy.deepcopy(model.conv), copy.deepcopy(model.fc)
        self.r = nn.ModuleList([nn.ReLU() for _ in range(5)])

    def forward(self, x):
        h = self.r[1](self.r[0](self.conv(x)) - 0.05)
        h = self.r[3](self.r[2](h - 0.1))
        return self.fc(self.r[4](h - 0.02).mean((2, 3)))


class Branching(Functional):
    """``Functional`` with a branch on the data, which torch.fx cannot trace."""

    def forward(self, x):
        return super().forward(x) if x.sum() > 0 else super().forward(-x)


class Rows(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.a, self.b = nn.Linear(5, 7), nn.Linear(7, 3)

    def forward(self, x):
        return self.b(F.relu(self.a(x)))


def images(n: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, 3, 9, 9, generator=torch.Generator().manual_seed(seed))


def test_hook_methods_on_functional_and_shared_relus_equal_captum_on_a_network_built_by_hand():
    model = Functional().eval()
    reference = ByHand(model).eval()
    x, target = images(), torch.tensor([0, 3, 1])
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for method, cls in (("deeplift", attr.DeepLift), ("guided_backprop", attr.GuidedBackprop)):
        torch.testing.assert_close(explain(model, x, method, target=target),
                                   cls(reference).attribute(x, target=target), **TOL)  # fmt: skip
    deeplift = explain(model, x, "deeplift", target=target)
    with torch.no_grad():  # DeepLift's summation to delta: Σ maps = f(x)_t − f(0)_t
        delta = (model(x) - model(torch.zeros_like(x))).gather(1, target[:, None])[:, 0]
    torch.testing.assert_close(deeplift.flatten(1).sum(1), delta, rtol=1e-4, atol=1e-5)
    smoothed = explain(model, x, "smoothgrad", base="guided_backprop", target=target, nt_samples=2, stdevs=0.0)
    torch.testing.assert_close(smoothed, attr.GuidedBackprop(reference).attribute(x, target=target), **TOL)
    # the user's model is left as it was: its class, parameters, modules and no hooks
    assert type(model) is Functional and [n for n, _ in model.named_modules()] == ["", "conv", "relu", "fc"]
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert not any(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks for m in model.modules())


def test_deepshap_of_rows_through_a_functional_relu_equals_captum_on_modules():
    model = Rows().eval()
    reference = nn.Sequential(model.a, nn.ReLU(), model.b).eval()
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(2))
    background = torch.randn(3, 5, generator=torch.Generator().manual_seed(3))
    target = torch.tensor([2, 0, 1, 2])
    torch.testing.assert_close(explain(model, x, "deepshap", target=target, baselines=background),
                               attr.DeepLiftShap(reference).attribute(x, baselines=background, target=target), **TOL)


def test_a_network_torch_fx_cannot_trace_is_one_error_saying_how_to_fix_it():
    for method, options in (("deeplift", {}), ("guided_backprop", {}),
                            ("vargrad", {"base": "deeplift", "nt_samples": 2})):
        with pytest.raises(InputError, match=r"calls a functional relu .* 3 time\(s\) per forward pass .* torch\.fx "
                                             r"cannot trace it .*: make each such ReLU an nn\.ReLU module"):
            explain(Branching().eval(), images(2), method, **options)


def test_a_network_with_one_relu_module_per_call_is_explained_as_it_is():
    model = ByHand(Functional()).eval()
    assert hookable(model, images(1), "explainer 'deeplift'") is model
