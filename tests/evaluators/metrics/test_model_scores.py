"""What the metrics that read a model share (evaluators/metrics/model_scores.py): the inputs and
maps they take (and refuse), the class each input is scored on, and the outputs they read against
the model's logits and softmax computed by hand."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from evaluators.metrics.model_scores import (check_inputs, check_inputs_and_maps, explained_scores, finite_outputs,
                                             resolve_targets, target_outputs)  # fmt: skip
from foundation.errors import InputError
from foundation.modality import IMAGES, ROWS
from lightning_modules import MLPClassifier


@pytest.fixture
def linear():
    torch.manual_seed(0)
    return nn.Linear(4, 3).double()


def test_inputs_and_maps_of_each_modality(linear):
    rows = torch.randn(5, 4, dtype=torch.float64)
    assert check_inputs_and_maps(linear, rows, torch.zeros(5, 4)) == (ROWS, (4,))
    images = torch.zeros(2, 3, 6, 7)
    assert check_inputs(nn.Conv2d(3, 1, 1), images) is IMAGES
    assert check_inputs_and_maps(nn.Conv2d(3, 1, 1), images, torch.zeros(2, 6, 7)) == (IMAGES, (6, 7))
    with pytest.raises(InputError, match=r"maps of shape \(2, 3, 6, 7\); expected \(2, 6, 7\), one value per pixel "
                                         r"\(reduce"):  # fmt: skip
        check_inputs_and_maps(nn.Conv2d(3, 1, 1), images, torch.zeros(2, 3, 6, 7))
    with pytest.raises(InputError, match=r"inputs x of shape \(2, 3, 6, 7\); expected \(N, d\) float rows for a "
                                         r"model with a fixed class"):  # fmt: skip
        check_inputs(MLPClassifier(4, hidden=(2,)), images)
    for bad in (torch.zeros(0, 4), torch.zeros(3, 4, dtype=torch.long)):
        with pytest.raises(InputError, match="inputs x of shape"):
            check_inputs(linear, bad)
    rows[1, 2] = float("nan")
    with pytest.raises(InputError, match=r"inputs x: input 1 has 1 NaN"):
        check_inputs(linear, rows)
    with pytest.raises(InputError, match=r"^maps: map 0 has 1 infinite"):
        check_inputs_and_maps(linear, rows[2:], torch.tensor([[float("inf"), 0, 0, 0]] * 3))


def test_targets_and_outputs_against_the_logits_by_hand(linear):
    x = torch.randn(6, 4, dtype=torch.float64)
    logits = x @ linear.weight.T + linear.bias
    predicted = logits.argmax(1)
    assert torch.equal(resolve_targets(linear, x, None, max_batch=2), predicted)
    assert resolve_targets(linear, x, 2).tolist() == [2] * 6
    torch.testing.assert_close(explained_scores(linear, x), logits.gather(1, predicted[:, None])[:, 0].detach())
    target = torch.tensor([0, 1, 2, 0, 1, 2])
    softmax = logits.softmax(1)
    torch.testing.assert_close(target_outputs(linear, x, target, "probability"), softmax[range(6), target].detach())
    torch.testing.assert_close(target_outputs(linear, x, target, "logit"), logits[range(6), target].detach())
    with pytest.raises(InputError, match="option target=3: no such class"):
        target_outputs(linear, x, torch.full((6,), 3), "probability")


def test_a_population_and_nonfinite_outputs_are_refused():
    class Population(nn.Module):
        def forward(self, x):
            return torch.zeros(2, len(x), 3)  # (M, N, K)

    with pytest.raises(InputError, match=r"the model's scores have shape \(2, 4\); expected \(4,\): score a "
                                         r"population's members one at a time"):  # fmt: skip
        explained_scores(Population(), torch.zeros(4, 5), torch.zeros(4, dtype=torch.long))
    with pytest.raises(InputError, match=r"the model's output on the inputs scored .*: row 1 has 1 NaN"):
        finite_outputs(torch.tensor([0.0, float("nan")]))
