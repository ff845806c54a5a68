"""LRP through Zennit (``evaluators.maps.relevance``): the ε- and αβ-rules by hand in float64,
the composites equal to Zennit's own attribution, relevance conserved through this project's
CIFAR ResNet only with its canonizer, a population member by member, and bad options."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from zennit.attribution import Gradient
from zennit.composites import EpsilonAlpha2Beta1, EpsilonAlpha2Beta1Flat, EpsilonPlus, EpsilonPlusFlat
from zennit.torchvision import ResNetCanonizer

from evaluators.maps import EXPLAINERS, explain
from foundation.errors import InputError
from lightning_modules.image_classifier import create_image_model
from lightning_modules.population import PopulationMLP


def two_layers(bias=True):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 4, bias=bias), nn.ReLU(), nn.Linear(4, 3, bias=bias)).double()


def epsilon_by_hand(model, x, t, eps):
    """R_out = f_t(x) e_t; per linear layer R_i = a_i Σ_j w_ji R_j / (z_j + ε sign(z_j)), sign(0) = 1."""
    a0 = x
    z1 = a0 @ model[0].weight.T + model[0].bias
    a1 = z1.clamp_min(0)
    z2 = a1 @ model[2].weight.T + model[2].bias
    r2 = torch.zeros_like(z2)
    r2[torch.arange(len(x)), t] = z2[torch.arange(len(x)), t]

    def back(a, w, z, r):
        sign = torch.where(z >= 0, 1.0, -1.0).to(z)
        return a * ((r / (z + eps * sign)) @ w)

    r1 = back(a1, model[2].weight, z2, r2)
    return back(a0, model[0].weight, z1, r1)  # the ReLU passes relevance unchanged


def test_epsilon_rule_by_hand():
    model, x, t = two_layers(), torch.randn(6, 5, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1, 2])
    for eps in (1e-6, 0.25):
        got = explain(model, x, "lrp_epsilon", target=t, epsilon=eps)
        torch.testing.assert_close(got, epsilon_by_hand(model, x, t, eps).detach(), rtol=0, atol=1e-10)


def test_alpha_beta_rule_by_hand_and_conservation():
    """Without biases: R_i = Σ_j (α z_ij⁺ / Σ_k z_kj⁺ − β z_ij⁻ / Σ_k z_kj⁻) R_j, z_ij = a_i w_ji;
    the ε-rule then conserves relevance, Σ_i R_i = f_t(x) (the αβ-rule only where every unit has
    contributions of both signs: α alone where none is negative)."""
    model = two_layers(bias=False)
    x, t = torch.randn(6, 5, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1, 2])
    alpha, beta = 2.0, 1.0

    def back(a, w, r):
        z = a[:, None, :] * w[None]  # (N, J, I): z_ij
        pos, neg = z.clamp_min(0), z.clamp_max(0)
        share = alpha * pos / (pos.sum(2, keepdim=True) + 1e-6) - beta * neg / (neg.sum(2, keepdim=True) - 1e-6)
        return (share * r[:, :, None]).sum(1)

    a1 = (x @ model[0].weight.T).clamp_min(0)
    z2 = a1 @ model[2].weight.T
    r2 = torch.zeros_like(z2)
    r2[torch.arange(6), t] = z2[torch.arange(6), t]
    expected = back(x, model[0].weight, back(a1, model[2].weight, r2)).detach()
    got = explain(model, x, "lrp_alpha_beta", target=t)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    for name in ("lrp_epsilon", "lrp_epsilon_plus"):
        maps = explain(model, x, name, target=t)
        torch.testing.assert_close(maps.sum(1), z2[torch.arange(6), t].detach(), rtol=0, atol=1e-4)


COMPOSITES = {"lrp_epsilon_plus": EpsilonPlus, "lrp_epsilon_plus_flat": EpsilonPlusFlat,
              "lrp_epsilon_alpha2_beta1": EpsilonAlpha2Beta1, "lrp_epsilon_alpha2_beta1_flat": EpsilonAlpha2Beta1Flat}


def test_composites_equal_zennits_own_on_a_torchvision_resnet():
    torch.manual_seed(1)
    net = create_image_model("resnet18", 10, small_input_stem=True).eval()
    for m in net.modules():  # BatchNorm statistics away from their initial values: merging them matters
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.2)
            m.running_var.uniform_(0.5, 2.0)
    x, t = torch.randn(2, 3, 8, 8), torch.tensor([1, 7])
    for name, composite in COMPOSITES.items():
        ours = explain(net, x, name, target=t)
        with Gradient(net, composite(canonizers=[ResNetCanonizer()])) as attributor:
            _, theirs = attributor(x.clone(), lambda out: out * nn.functional.one_hot(t, 10).to(out))
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0, msg=name)
        assert ours.abs().sum() > 0


def test_relevance_is_conserved_through_the_cifar_resnet_with_its_canonizer():
    """Zero biases and BatchNorm at its initial statistics: Σ R = f_t(x) with the canonizer (the
    residual sum splits relevance); without it the residual ``+`` passes it to both branches."""
    torch.manual_seed(0)
    net = create_image_model("resnet8", 10).eval()
    nn.init.zeros_(net.fc.bias)
    x, t = torch.randn(3, 3, 16, 16), torch.tensor([1, 2, 3])
    score = net(x).gather(1, t[:, None])[:, 0].detach()
    state = {k: v.clone() for k, v in net.state_dict().items()}
    canonized = explain(net, x, "lrp_epsilon", target=t)
    torch.testing.assert_close(canonized.flatten(1).sum(1), score, rtol=1e-3, atol=1e-4)
    plain = explain(net, x, "lrp_epsilon", target=t, canonizer="none")
    assert (plain.flatten(1).sum(1) - score).abs().max() > 0.1
    assert all(torch.equal(state[k], v) for k, v in net.state_dict().items())  # parameters restored


def test_a_population_member_by_member_and_an_input_alone():
    population = PopulationMLP(in_features=4, hidden=(6,), seeds=[5, 6, 7]).eval()
    x = torch.randn(5, 4)
    maps = explain(population, x, "lrp_epsilon", target=torch.ones(5, dtype=torch.long))
    assert maps.shape == (3, 5, 4)
    for m in range(3):
        member = explain(population.member(m).eval(), x, "lrp_epsilon", target=torch.ones(5, dtype=torch.long))
        torch.testing.assert_close(maps[m], member, rtol=0, atol=1e-6)
    alone = explain(population, x[2:3], "lrp_epsilon", target=torch.ones(1, dtype=torch.long))
    torch.testing.assert_close(alone[:, 0], maps[:, 2], rtol=0, atol=1e-6)


def test_registered_for_rows_and_images_and_bad_options():
    lrp = [n for n in EXPLAINERS.names() if n.startswith("lrp_")]
    assert len(lrp) == 6 and all(set(EXPLAINERS[n].modalities) >= {"rows", "images"} for n in lrp)
    model, x = two_layers(), torch.randn(2, 5, dtype=torch.float64)
    for name, options, message in (("lrp_epsilon", {"epsilon": 0}, "option epsilon=0"),
                                   ("lrp_alpha_beta", {"alpha": 2, "beta": 2}, "alpha - beta = 1"),
                                   ("lrp_epsilon_plus", {"canonizer": "resnet"}, "option canonizer='resnet'")):
        with pytest.raises(InputError, match=message):
            explain(model, x, name, target=torch.tensor([0, 1]), **options)
