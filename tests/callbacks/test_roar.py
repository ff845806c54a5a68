"""callbacks/roar.py: the ROAR callback runs the grid on the model just trained, at the end of fit."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch

from callbacks import ROAR
from lightning_modules.mlp import MLPClassifier
from tests.evaluators.protocols.roar.test_grid import moons


def test_roar_callback_runs_the_grid_after_training(tmp_path):
    callback = ROAR(estimators={"saliency": {}, "random": {}}, fractions=[0.0, 0.5], retrainings=2)
    model = MLPClassifier(in_features=2, seed=0)
    trainer = pl.Trainer(default_root_dir=str(tmp_path), max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, callbacks=[callback], accelerator="cpu")  # fmt: skip
    trainer.fit(model, datamodule=moons())
    rows = callback.summary["rows"]
    assert [(r["estimator"], r["fraction"]) for r in rows] == [("saliency", 0.0), ("saliency", 0.5),
                                                               ("random", 0.0), ("random", 0.5)]  # fmt: skip
    assert all(r["k"] == 2 and 0.0 <= r["retrain_mean"] <= 1.0 for r in rows)
    assert (tmp_path / "roar" / "roar.png").is_file() and len(list((tmp_path / "roar" / "cells").iterdir())) == 3
    with torch.no_grad():  # t = 0, no retraining: the trained model on the clean test rows
        x, y = moons().test_tensors
        assert rows[0]["no_retrain_acc"] == pytest.approx((model(x).argmax(1) == y).double().mean().item())
