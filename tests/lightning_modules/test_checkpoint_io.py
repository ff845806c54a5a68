"""Checkpoints written whole or not at all (lightning_modules/checkpoint_io.py): the bytes
``torch.save`` writes, read back by ``torch.load``; a write that fails leaves the previous
checkpoint as it was and no temporary file; a trainer's checkpoints go through it."""

from __future__ import annotations

import io

import pytest
import pytorch_lightning as pl
import torch

import foundation.files
from lightning_modules.checkpoint_io import AtomicCheckpointIO, atomic_checkpoints


def test_the_checkpoint_is_torch_saves_bytes_in_a_new_folder(tmp_path):
    checkpoint = {"state_dict": {"w": torch.arange(6.0).reshape(2, 3)}, "epoch": 3}
    path = tmp_path / "run" / "checkpoints" / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint(checkpoint, path)
    expected = io.BytesIO()
    torch.save(checkpoint, expected)
    assert path.read_bytes() == expected.getvalue()
    loaded = torch.load(path, weights_only=True)
    assert loaded["epoch"] == 3 and torch.equal(loaded["state_dict"]["w"], checkpoint["state_dict"]["w"])
    with pytest.raises(TypeError, match="storage_options are not supported"):
        AtomicCheckpointIO().save_checkpoint(checkpoint, path, storage_options={})


def test_a_failed_write_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"epoch": 1}, path)
    before = path.read_bytes()

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(foundation.files.os, "replace", full_disk)
    with pytest.raises(OSError):
        AtomicCheckpointIO().save_checkpoint({"epoch": 2, "big": torch.zeros(1000)}, path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_a_trainer_writes_through_it():
    trainer = atomic_checkpoints(pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False))
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
