"""A ROAR image cell retrained under Lightning DDP: two gloo processes (``ddp_spawn``) on the
CPU, the path several GPUs take with ``trainer: {devices: N, strategy: ddp}``."""

from __future__ import annotations

import json

import pytest
import torch
from torch.multiprocessing.spawn import ProcessExitedException

import evaluators.protocols.roar.grid as roar_grid
from datamodules.images import ImageFolderDataModule
from datamodules.roar import RemoveAndRetrainDataModule
from evaluators.protocols.roar.grid import RoarGrid, run_grid
from evaluators.protocols.roar.maps import dataset_maps
from lightning_modules.image_classifier import ImageClassifier
from tests.datamodules.test_images import make_folder


# slow (make test-all): Lightning's ddp_spawn workers can abort at exit after their work (SIGABRT,
# "terminate called without an active exception"); on 2026-11-28 that happened in 2 of 4 fresh-clone
# CI runs, twice in a row within the test's one retry, so it would fail the fast suite by chance.
@pytest.mark.slow
def test_image_cell_retrains_under_two_process_ddp(tmp_path, monkeypatch):
    """Both retrainings of the cell train in two processes; the cell file holds the accuracy
    of the trained weights (back from rank 0) on the modified test images, scored here image
    by image, and those weights are no longer the seeds' initial ones (about 20 s)."""
    make_folder(tmp_path / "data", splits=("train", "val"))
    data = ImageFolderDataModule(root=str(tmp_path / "data"), cache_dir=str(tmp_path / "cache"), batch_size=4,
                                 eval_batch_size=3)  # fmt: skip
    hp = {"arch": "small_cnn", "num_classes": 3, "optimizer": "adamw", "lr": 1e-2, "schedule": "none"}
    clean = ImageClassifier(**hp, seed=99)
    built, real = [], roar_grid.fresh_models
    monkeypatch.setattr(roar_grid, "fresh_models", lambda model, seeds: built.extend(real(model, seeds)) or built)
    grid = RoarGrid(estimators={"random": {}}, fractions=[0.5], retrainings=2,
                    trainer={"accelerator": "cpu", "devices": 2, "strategy": "ddp_spawn", "max_epochs": 1})
    # Once (a CI run of 2026-11-27; 12 runs in a loop after it all passed) a spawned gloo worker
    # aborted at exit after its fit ("terminate called without an active exception", SIGABRT):
    # torch/Lightning teardown, not the grid's arithmetic. The grid resumes, so that one failure
    # is met as a user meets it, by running the same grid again; any other failure, or a second
    # one, fails the test.
    try:
        failed = run_grid(clean, data, grid, tmp_path / "grid")
    except ProcessExitedException as err:
        if err.signal_name != "SIGABRT":
            raise
        built.clear()
        failed = run_grid(clean, data, grid, tmp_path / "grid")
    assert failed == []
    record = json.loads((tmp_path / "grid" / "cells" / "random-t50.json").read_text())

    maps = {s: dataset_maps(clean, data, "random", s, tmp_path / "grid" / "maps") for s in ("train", "test")}
    x, y = RemoveAndRetrainDataModule(data, maps["train"], maps["test"], 0.5).modified_split("test")
    assert len(built) == 2 and record["seeds"] == [0, 1]
    for model, seed, acc in zip(built, record["seeds"], record["retrain_acc"]):
        with torch.no_grad():
            correct = [int(model.eval()(x[i : i + 1]).argmax(1).item() == y[i].item()) for i in range(len(y))]
        assert acc == pytest.approx(sum(correct) / len(y), abs=1e-12)
        initial = ImageClassifier(**hp, seed=seed).state_dict()
        assert any(not torch.equal(v, initial[k]) for k, v in model.state_dict().items() if v.is_floating_point())
