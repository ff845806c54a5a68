"""A user's network trained as a classifier (lightning_modules/classifier.py): a network config
built with its weights drawn from the seed (as ``torch.manual_seed`` then the constructor draws
them), the training loss the cross-entropy by hand, the optimisers, and logits of the wrong shape
or options out of range named."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from foundation.errors import InputError
from lightning_modules.classifier import Classifier, build_optimizer, build_seeded, check_logits

LINEAR = {"class_path": "torch.nn.Linear", "init_args": {"in_features": 3, "out_features": 2}}


def test_a_config_is_built_from_its_seed_and_the_global_state_kept():
    state = torch.get_rng_state()
    net = build_seeded(LINEAR, 7)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(7)
    assert torch.equal(net.weight, nn.Linear(3, 2).weight)
    assert torch.equal(Classifier(LINEAR, seed=7).net.weight, net.weight)
    assert not torch.equal(build_seeded(LINEAR, 8).weight, net.weight)
    with pytest.raises(InputError, match="option seed: None with a network config"):
        build_seeded(LINEAR, None)


def test_the_training_loss_is_the_cross_entropy_by_hand():
    torch.manual_seed(0)
    model = Classifier(nn.Linear(3, 2), num_classes=2, label_smoothing=0.1)
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 1, 0])
    logits = model(x).detach().double()
    log_p = logits.log_softmax(-1)
    by_hand = -(0.95 * log_p[torch.arange(4), y] + 0.05 * log_p[torch.arange(4), 1 - y]).mean()  # ε = 0.1 over K = 2
    assert float(model.training_step((x, y), 0)) == pytest.approx(float(by_hand), rel=1e-5)
    assert "net" not in model.hparams  # a module made in Python is not a plain hyperparameter


def test_logits_of_the_wrong_shape_are_named():
    check_logits(torch.zeros(3, 4), 3, 4, "net")
    with pytest.raises(InputError, match=r"net: an output of shape \(3,\) for a batch of 3 inputs; expected class "
                                         r"logits of shape \(3, K\)"):  # fmt: skip
        check_logits(torch.zeros(3), 3, None, "net")
    with pytest.raises(InputError, match=r"logits of 4 classes; the data has 5 classes"):
        check_logits(torch.zeros(3, 4), 3, 5, "net")
    with pytest.raises(InputError, match="a tuple for a batch"):
        check_logits((1, 2), 3, None, "net")
    model = Classifier(nn.Linear(3, 4), num_classes=2)
    with pytest.raises(InputError, match=r"option model.net \(Linear\): logits of 4 classes"):
        model.training_step((torch.zeros(2, 3), torch.tensor([0, 1])), 0)


def test_optimisers_and_options():
    parameters = [nn.Parameter(torch.zeros(2))]
    sgd = build_optimizer(parameters, SimpleNamespace(optimizer="sgd", lr=0.1, weight_decay=0.01))
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["momentum"] == 0.9 and sgd.defaults["lr"] == 0.1
    assert type(build_optimizer(parameters, SimpleNamespace(optimizer="adamw", lr=1, weight_decay=0))) is \
        torch.optim.AdamW  # fmt: skip
    for options, message in (({"optimizer": "rmsprop"}, "option optimizer='rmsprop'"),
                             ({"lr": 0.0}, "options lr=0.0"), ({"label_smoothing": 1.0}, "label_smoothing=1.0"),
                             ({"lr": math.nan}, "options lr=nan")):  # fmt: skip
        with pytest.raises(InputError, match=message):
            Classifier(nn.Linear(3, 2), **options)
    with pytest.raises(InputError, match="option net: a str; expected an nn.Module"):
        Classifier("torch.nn.Linear")
