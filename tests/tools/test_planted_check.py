"""``tools/planted_check.py``: a planted-pattern run's test accuracy as served and with the
patterns blanked, recomputed here from the run's model and data."""

from __future__ import annotations

import pytest
import torch

import train
from evaluators.inputs.runs import load_run
from foundation.errors import InputError
from tools import planted_check


def test_accuracy_as_served_and_blanked(tmp_path):
    train.main(["--config", "configs/ground_truth/planted_cnn.yaml", "--data.size", "16", "--data.pattern", "4",
                "--data.n_train", "32", "--data.n_test", "16", "--trainer.max_epochs", "1",
                "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
                "--output_dir", str(tmp_path), "--run_name", "tiny"])  # fmt: skip
    run = tmp_path / "planted_patterns" / "tiny"
    got = planted_check.main([str(run)])
    model, data, _ = load_run(run, announce=False)
    data.setup("test")
    images, labels = data.split_images("test")
    with torch.no_grad():
        served = (model.eval()(data.as_model_inputs(images, labels)[0]).argmax(1) == labels).double().mean().item()
    assert got["accuracy"] == pytest.approx(served) and got["chance"] == 0.25 and got["n_test"] == 16
    assert 0 <= got["accuracy_blanked"] <= 1


def test_a_run_of_other_data_is_refused(tiny_run):
    with pytest.raises(InputError, match="expected PlantedPatternDataModule"):
        planted_check.main([str(tiny_run)])
