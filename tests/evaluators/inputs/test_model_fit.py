"""Whether a run folder's checkpoint is a model of the folder's data (evaluators/inputs/model_fit.py):
a model of the data passes; another kind, another width or another number of classes is one line
naming the checkpoint, what it holds and what the data needs; a resumed checkpoint's model class
is compared with the run's config.yaml."""

from __future__ import annotations

import pytest
import torch
import yaml

from datamodules import TwoMoonsDataModule
from evaluators.inputs.model_fit import check_resumed_checkpoint, check_run_model, data_needs, model_holds, probe_inputs
from foundation.errors import InputError
from lightning_modules import ImageClassifier, MLPClassifier

MLP = "lightning_modules.mlp.MLPClassifier"


@pytest.fixture(scope="module")
def moons():
    return TwoMoonsDataModule(n_samples=60)


def test_probe_and_needs_of_a_table(moons):
    torch.testing.assert_close(probe_inputs(moons, 3), moons.test_tensors[0][:3], rtol=0, atol=0)
    assert data_needs(moons) == "a tabular model of rows (N, 2)"


def test_what_a_checkpoint_holds():
    assert model_holds(MLP, {"in_features": 7}) == "an MLPClassifier, a tabular model of rows (N, 7)"
    assert model_holds("x.ImageClassifier", {"arch": "resnet8"}) == \
        "an ImageClassifier (resnet8), an image model of images (N, C, H, W)"  # fmt: skip
    assert model_holds("x.Classifier", {"net": {"class_path": "my.Net"}}) == "a Classifier of my.Net"
    assert model_holds("x.Other", {}) == "a Other"


def test_a_model_of_the_data_passes_and_others_are_named(moons, tmp_path):
    ckpt = tmp_path / "last.ckpt"
    check_run_model(MLPClassifier(2, hidden=(4,)).eval(), moons, ckpt, MLP)
    with pytest.raises(InputError, match=r"holds an ImageClassifier \(small_cnn\), an image model of images "
                                         r"\(N, C, H, W\); the run folder's data \(two_moons\) needs a tabular model "
                                         r"of rows \(N, 2\); expected the checkpoint train.py wrote for its "
                                         r"config.yaml \(MLPClassifier\)"):  # fmt: skip
        check_run_model(ImageClassifier(arch="small_cnn", num_classes=2), moons, ckpt, MLP)
    with pytest.raises(InputError, match=r"holds an MLPClassifier, a tabular model of rows \(N, 5\), which fails on "
                                         r"the data's test inputs of shape \(3, 2\) \(RuntimeError"):  # fmt: skip
        check_run_model(MLPClassifier(5, hidden=(4,)).eval(), moons, ckpt, MLP)
    with pytest.raises(InputError, match="logits of 3 classes; the data has 2 classes"):
        check_run_model(MLPClassifier(2, hidden=(4,), num_classes=3).eval(), moons, ckpt, MLP)


def run_folder(tmp_path, config_model: str, ckpt_class: str | None):
    (tmp_path / "checkpoints").mkdir(parents=True)
    config = {"model": {"class_path": config_model, "init_args": {"in_features": 2}},
              "data": {"class_path": "datamodules.TwoMoonsDataModule"}}  # fmt: skip
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    hparams = {"_class_path": ckpt_class, "arch": "small_cnn"} if ckpt_class else {}
    torch.save({"hyper_parameters": hparams, "state_dict": {}}, tmp_path / "checkpoints" / "last.ckpt")
    return tmp_path


def test_a_resumed_checkpoint_holds_the_configs_model(tmp_path):
    check_resumed_checkpoint(run_folder(tmp_path / "same", MLP, MLP))
    check_resumed_checkpoint(run_folder(tmp_path / "python", MLP, None))  # made in Python: nothing to compare
    with pytest.raises(InputError, match=r"last.ckpt: holds an ImageClassifier \(small_cnn\), an image model of "
                                         r"images \(N, C, H, W\); the run folder's config.yaml trains an "
                                         r"MLPClassifier, a tabular model of rows \(N, 2\) on tabular"):  # fmt: skip
        check_resumed_checkpoint(run_folder(tmp_path / "other", MLP, "lightning_modules.ImageClassifier"))
    (tmp_path / "same" / "checkpoints" / "last.ckpt").write_bytes(b"cut short")
    with pytest.raises(InputError, match="not a readable checkpoint"):
        check_resumed_checkpoint(tmp_path / "same")
