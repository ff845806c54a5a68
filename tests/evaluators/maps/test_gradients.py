"""The gradient explainers (evaluators/maps/gradients.py) where Captum alone is no reference:
GradCAM's layer, the last convolutional block of the project's networks; DeepLift's
summation-to-delta on the project's ResNets in float64 (and under deterministic algorithms);
guided backprop against a hand-written guided ReLU. Every method against Captum:
test_image_explainers.py and test_explainers.py."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from evaluators.maps import explain
from evaluators.maps.gradients import last_conv_block
from lightning_modules.image_classifier import create_image_model

# ResNet-50 (about a minute each on 2 cores) runs with `make test-all`
RESNETS = [("resnet8", False), ("resnet18", True), ("resnet18", False),
           pytest.param("resnet50", True, marks=pytest.mark.slow)]


@pytest.mark.parametrize(("arch", "layer"), [("small_cnn", "3"), ("resnet8", "layers")])
def test_gradcam_layer_is_the_last_conv_block_of_project_networks(arch, layer):
    torch.manual_seed(0)
    net = create_image_model(arch, num_classes=3, in_channels=1).eval()
    assert last_conv_block(net) is net.get_submodule(layer)
    x = torch.randn(2, 1, 16, 16)
    out = explain(net, x, "gradcam")
    assert out.shape == x.shape and (out >= 0).all()


def test_deeplift_through_max_pooling_runs_under_deterministic_algorithms():
    """A Trainer with deterministic=True leaves torch.use_deterministic_algorithms(True) on;
    DeepLift's max_unpool2d (no deterministic kernel) then warns instead of failing, and the
    setting is restored after the call."""
    model = create_image_model("small_cnn", num_classes=3, in_channels=1).eval()
    x = torch.randn(2, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    torch.use_deterministic_algorithms(True)
    try:
        explain(model, x, "deeplift")
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


class _GuidedReLU(torch.autograd.Function):
    """ReLU whose backward passes only positive gradients where the input was positive
    (Springenberg et al.'s guided backpropagation), written without Captum's hooks."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad.clamp(min=0) * (x > 0)


class _GuidedReLUModule(nn.Module):
    def forward(self, x):
        return _GuidedReLU.apply(x)


def _float64_resnet(arch, small_input_stem):
    torch.manual_seed(0)
    net = create_image_model(arch, num_classes=4, in_channels=3, small_input_stem=small_input_stem)
    for m in net.modules():  # eval-mode BatchNorm with statistics other than the identity
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2), m.running_var.uniform_(0.5, 1.5), m.weight.data.uniform_(0.5, 1.5)
    return net.double().eval()


@pytest.mark.parametrize("arch,small_input_stem", RESNETS)
def test_deeplift_on_project_resnets_sums_to_the_logit_difference(arch, small_input_stem):
    """DeepLift's rescale rule keeps summation-to-delta: the attributions of each image add
    up to f_t(x) - f_t(0). Input x gradient (what a network whose ReLUs Captum cannot hook
    would get) does not."""
    net = _float64_resnet(arch, small_input_stem)
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    target = torch.tensor([0, 2, 3])
    maps = explain(net, x, "deeplift", target=target)
    with torch.no_grad():
        delta = (net(x) - net(torch.zeros_like(x))).gather(1, target[:, None])[:, 0]
    torch.testing.assert_close(maps.sum(dim=(1, 2, 3)), delta, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("arch,small_input_stem", RESNETS)
def test_guided_backprop_on_project_resnets_equals_a_guided_relu_reference(arch, small_input_stem):
    net = _float64_resnet(arch, small_input_stem)
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    target = torch.tensor([1, 0, 3])
    reference_net = copy.deepcopy(net)
    for name, module in list(reference_net.named_modules()):
        if isinstance(module, nn.ReLU):
            parent, _, child = name.rpartition(".")
            setattr(reference_net.get_submodule(parent), child, _GuidedReLUModule())
    xr = x.clone().requires_grad_(True)
    reference_net(xr).gather(1, target[:, None]).sum().backward()
    guided = explain(net, x, "guided_backprop", target=target)
    torch.testing.assert_close(guided, xr.grad, rtol=1e-9, atol=1e-12)
    assert not torch.allclose(guided, explain(net, x, "saliency", target=target))
