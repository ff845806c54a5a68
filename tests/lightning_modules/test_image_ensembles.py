"""Image ensembles: against their members run one by one, sigma = 0 equal to their base, BatchNorm
recomputed per t on curves, and explanations that are the mean of the members'."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from evaluators.maps import explain
from foundation.errors import InputError
from lightning_modules.curve_model import CurveModel
from lightning_modules.ensembles import build_ensemble
from lightning_modules.image_ensembles import ImageEnsemble, ImageNetworks, weight_layers
from lightning_modules.interface import class_probabilities


def tiny_cnn(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(4 * 4 * 4, 3)).double()  # fmt: skip
    with torch.no_grad():  # BatchNorm statistics and affine parameters away from their defaults
        net[1].running_mean.normal_()
        net[1].running_var.uniform_(0.5, 2.0)
        net[1].weight.uniform_(0.5, 1.5)
        net[1].bias.normal_()
    return net.eval()


@pytest.fixture(scope="module")
def members():
    return [tiny_cnn(s) for s in range(4)]


@pytest.fixture(scope="module")
def images():
    return torch.randn(6, 1, 8, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def of(members, strategy: str, indices: list[int], *curves, **options) -> ImageEnsemble:
    """The registry's ensemble of ``members`` (plain networks)."""
    return build_ensemble(ImageNetworks(members), strategy, indices, *curves, **options)


def loader(batches: int = 3):
    g = torch.Generator().manual_seed(2)
    return [(torch.randn(5, 1, 8, 8, generator=g, dtype=torch.float64), torch.zeros(5, dtype=torch.long))
            for _ in range(batches)]  # fmt: skip


def test_average_of_one_member_is_that_member(members, images):
    ensemble = of(members, "average", [0])
    torch.testing.assert_close(ensemble(images), members[0](images), rtol=0, atol=0)
    torch.testing.assert_close(class_probabilities(ensemble, images), members[0](images).softmax(-1))


def test_average_predicts_mean_probability_and_forwards_mean_logit(members, images):
    ensemble = of(members, "average", [0, 1, 2, 3])
    logits = torch.stack([m(images) for m in members])
    torch.testing.assert_close(ensemble(images), logits.mean(0))
    torch.testing.assert_close(class_probabilities(ensemble, images), logits.softmax(-1).mean(0))
    assert torch.equal(ensemble.predict(images), logits.softmax(-1).mean(0).argmax(-1))


def test_majority_gives_vote_shares(members, images):
    ensemble = of(members, "majority", [0, 1, 2])
    votes = torch.zeros(len(images), 3, dtype=torch.float64)
    for m in members[:3]:
        for n, c in enumerate(m(images).argmax(-1).tolist()):
            votes[n, c] += 1 / 3
    torch.testing.assert_close(class_probabilities(ensemble, images), votes)


def test_ensemble_saliency_is_the_mean_of_member_saliencies(members, images):
    target = torch.tensor([0, 1, 2, 0, 1, 2])
    for strategy in ("average", "majority"):
        ensemble = of(members, strategy, [0, 1, 2, 3])
        maps = explain(ensemble, images, "saliency", target=target)
        mean = torch.stack([explain(m, images, "saliency", target=target) for m in members]).mean(0)
        torch.testing.assert_close(maps, mean)
    ig = explain(of(members, "average", [0, 1]), images, "integrated_gradients", target=target, n_steps=8)
    ig_mean = torch.stack([explain(m, images, "integrated_gradients", target=target, n_steps=8)
                           for m in members[:2]]).mean(0)  # fmt: skip
    torch.testing.assert_close(ig, ig_mean)


def test_perturb_with_sigma_zero_equals_average(members, images):
    perturbed = of(members, "perturb", [0, 1], n_perturb=3, sigma=0.0)
    assert perturbed.size == 6
    base = of(members, "average", [0, 1])
    torch.testing.assert_close(perturbed(images), base(images))
    torch.testing.assert_close(class_probabilities(perturbed, images), class_probabilities(base, images))


@pytest.mark.parametrize(("layer", "part"), [(0, "weight"), (0, "bias"), (1, "weight")])
def test_perturb_adds_noise_to_the_chosen_tensor_only(members, layer, part):
    ensemble = of(members, "perturb", [0, 1], n_perturb=50, sigma=0.3, layer=layer, part=part, seed=3)
    for v, variant in enumerate(ensemble.nets):
        base = members[v // 50]
        for (name, p), q in zip(variant.named_parameters(), base.parameters()):
            chosen = weight_layers(base)[layer]
            if q is getattr(chosen, part):
                continue
            assert torch.equal(p, q), name
    noise = torch.stack([getattr(weight_layers(n)[layer], part) - getattr(weight_layers(members[i // 50])[layer], part)
                         for i, n in enumerate(ensemble.nets)])  # fmt: skip
    assert noise.std().item() == pytest.approx(0.3, rel=0.1)
    assert not torch.equal(noise[0], noise[1])


def test_perturb_refuses_a_layer_it_does_not_have(members):
    with pytest.raises(InputError, match="option layer=5; expected 0 <= layer < 2"):
        of(members, "perturb", [0, 1, 2, 3], layer=5)


def curves_between(members) -> list[CurveModel]:
    curves = [CurveModel(members[a], members[b]).double() for a, b in ((0, 1), (2, 3))]
    with torch.no_grad():  # a bend off the straight line
        for curve in curves:
            for name, p in curve.net.named_parameters():
                if name.endswith("_1"):
                    p.add_(0.1 * torch.randn_like(p))
    return curves


def recomputed_bn(net: nn.Module, batches) -> nn.Module:
    """BatchNorm statistics of ``net`` recomputed by a plain cumulative pass (the reference)."""
    bn = net[1]
    bn.reset_running_stats()
    bn.momentum = None
    net.train()
    with torch.no_grad():
        for x, _ in batches:
            net(x)
    return net.eval()


def test_connect_samples_curves_with_batchnorm_recomputed_at_each_t(members, images):
    curves = curves_between(members)
    batches = loader()
    ensemble = of(members, "connect", [0, 1, 2, 3], curves, n_t=3, loader=batches)
    assert ensemble.size == 6
    for c, curve in enumerate(curves):
        for k, t in enumerate((0.0, 0.5, 1.0)):
            reference = recomputed_bn(curve.model_at(t, members[2 * c]), batches)
            got = ensemble.nets[3 * c + k]
            for name in ("running_mean", "running_var"):
                torch.testing.assert_close(getattr(got[1], name), getattr(reference[1], name))
            torch.testing.assert_close(got(images), reference(images))
    # the end points carry the members' weights (their statistics recomputed)
    for a, b in zip(ensemble.nets[2].parameters(), members[1].parameters()):
        torch.testing.assert_close(a, b)
    with pytest.raises(InputError, match="BatchNorm"):
        of(members, "connect", [0, 1, 2, 3], curves, n_t=2)


def test_combine_with_sigma_zero_equals_connect(members, images):
    curves, batches = curves_between(members), loader()
    connected = of(members, "connect", [0, 1, 2, 3], curves, n_t=2, t_seed=4, loader=batches)
    combined = of(members, "combine", [0, 1, 2, 3], curves, n_t=2, n_perturb=3, sigma=0.0, t_seed=4, loader=batches)
    assert combined.size == 12
    torch.testing.assert_close(combined(images), connected(images))


def test_every_registry_explainer_explains_an_ensemble(members, images):
    from evaluators.maps import EXPLAINERS

    ensemble = of(members, "average", [0, 1])
    options = {"gradient_shap": {"baselines": images, "n_samples": 4}, "integrated_gradients": {"n_steps": 4},
               "smoothgrad": {"nt_samples": 3}, "smoothgrad_sq": {"nt_samples": 3}, "vargrad": {"nt_samples": 3},
               "occlusion": {"sliding_window_shapes": (1, 4, 4)}, "rise": {"n_masks": 20, "seed": 0},
               "gradcam": {"layer": members[1][0]}}  # fmt: skip
    for method in EXPLAINERS.names(modality="images"):
        maps = explain(ensemble, images, method, **options.get(method, {}))
        assert maps.shape == images.shape and torch.isfinite(maps).all(), method


def test_an_empty_or_unknown_ensemble_is_refused(members):
    with pytest.raises(InputError, match="at least one network"):
        ImageEnsemble([])
    with pytest.raises(InputError, match="option reduction='median'"):
        ImageEnsemble(members, "median")
