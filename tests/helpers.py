"""Callbacks that tests inject through configs (`--trainer.callbacks+=tests.helpers.X`), and checks shared by tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytorch_lightning as pl


class InterruptChunk(pl.Callback):
    """Raise at the start of epoch ``epoch`` of the chunk whose folder ends with ``chunk``,
    while the environment variable RELEXP_TEST_INTERRUPT is set (a crash mid-run)."""

    def __init__(self, chunk: str = "chunk-001", epoch: int = 2) -> None:
        self.chunk, self.epoch = chunk, epoch

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if os.environ.get("RELEXP_TEST_INTERRUPT") and trainer.default_root_dir.endswith(self.chunk):
            if trainer.current_epoch == self.epoch:
                raise RuntimeError("simulated crash")


class RecordEpochs(pl.Callback):
    """Append '<chunk folder> <epoch>' for every epoch trained to the file named by RELEXP_TEST_RECORD."""

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        record = os.environ.get("RELEXP_TEST_RECORD")
        if record:
            with open(record, "a") as fh:
                fh.write(f"{Path(trainer.default_root_dir).name} {trainer.current_epoch}\n")


def assert_one_line_error(result, message: str, status: int = 2) -> None:
    """An entry point's bad-input ending (``datamodules.errors.run_entry_point``): the exit
    status, one line on standard error that starts with "error: " and holds ``message``."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == status, result.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr[-3000:]
