"""Which model a protocol evaluates (evaluators/inputs/model_source.py): the config section's
defaults, and a bad device or contradictory input options refused when the config is made."""

from __future__ import annotations

import pytest

from evaluators.inputs.model_inputs import OPTIONS
from evaluators.inputs.model_source import FILE_OPTIONS, ModelSource
from foundation.errors import InputError


def test_defaults_and_the_options_only_a_model_file_takes():
    source = ModelSource(run="runs/german/mlp-seed0")
    assert (source.checkpoint, source.device, source.kind, source.model_args) == ("last.ckpt", "auto", None, {})
    assert FILE_OPTIONS == ("model_class", "model_args", "data_config", *OPTIONS)


@pytest.mark.parametrize("options, message", [
    ({"device": "tpu"}, "option device='tpu'"),
    ({"model_mean": [0.5]}, "options model_mean and model_std: give both"),
    ({"model_inputs": "scaled"}, "option model_inputs='scaled'"),
])  # fmt: skip
def test_bad_options_stop_the_config(options, message):
    with pytest.raises(InputError, match=message):
        ModelSource(run="x", **options)
