"""ROAR at the end of training (Hooker et al. 2019): the remove-and-retrain grid of
``evaluators.protocols.roar.grid`` run for the configured estimators with the model just trained as
the clean model, on the run's datamodule.

At ``on_fit_end``, on the global rank 0 only: every cell (estimator, t) retrains
``retrainings`` fresh models (the trained model's class and hyperparameters, seeds ``seed`` ..
``seed + K - 1``; one ``PopulationMLP`` for a tabular MLP) for ``trainer["max_epochs"]`` epochs
(default: the finished run's ``max_epochs``) on one device (the retraining ``trainer``
options; default: the trained model's accelerator, one device), and writes cells, maps,
``roar.json``, ``roar.csv`` and the plots to ``<default_root_dir>/roar/``; the results
table and plots go to W&B when a ``WandbLogger`` is attached. The grid's cells are kept,
so a run resumed after a crash in the grid skips the finished ones. The summary is kept in
``summary``.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.loggers import WandbLogger

from evaluators.protocols.roar.grid import RoarGrid, run_grid
from evaluators.protocols.roar.report import COLUMNS, collect


class ROAR(pl.Callback):
    def __init__(
        self,
        estimators: dict[str, dict] | None = None,
        fractions: list[float] | None = None,
        retrainings: int = 5,
        trainer: dict | None = None,
        unit: str = "element",
        square: bool = True,
        keep: bool = False,
        seed: int = 0,
    ) -> None:
        """Options as ``evaluators.protocols.roar.grid.RoarGrid`` (``None``: its defaults)."""
        given = {"estimators": estimators, "fractions": fractions, "trainer": trainer}
        self.grid = RoarGrid(**{k: v for k, v in given.items() if v is not None}, retrainings=retrainings,
                             unit=unit, square=square, keep=keep, seed=seed)  # fmt: skip
        self.summary: dict | None = None

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        out_dir = Path(trainer.default_root_dir) / "roar"
        device = pl_module.device
        accelerator = {"accelerator": "gpu" if device.type == "cuda" else "cpu", "devices": 1}
        grid = RoarGrid(**{**asdict(self.grid), "trainer": {**accelerator, **self.grid.trainer}})
        was_training = pl_module.training
        run_grid(pl_module, trainer.datamodule, grid, out_dir, default_epochs=trainer.max_epochs)
        pl_module.train(was_training)
        self.summary = collect(out_dir, grid, asdict(grid), "none")
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                rows = self.summary["rows"]
                logger.log_table(key="roar/results", columns=COLUMNS, data=[[r[c] for c in COLUMNS] for r in rows])
                logger.log_image(key="roar/plots", images=[str(out_dir / "roar.png"),
                                                           str(out_dir / "retrain_vs_no_retrain.png")])
