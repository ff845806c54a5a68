"""Lightning checkpoints written whole or not at all.

Lightning's own ``TorchCheckpointIO`` writes through an fsspec transaction whose temporary file
lies in the system's temporary folder: on another file system than the run, its commit copies the
file onto ``last.ckpt``, and a full disk there leaves a truncated ``last.ckpt`` that no
``--resume`` can read. :class:`AtomicCheckpointIO` writes the same bytes with
``foundation.files.write_bytes`` (beside the checkpoint, fsync, ``os.replace``): the previous
checkpoint stays until the new one is whole, and a full disk ends with one line naming the folder
and the checkpoint's size.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins.io import TorchCheckpointIO

from foundation.files import write_bytes


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose ``save_checkpoint`` is atomic (a local path only, as the project's runs are)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__}.save_checkpoint: storage_options are not supported")
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, buffer.getbuffer())


def atomic_checkpoints(trainer: pl.Trainer) -> pl.Trainer:
    """``trainer``, its checkpoints written by :class:`AtomicCheckpointIO`."""
    trainer.strategy.checkpoint_io = AtomicCheckpointIO()
    return trainer
