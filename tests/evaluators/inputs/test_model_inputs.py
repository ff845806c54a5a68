"""The inputs a brought-in model gets (evaluators/inputs/model_inputs.py), against the raw rows
themselves (sklearn's ``make_moons``, which TwoMoonsDataModule standardises): ``raw`` feeds the
model those rows, ``model_mean``/``model_std`` those rows standardised by hand with the model's
own statistics; bad options are named."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import make_moons
from torch import nn

from datamodules import TwoMoonsDataModule
from evaluators.inputs.model_inputs import InputAdapter, adapted, own_statistics, preprocessing_line
from foundation.errors import InputError
from lightning_modules.classifier import Classifier


class Recorder(nn.Module):
    """Records the inputs it gets; two logits."""

    def forward(self, x):
        self.seen = x.detach().clone()
        return torch.zeros(len(x), 2)


@pytest.fixture(scope="module")
def moons():
    data = TwoMoonsDataModule(n_samples=80, noise=0.1, sample_seed=3)
    raw, _ = make_moons(n_samples=80, noise=0.1, random_state=3)
    return data, data.train_tensors[0], raw


def seen(model, x):
    model(x)
    inner = model.net.net if isinstance(model.net, InputAdapter) else model.net
    return inner.seen.double().numpy()


def nearest_raw_rows(got: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """For every row got, the distance to its nearest row of ``raw``."""
    return np.abs(got[:, None, :] - raw[None, :, :]).max(2).min(1)


def test_data_or_unset_is_the_model_itself(moons):
    data, _, _ = moons
    model = Classifier(Recorder())
    assert adapted(model, data) is model and adapted(model, data, "data") is model


def test_raw_feeds_the_rows_before_standardisation(moons):
    data, x, raw = moons
    model = adapted(Classifier(Recorder()), data, "raw")
    assert isinstance(model.net, InputAdapter) and not model.training
    assert nearest_raw_rows(seen(model, x), raw).max() < 1e-5  # every row the model sees is a make_moons row


def test_the_models_own_statistics_standardise_the_raw_rows(moons):
    data, x, raw = moons
    mean, std = [0.5, -0.25], [2.0, 0.5]
    got = seen(adapted(Classifier(Recorder()), data, None, mean, std), x)
    unstandardised = got * np.array(std) + np.array(mean)  # back to raw by hand
    assert nearest_raw_rows(unstandardised, raw).max() < 1e-5
    one = seen(adapted(Classifier(Recorder()), data, "raw", 1.0, 4.0), x)  # one number for every feature
    assert nearest_raw_rows(one * 4.0 + 1.0, raw).max() < 1e-5


def test_bad_options_are_named(moons):
    data, _, _ = moons
    assert own_statistics(None, None, None) is False and own_statistics("raw", [1.0], [2.0]) is True
    for options, message in ((("tabular", None, None), "option model_inputs='tabular'"),
                             ((None, [1.0], None), "give both"),
                             (("data", [1.0], [1.0]), "with model_inputs=data"),
                             ((None, [float("nan")], [1.0]), "option model_mean=\\[nan\\]"),
                             ((None, [True], [1.0]), "option model_mean="),
                             ((None, [0.0], [0.0, 1.0]), "option model_std=\\[0.0, 1.0\\]; expected positive")):
        with pytest.raises(InputError, match=message):
            own_statistics(*options)
    with pytest.raises(InputError, match="option model_mean: 3 values; the data has 2 features"):
        adapted(Classifier(Recorder()), data, "raw", [0.0, 0.0, 0.0], [1.0, 1.0, 1.0])


def test_the_line_says_what_the_model_gets(moons):
    data, _, _ = moons
    assert "the model gets them as served" in preprocessing_line(data)
    assert "without the standardisation (--model_inputs raw)" in preprocessing_line(data, "raw")
    line = preprocessing_line(data, None, [0.5, -0.25], [2.0, 0.5])
    assert "own mean [0.5, -0.25] and std [2, 0.5]" in line and "every column standardised" in line
