"""``--set`` with a dotted key sets one key of a mapping option (``trainer.max_epochs``), the
config's other keys kept; a key path that names no option, passes through a value that is not
a mapping, or names a key a mapping lacks, is named in one error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from datamodules import InputError
from evaluators.inputs.config import load_config
from evaluators.protocols.aggregation import AggregationConfig
from evaluators.protocols.roar.protocol import RoarConfig
from tests.support.helpers import assert_one_line_error, run_in_process
from tests.support import ROOT


def test_dotted_set_keys_reach_nested_options_and_wrong_keys_are_named(tmp_path):
    config = Path("configs/roar/fashion_mnist_cpu.yaml")
    written = yaml.safe_load(config.read_text())
    cfg = load_config(config, RoarConfig, {"trainer.max_epochs": 1, "data.subset.train": 600, "run": None})
    assert cfg.trainer == {**written["trainer"], "max_epochs": 1}
    assert cfg.data == {"subset": {"train": 600, "test": 2000}} and cfg.estimators == written["estimators"]
    agg = load_config(Path("configs/aggregation/fashion_mnist.yaml"), AggregationConfig,
                      {"explainers.rise.n_masks": 50, "sweeps.ucb": {"eps": [0.5]}})  # fmt: skip
    assert agg.explainers["rise"] == {"n_masks": 50, "s": 10, "seed": 0} and agg.sweeps["ucb"] == {"eps": [0.5]}
    assert agg.sweeps["pi"] == AggregationConfig(run="r").sweeps["pi"]  # a default mapping, one key set
    bad = {
        "trainer.max_epoch": "option trainer.max_epoch: not a pl.Trainer option; expected one of ['max_epochs'",
        "trainr.max_epochs": "--set trainr.max_epochs: 'trainr' is not an option of",
        "retrainings.k": "--set retrainings.k: option retrainings is 3, not a mapping",
        "estimators.salency.n": "--set estimators.salency.n: option estimators has no key 'salency'; expected one of",
    }  # fmt: skip
    for key, message in bad.items():
        with pytest.raises(InputError) as raised:
            load_config(config, RoarConfig, {key: 1})
        assert message in str(raised.value), (key, str(raised.value))


def test_dotted_set_on_the_command_line(tmp_path):
    """``evaluate.py --set trainer.max_epoch=1`` ends with the nearest ``pl.Trainer`` keys, before
    any folder is made."""
    result = subprocess.run([sys.executable, "evaluate.py", "roar", "--config", "configs/roar/fashion_mnist_cpu.yaml",
                             "--set", "trainer.max_epoch=1", "--output_dir", str(tmp_path / "out")], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert_one_line_error(result, "option trainer.max_epoch: not a pl.Trainer option; expected one of ['max_epochs'")
    assert not (tmp_path / "out").exists()


def test_an_option_left_unset_names_how_to_set_it(tmp_path):
    """A generic config leaves ``run`` to the command line: leaving it out says which option
    to pass, not only the type it expected."""
    result = run_in_process("evaluate.py", "aggregation", "--config", "configs/aggregation/table.yaml",
                            "--output_dir", str(tmp_path / "out"))  # fmt: skip
    assert_one_line_error(result, "option run=None (not set: pass it as --set run=... or, where the command has "
                                  "it, --run); expected str")  # fmt: skip
    assert not (tmp_path / "out").exists()
