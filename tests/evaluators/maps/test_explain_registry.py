"""The one explainer registry and the model contract on models the framework did not build:
``explain(nn.Sequential(...), rows, m)`` for every method that takes rows and
``explain(torchvision.models.resnet18(num_classes=10), images, m)`` for every image method,
against Captum called directly and float64 hand computations."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import timm
import torch
import torchvision
from captum import attr
from torch import nn
from zennit.attribution import Gradient
from zennit.composites import COMPOSITES, LayerMapComposite, layer_map_base
from zennit.rules import AlphaBeta

from evaluators.maps import EXPLAINERS, explain, explainer_names
from foundation.errors import InputError
from foundation.seeds import input_seeds
from lightning_modules.ensembles import ENSEMBLES
from lightning_modules.image_classifier import SeparateReluBasicBlock
from lightning_modules.interface import class_probabilities, default_targets
from lightning_modules.mlp import MLPClassifier
from lightning_modules.population import PopulationMLP

D, N = 4, 5
ROW_METHODS = sorted(EXPLAINERS.names(modality="rows"))
IMAGE_METHODS = sorted(EXPLAINERS.names(modality="images"))
SMALL = {"smoothgrad": {"nt_samples": 3}, "smoothgrad_sq": {"nt_samples": 3}, "vargrad": {"nt_samples": 3},
         "integrated_gradients": {"n_steps": 6}, "lime": {"n_samples": 15}, "kernel_shap": {"n_samples": 15},
         "shapley_value_sampling": {"n_samples": 2}, "gradient_shap": {"n_samples": 3}, "rise": {"n_masks": 6}}
TOL = {"rtol": 1e-5, "atol": 1e-6}


def sequential(k: int) -> nn.Sequential:
    torch.manual_seed(k)
    return nn.Sequential(nn.Linear(D, 8), nn.ReLU(), nn.Linear(8, k)).eval()


def rows() -> torch.Tensor:
    return torch.randn(N, D, generator=torch.Generator().manual_seed(3))


def background() -> torch.Tensor:
    return torch.randn(3, D, generator=torch.Generator().manual_seed(4))


def options(method: str, bg: torch.Tensor) -> dict:
    extra = {"baselines": bg} if method in ("deepshap", "gradient_shap") else {}
    extra |= {"epsilon": 1e-9} if method == "lrp_epsilon" else {}  # Captum's EpsilonRule's
    return {**SMALL.get(method, {}), **extra}


def zennit_rows(model, x, method, target):
    rule = {"lrp_alpha_beta": AlphaBeta(alpha=2.0, beta=1.0)}.get(method)
    composite = (LayerMapComposite(layer_map_base() + [(nn.Linear, rule)]) if rule is not None else
                 COMPOSITES[method[len("lrp_"):]]())  # fmt: skip
    with Gradient(model, composite) as attributor:
        return attributor(x.clone(), lambda out: out * nn.functional.one_hot(target, out.shape[1]).to(out))[1]


def captum_rows(model, x, method, target, bg):
    """Captum called directly with the registry's defaults; each sampling method on one
    input at a time after seeding the global generators with that input's seed."""
    o = SMALL.get(method, {})
    direct = {
        "saliency": lambda xs, ts: attr.Saliency(model).attribute(xs, target=ts, abs=False),
        "input_x_gradient": lambda xs, ts: attr.InputXGradient(model).attribute(xs, target=ts),
        "guided_backprop": lambda xs, ts: attr.GuidedBackprop(model).attribute(xs, target=ts),
        "deeplift": lambda xs, ts: attr.DeepLift(model).attribute(xs, target=ts),
        "integrated_gradients": lambda xs, ts: attr.IntegratedGradients(model).attribute(xs, target=ts, **o),
        "feature_ablation": lambda xs, ts: attr.FeatureAblation(model).attribute(xs, target=ts),
        "deepshap": lambda xs, ts: attr.DeepLiftShap(model).attribute(xs, baselines=bg, target=ts),
        "lrp_epsilon": lambda xs, ts: attr.LRP(model).attribute(xs, target=ts),  # the ε-rule on every nn.Linear
    }
    if method in direct:
        return direct[method](x, target)
    if method.startswith("lrp_"):  # the rules and composites Captum lacks: Zennit's own attribution
        return zennit_rows(model, x, method, target)
    sampled = {
        "lime": lambda xs, ts: attr.Lime(model).attribute(xs, target=ts, **o),
        "kernel_shap": lambda xs, ts: attr.KernelShap(model).attribute(xs, target=ts, **o),
        "shapley_value_sampling": lambda xs, ts: attr.ShapleyValueSampling(model).attribute(xs, target=ts, **o),
        "gradient_shap": lambda xs, ts: attr.GradientShap(model).attribute(xs, baselines=bg, target=ts, stdevs=0.0,
                                                                           **o),
    }
    for nt_type in ("smoothgrad", "smoothgrad_sq", "vargrad"):
        sampled[nt_type] = lambda xs, ts, nt_type=nt_type: attr.NoiseTunnel(attr.Saliency(model)).attribute(
            xs, target=ts, nt_type=nt_type, stdevs=0.15, abs=False, **o)
    maps = []
    for i, seed in enumerate(input_seeds(0, None, len(x))):
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        maps.append(sampled[method](x[i : i + 1], target[i : i + 1]))
    return torch.cat(maps)


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("method", ROW_METHODS)
def test_a_plain_sequential_on_rows_takes_every_row_method_as_captum_does(method, k):
    model, x, bg = sequential(k), rows(), background()
    predicted = model(x).argmax(-1)
    labels = torch.arange(N) % k
    for target, expected in ((None, predicted), (k - 1, torch.full((N,), k - 1)), (labels, labels)):
        ours = explain(model, x, method, target=target, **options(method, bg))
        torch.testing.assert_close(ours, captum_rows(model, x, method, expected, bg), **TOL)


def test_row_maps_equal_a_float64_hand_computation():
    model, x = sequential(3).double(), rows().double()
    w1, b1, w2 = model[0].weight, model[0].bias, model[2].weight
    active = (x @ w1.T + b1 > 0).double()  # (N, 8)
    target = torch.tensor([0, 1, 2, 1, 0])
    gradient = (w2[target][:, None, :] * active[:, None, :] @ w1)[:, 0]  # d logit_t / dx, (N, D)
    torch.testing.assert_close(explain(model, x, "saliency", target=target), gradient, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(explain(model, x, "input_x_gradient", target=target), x * gradient, rtol=1e-12,
                               atol=1e-12)  # fmt: skip
    linear = nn.Linear(D, 3).double().eval()  # Integrated Gradients of a linear logit from 0: x · w_t
    torch.testing.assert_close(explain(linear, x, "integrated_gradients", target=target, n_steps=7),
                               x * linear.weight[target], rtol=1e-12, atol=1e-12)  # fmt: skip


def test_explainer_names_follow_the_inputs_each_method_takes():
    seq, resnet = sequential(2), torchvision.models.resnet18(num_classes=10)
    assert explainer_names(seq) == ROW_METHODS and explainer_names(seq, rows()) == ROW_METHODS
    assert not {"gradcam", "rise", "occlusion"} & set(explainer_names(seq))
    assert explainer_names(resnet) == IMAGE_METHODS == explainer_names(resnet, torch.zeros(1, 3, 8, 8))
    assert "lime" not in IMAGE_METHODS and "deepshap" not in IMAGE_METHODS


def test_unknown_methods_and_wrong_inputs_are_named():
    with pytest.raises(InputError, match="unknown explainer 'shap'"):
        explain(sequential(2), rows(), "shap")
    with pytest.raises(InputError, match=r"explainer 'gradcam' takes images \(N, C, H, W\)"):
        explain(sequential(2), rows(), "gradcam")
    with pytest.raises(InputError, match=r"explainer 'lime' takes rows \(N, d\)"):
        explain(torchvision.models.resnet18(num_classes=10), torch.zeros(1, 3, 8, 8), "lime")


@pytest.fixture(scope="module")
def resnet():
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10).eval()


def separate_relus(model: nn.Module) -> nn.Module:
    """A copy of a torchvision ResNet whose blocks' second ReLU is a module of its own."""
    model = copy.deepcopy(model)
    for block in model.modules():
        if isinstance(block, torchvision.models.resnet.BasicBlock):
            block.__class__ = SeparateReluBasicBlock
            block.relu_out = nn.ReLU(inplace=False)
    for module in model.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = False
    return model


@pytest.fixture(scope="module")
def timm_resnet():
    torch.manual_seed(1)
    return timm.create_model("resnet18", num_classes=10, pretrained=False).eval()


@pytest.mark.parametrize("network", ["resnet", "timm_resnet"])
def test_a_torchvision_or_timm_resnet_takes_every_image_method(network, request):
    model = request.getfixturevalue(network)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    for method in IMAGE_METHODS:
        extra = {"baselines": torch.randn(2, 3, 32, 32)} if method == "gradient_shap" else {}
        maps = explain(model, x, method, **SMALL.get(method, {}), **extra)
        assert maps.shape == x.shape and bool(maps.isfinite().all()), method


def test_deeplift_of_a_timm_resnet_with_in_place_relus_is_captums_on_a_copy_without(timm_resnet):
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(7))
    target = torch.tensor([1, 8])
    reference = copy.deepcopy(timm_resnet)
    relus = [m for m in reference.modules() if isinstance(m, nn.ReLU)]
    assert relus and all(m.inplace for m in relus)
    for m in relus:
        m.inplace = False
    ours = explain(timm_resnet, x, "deeplift", target=target)
    torch.testing.assert_close(ours, attr.DeepLift(reference).attribute(x, target=target), **TOL)
    with torch.no_grad():  # Σ maps = f(x)_t − f(0)_t
        delta = (timm_resnet(x) - timm_resnet(torch.zeros_like(x))).gather(1, target[:, None])[:, 0]
    torch.testing.assert_close(ours.flatten(1).sum(1), delta, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(explain(timm_resnet, x, "guided_backprop", target=target),
                               attr.GuidedBackprop(reference).attribute(x, target=target), **TOL)  # fmt: skip


def test_deeplift_of_a_torchvision_resnet_is_captums_on_a_copy_with_a_relu_per_call(resnet):
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(6))
    target = torch.tensor([3, 7])
    ours = explain(resnet, x, "deeplift", target=target)
    reference = separate_relus(resnet).eval()
    torch.testing.assert_close(ours, attr.DeepLift(reference).attribute(x, target=target), **TOL)
    with torch.no_grad():  # DeepLift's summation to delta: Σ maps = f(x)_t − f(0)_t
        delta = (resnet(x) - resnet(torch.zeros_like(x))).gather(1, target[:, None])[:, 0]
    torch.testing.assert_close(ours.flatten(1).sum(1), delta, rtol=1e-3, atol=1e-3)
    smoothed = explain(resnet, x, "smoothgrad", base="deeplift", target=target, nt_samples=2)
    assert smoothed.shape == x.shape and bool(smoothed.isfinite().all())


def test_ensembles_forward_their_members_mean_logit_and_predict_from_probabilities():
    population = PopulationMLP(D, size=3, hidden=(6,))
    x = rows()
    for name in ("average", "majority"):
        ensemble = ENSEMBLES[name](population, [0, 1, 2])
        logits = population(x).double()
        torch.testing.assert_close(ensemble(x).double(), logits.mean(0), rtol=1e-6, atol=1e-6)
        expected = logits.softmax(-1).mean(0) if name == "average" else \
            nn.functional.one_hot(logits.argmax(-1), 2).double().mean(0)  # fmt: skip
        torch.testing.assert_close(class_probabilities(ensemble, x).double(), expected, rtol=1e-6, atol=1e-6)


def test_a_tabular_model_explains_its_positive_class_by_default_and_a_class_given():
    model, x = MLPClassifier(D, hidden=(6,), seed=1), rows()
    assert torch.equal(default_targets(model, x), torch.ones(N, dtype=torch.long))
    plain = explain(model, x, "saliency")
    assert torch.equal(explain(model, x, "saliency", target=torch.ones(N, dtype=torch.long)), plain)
    xs = x.clone().requires_grad_()
    (gradient,) = torch.autograd.grad(model(xs)[:, 1].sum(), xs)
    torch.testing.assert_close(plain, gradient)
    (gradient,) = torch.autograd.grad(model(xs)[:, 0].sum(), xs)  # issue 30: any class as a target
    torch.testing.assert_close(explain(model, x, "saliency", target=0), gradient)
