"""MLPClassifier: the paper's architecture, seeded initialisation, explained output."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from datamodules import InputError
from lightning_modules import MLPClassifier


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
