"""MLPClassifier: the paper's architecture, seeded initialisation, explained output."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from datamodules import InputError
from lightning_modules import MLPClassifier
from lightning_modules.mlp import adam, classification_loss


def test_architecture_is_128_64_16_with_two_logits():
    model = MLPClassifier(in_features=23)
    linears = [m for m in model.net if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(23, 128), (128, 64), (64, 16), (16, 2)]
    assert sum(isinstance(m, nn.ReLU) for m in model.net) == 3
    assert not any(isinstance(m, nn.Dropout) for m in model.net)
    assert model(torch.randn(5, 23)).shape == (5, 2)


def test_initialisation_depends_only_on_seed():
    torch.manual_seed(123)
    a = MLPClassifier(in_features=10, seed=7)
    torch.manual_seed(999)
    b = MLPClassifier(in_features=10, seed=7)
    c = MLPClassifier(in_features=10, seed=8)
    for pa, pb, pc in zip(a.parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb)
        assert not torch.equal(pa, pc)


def test_initialisation_is_pytorch_default_linear_init():
    torch.manual_seed(3)
    reference = nn.Linear(10, 128)
    model = MLPClassifier(in_features=10, seed=3)
    assert torch.equal(model.net[0].weight, reference.weight) and torch.equal(model.net[0].bias, reference.bias)


def test_explained_output_is_positive_class_logit_or_probability():
    x = torch.randn(8, 4)
    logit_model = MLPClassifier(in_features=4, seed=1, explain_output="logit")
    prob_model = MLPClassifier(in_features=4, seed=1, explain_output="probability")
    logits = logit_model(x)
    torch.testing.assert_close(logit_model.explained_output(x), logits[:, 1])
    expected = torch.exp(logits[:, 1]) / torch.exp(logits).sum(dim=1)
    torch.testing.assert_close(prob_model.explained_output(x), expected)


def test_unknown_explain_output_is_rejected():
    with pytest.raises(InputError, match="explain_output='margin'"):
        MLPClassifier(in_features=4, explain_output="margin")


def test_loss_on_probabilities_is_cross_entropy_of_the_softmax_output_by_hand():
    """The reference code's loss: nn.CrossEntropyLoss after nn.Softmax, i.e.
    -log(exp(p_y) / (exp(p_0) + exp(p_1))) with p = softmax(logits), in float64."""
    logits = torch.tensor([[2.0, -1.0], [0.5, 0.25], [-3.0, 4.0]], dtype=torch.float64)
    y = torch.tensor([0, 1, 1])
    p = logits.exp() / logits.exp().sum(1, keepdim=True)
    by_hand = -(p[torch.arange(3), y] - p.exp().sum(1).log())
    torch.testing.assert_close(classification_loss(logits, y, "probabilities", "none"), by_hand)
    plain = -(logits[torch.arange(3), y] - logits.exp().sum(1).log())
    torch.testing.assert_close(classification_loss(logits, y), plain.mean())
    with pytest.raises(InputError, match="option loss_on='softmax'"):
        MLPClassifier(in_features=3, loss_on="softmax")


@pytest.mark.parametrize("weight_decay", [0.0, 1e-3])
def test_adam_steps_a_stack_like_each_model_alone(weight_decay):
    # Per-model sizes in and out of whole 16-value units (2 and 3 are the fused kernel's
    # scalar tail alone): mlp.adam fuses only what updates alike alone and stacked.
    members, sizes = 37, [2, 3, 16, 17, 48, 61 * 24, 10 * 24]
    gen = torch.Generator().manual_seed(0)
    stacked = [nn.Parameter(torch.randn(members, n, generator=gen)) for n in sizes]
    alone = [[nn.Parameter(p.detach()[i].clone()) for p in stacked] for i in range(members)]
    opt_stacked = adam(stacked, 4e-3, weight_decay, members=members)
    opts_alone = [adam(params, 4e-3, weight_decay) for params in alone]
    assert [g["fused"] for g in opt_stacked.param_groups] == [True, False]
    for _ in range(25):
        for p in stacked:
            p.grad = torch.randn(p.shape, generator=gen) * 10.0 ** torch.randint(-4, 2, (1,), generator=gen).item()
        for i, (params, opt) in enumerate(zip(alone, opts_alone)):
            for q, p in zip(params, stacked):
                q.grad = p.grad[i].clone()
            opt.step()
        opt_stacked.step()
    for i, params in enumerate(alone):
        for q, p in zip(params, stacked):
            assert torch.equal(q.detach(), p.detach()[i])
