"""ROAR grid cells on image data served from files (``in_memory: false``): rankings, shards and
accuracies counted from the shards' test loader give the same cell records as the in-memory
path; the rankings ``--rankings_only`` computed are the ones the cells read."""

from __future__ import annotations

import json
from pathlib import Path

import evaluate
from tests.support.helpers import tiny_image_run
from tests.datamodules.test_images import make_folder

RECORD = ("estimator", "fraction", "seeds", "retrain_acc", "no_retrain_acc")


def _grid(tmp_path: Path, run: Path, name: str, in_memory: bool) -> Path:
    config = tmp_path / f"{name}.yaml"
    config.write_text(f"run: {run}\nestimators: {{saliency: {{}}, random: {{}}}}\nfractions: [0.0, 0.5]\n"
                      f"retrainings: 1\ntrainer: {{max_epochs: 2}}\ndata: {{in_memory: {str(in_memory).lower()}}}\n"
                      f"log_to: none\ndevice: cpu\noutput_dir: {tmp_path / name}\n")  # fmt: skip
    return config


def _records(grid: Path) -> dict:
    return {p.stem: {k: json.loads(p.read_text())[k] for k in RECORD} for p in sorted((grid / "cells").glob("*.json"))}


def test_folder_grid_from_shards_equals_the_in_memory_grid(tmp_path):
    root = tmp_path / "images"
    make_folder(root, n=4, size=8)  # 12 train and 12 test images of 3 classes
    run = tiny_image_run(root, tmp_path, epochs=2)
    files = _grid(tmp_path, run, "files", in_memory=False)
    assert evaluate.main(["roar", "--config", str(files), "--rankings_only"]) == {}
    (grid,) = (tmp_path / "files").iterdir()
    ranked = {p: p.stat().st_mtime_ns for p in (grid / "rankings").glob("*/shard-*.pt")}
    assert len(ranked) == 4  # saliency and random, train and test: one shard file each

    evaluate.main(["roar", "--config", str(files)])
    assert {p: p.stat().st_mtime_ns for p in (grid / "rankings").glob("*/shard-*.pt")} == ranked  # read, not redone
    assert not (grid / "maps").exists()  # no float maps of the splits were made
    written = sorted(p.parent.name.split("-")[0] for p in (grid / "shards").glob("*/manifest.json"))
    assert written == ["test"] * 3 + ["train"] * 3  # three cells, each split written once as shards

    memory = _grid(tmp_path, run, "memory", in_memory=True)
    evaluate.main(["roar", "--config", str(memory)])
    (reference,) = (tmp_path / "memory").iterdir()
    assert not (reference / "shards").exists()
    got, expected = _records(grid), _records(reference)
    assert sorted(got) == ["clean-t00", "random-t50", "saliency-t50"]
    assert got == expected


def test_the_t0_cell_needs_no_ranking(tmp_path):
    """The shared t = 0 cell from shards: ROAR serves the images unchanged and KAR the training
    mean everywhere, as remove_top does in memory, without a ranking pass."""
    import torch

    from datamodules.images import ImageFolderDataModule
    from datamodules.roar import RemoveAndRetrainDataModule
    from evaluators.protocols.roar.grid import CLEAN, Cell, RoarGrid, streamed_data

    root = tmp_path / "images"
    make_folder(root, n=2, size=8)
    for keep in (False, True):
        files = ImageFolderDataModule(root=str(root), cache_dir=str(tmp_path / "c"), in_memory=False)
        memory = ImageFolderDataModule(root=str(root), cache_dir=str(tmp_path / "c"), in_memory=True)
        grid = RoarGrid(estimators={"saliency": {}}, keep=keep)
        streamed = streamed_data(None, files, grid, Cell(CLEAN, 0.0), tmp_path / "rankings", tmp_path / "shards")
        streamed.prepare_data()
        maps = {s: torch.rand(6, 3, 8, 8) for s in ("train", "test")}
        reference = RemoveAndRetrainDataModule(memory, maps["train"], maps["test"], 0.0, keep=keep)
        for split in ("train", "test"):
            images, labels = streamed.stored_split(split)
            expected, expected_labels = reference.stored_split(split)
            assert torch.equal(images[torch.arange(len(images))], expected) and torch.equal(labels, expected_labels)
        assert not (tmp_path / "rankings").exists()
