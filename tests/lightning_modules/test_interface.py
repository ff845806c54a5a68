"""The classifier contract and the functions that read it (lightning_modules/interface.py), on
tiny modules whose outputs are known by hand: the default class (an int, the predicted class of
the probabilities, a population's members' mean), the explained output (a logit, a softmax
probability, an ensemble's members' mean), targets checked."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from foundation.errors import InputError
from lightning_modules.interface import (PREDICTED, check_num_classes, class_probabilities, class_scores,
                                         default_class, default_classes, default_output, default_targets, eval_mode,
                                         explained_output, output_kind, predicted_class, tabular_class,
                                         uniform)  # fmt: skip


class Fixed(nn.Module):
    """Logits given by hand, whatever the inputs (rows of ``x`` pick rows of ``logits``)."""

    def __init__(self, logits, **attributes):
        super().__init__()
        self.logits = torch.as_tensor(logits, dtype=torch.float64)
        self.__dict__.update(attributes)

    def forward(self, x):
        return self.logits[x[:, 0].long()]


class Members(Fixed):
    """An ensemble: ``member_logits`` (M, N, K) by hand, its forward their mean."""

    def member_logits(self, x):
        return self.logits[:, x[:, 0].long()]

    def forward(self, x):
        return self.member_logits(x).mean(0)


ROWS = torch.tensor([[0.0], [1.0], [2.0]])
LOGITS = [[2.0, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 4.0, 0.0]]


def test_defaults_of_the_tabular_models_and_options():
    assert tabular_class(2) == 1 and tabular_class(3) == PREDICTED
    check_num_classes(2)
    for bad in (1, True, 2.0):
        with pytest.raises(InputError, match="option num_classes="):
            check_num_classes(bad)


def test_the_default_class_is_the_models_or_the_predicted_one():
    plain, fixed = Fixed(LOGITS), Fixed(LOGITS, explained_class=2)
    assert default_class(plain) is None and default_class(fixed) == 2
    assert default_targets(plain, ROWS).tolist() == [0, 2, 1] == predicted_class(plain, ROWS).tolist()
    assert default_targets(fixed, ROWS).tolist() == [2, 2, 2] and default_targets(plain, ROWS, 1).tolist() == [1] * 3
    assert default_classes(plain, ROWS, max_batch=1).tolist() == [0, 2, 1]
    own = Fixed(LOGITS, explained_class=PREDICTED)
    own.probabilities = lambda x: torch.tensor([[0.0, 1.0, 0.0]] * len(x))  # its own, not the softmax
    assert default_targets(own, ROWS).tolist() == [1, 1, 1]
    for bad in (torch.tensor([0.0, 1.0, 1.0]), torch.tensor([0, 1]), "1"):
        with pytest.raises(InputError, match="option target="):
            default_targets(plain, ROWS, bad)


def test_a_populations_predicted_class_is_its_members_mean():
    probabilities = torch.tensor([[[0.9, 0.1]], [[0.0, 1.0]], [[0.3, 0.7]]])  # (M=3, N=1, K=2): mean 0.4, 0.6
    population = Fixed([[0.0, 0.0]], probabilities=lambda x: probabilities)
    assert predicted_class(population, ROWS[:1]).tolist() == [1]


def test_the_explained_output_is_a_logit_or_a_probability():
    model = Fixed(LOGITS)
    target = torch.tensor([1, 2, 0])
    by_hand = torch.tensor([1.0, 3.0, 1.0], dtype=torch.float64)
    torch.testing.assert_close(explained_output(model, ROWS, target), by_hand)
    softmax = torch.tensor(LOGITS, dtype=torch.float64).softmax(-1)
    torch.testing.assert_close(explained_output(model, ROWS, 2, "probability"), softmax[:, 2])
    torch.testing.assert_close(class_scores(model, ROWS, "probability"), softmax)
    torch.testing.assert_close(class_probabilities(model, ROWS), softmax)
    with pytest.raises(InputError, match=r"option target=3: no such class; expected classes 0 .. 2"):
        explained_output(model, ROWS, torch.tensor([0, 3, 1]))
    ensemble = Members([LOGITS, [[0.0] * 3] * 3])
    torch.testing.assert_close(explained_output(ensemble, ROWS, 2, "probability"),
                               (softmax[:, 2] + 1 / 3) / 2)  # the members' mean of their probabilities  # fmt: skip


def test_the_output_kind_and_default_output():
    model = Fixed(LOGITS, explained_class=1, explain_output="probability")
    assert output_kind(model) == "probability" and output_kind(Fixed(LOGITS)) == "logit"
    softmax = torch.tensor(LOGITS, dtype=torch.float64).softmax(-1)
    torch.testing.assert_close(default_output(model, ROWS), softmax[:, 1])
    assert uniform(torch.tensor([2, 2])) == 2 and torch.equal(uniform(torch.tensor([1, 2])), torch.tensor([1, 2]))


def test_eval_mode_is_restored():
    layer = nn.Linear(1, 1).train()
    with eval_mode(layer):
        assert not layer.training
    assert layer.training
