"""What an evaluator is given (evaluators/inputs/sources.py): the kind a run's config trains, the
command that makes a missing run or population (also at the end of a longer path), the one kind
check and its wording, and a checkpoint that cannot be read named. That every config's path is one
a command makes: tests/configs/test_config_paths.py."""

from __future__ import annotations

import pytest
import torch

from evaluators.inputs.sources import (POPULATIONS, check_checkpoint, check_kind, data_kind, made_by, not_found,
                                       run_kind)  # fmt: skip
from foundation.errors import InputError


def test_the_kind_a_run_trains():
    assert run_kind({"model": {"class_path": "lightning_modules.MLPClassifier"}}) == "tabular"
    assert run_kind({"model": {"class_path": "lightning_modules.PopulationMLP"}}) == "tabular population"
    classifier = {"model": {"class_path": "lightning_modules.Classifier"}}
    assert run_kind({**classifier, "data": {"class_path": "datamodules.ImageFolderDataModule"}}) == "image"
    assert run_kind({**classifier, "data": {"class_path": "datamodules.CSVDataModule"}}) == "tabular"
    assert run_kind({"model": {"class_path": "my.Net"}}) == "Net" and run_kind({}) == "unknown model"
    assert data_kind("datamodules.TwoMoonsDataModule") == "tabular"


def test_a_missing_path_names_the_command_that_makes_it():
    assert made_by("/elsewhere/checkout/runs/german/mlp-seed0") == (
        "a run folder written by train.py", "python train.py --config configs/german.yaml --run_name mlp-seed0")
    assert made_by("runs/full/adult/population-1000/population.pt") == (
        "a population file written by train.py", "make population DATASET=adult")
    assert made_by("runs/full/mnist/population-1000/population.pt") is None  # not a dataset of the registry
    assert str(not_found("runs/fashion_mnist/cnn-seed0", "x")) == (
        "runs/fashion_mnist/cnn-seed0: folder not found; expected a run folder written by train.py (make it with: "
        "make fashion-mnist-cnn)")  # fmt: skip
    assert str(not_found("mine.pt", "a model file")) == "mine.pt: file not found; expected a model file"


def test_the_kind_check():
    check_kind("option run='x'", "tabular", ("tabular", "image"), "tabular")
    with pytest.raises(InputError, match=r"^option run='x': holds an image model; expected a tabular model \(the "
                                         r"config's kind: tabular\): it reads rows$"):  # fmt: skip
        check_kind("option run='x'", "image", ("tabular", "image"), "tabular", why="it reads rows")
    with pytest.raises(InputError, match=r"option kind='image'; this evaluator takes a tabular population or a "
                                         r"tabular network population"):  # fmt: skip
        check_kind("x", "image population", POPULATIONS[::2], "image")
    with pytest.raises(InputError, match=r"option kind='text'; expected one of \[None, 'tabular', 'image'\]"):
        check_kind("x", "tabular", ("tabular",), "text")


def test_a_checkpoint_is_read_or_named(tmp_path):
    torch.save({"state_dict": {"w": torch.ones(2)}}, tmp_path / "good.ckpt")
    assert torch.equal(check_checkpoint(tmp_path / "good.ckpt")["state_dict"]["w"], torch.ones(2))
    (tmp_path / "cut.ckpt").write_bytes((tmp_path / "good.ckpt").read_bytes()[:50])
    with pytest.raises(InputError, match=r"cut.ckpt: not a readable checkpoint \(\w+\); expected the checkpoint "
                                         r"train.py writes"):  # fmt: skip
        check_checkpoint(tmp_path / "cut.ckpt")
