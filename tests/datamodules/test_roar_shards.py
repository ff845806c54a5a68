"""ROAR's modified image splits written as shards and served from them (datamodules/roar_shards.py):
equal to the in-memory path, resumable after a kill -9 with the same bytes, keyed by their
input, and read by two DDP processes through the torchrun recipe (docs/roar_torchrun.sh)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules.images import ImageFolderDataModule
from datamodules.roar import ModifiedDataModule, RemoveAndRetrainDataModule, remove_top, training_fill
from datamodules.roar_shards import ShardedDataModule, ShardImages, roar_datamodule, stored_size, write_modified_split
from foundation.errors import InputError
from tests.datamodules.test_images import make_folder
from tests.support import ROOT


def _data(root: Path, cache: Path, in_memory: bool) -> ImageFolderDataModule:
    return ImageFolderDataModule(root=str(root), cache_dir=str(cache), in_memory=in_memory, batch_size=4,
                                 eval_batch_size=5, random_crop_padding=1, horizontal_flip=True, seed=3)  # fmt: skip


def _removal(data, fraction=0.5):
    """Random maps of both splits and the ``modify`` functions removing their top ``fraction``."""
    generator = torch.Generator().manual_seed(0)
    maps = {s: torch.rand(stored_size(data, s), *data.image_shape, generator=generator) for s in ("train", "test")}
    fill = training_fill(data)

    def modify(split):
        return lambda x, index: remove_top(x, maps[split][index], fraction, fill, seed=1, index=index)

    return maps, {s: modify(s) for s in maps}


@pytest.fixture
def folder(tmp_path):
    make_folder(tmp_path / "data", n=4, size=8)  # 12 train and 12 test images of 3 classes
    return tmp_path / "data"


def test_shards_serve_the_in_memory_batches(folder, tmp_path):
    """The shards of a folder read image by image from its files (in_memory=False), 5 images a
    shard and 3 a chunk, hold exactly the images and labels that RemoveAndRetrainDataModule
    modifies in memory, and serve the same training batches (order, crop, flip) in two epochs
    and the same test batches."""
    memory = _data(folder, tmp_path / "cache", True)
    maps, modify = _removal(memory)
    reference = RemoveAndRetrainDataModule(memory, maps["train"], maps["test"], 0.5, seed=1)
    files = _data(folder, tmp_path / "cache", False)
    sharded = roar_datamodule(files, modify, {"train": "random t=0.5", "test": "random t=0.5"}, tmp_path / "shards",
                              shard_images=5, chunk=3)  # fmt: skip
    assert isinstance(sharded, ShardedDataModule) and isinstance(roar_datamodule(memory, modify), ModifiedDataModule)
    sharded.prepare_data()
    for split in ("train", "test"):
        images, labels = sharded.stored_split(split)
        expected, expected_labels = reference.stored_split(split)
        assert torch.equal(images[torch.arange(len(images))], expected) and torch.equal(labels, expected_labels)
        assert not torch.equal(expected, memory.stored_split(split)[0])  # something was removed
    ours, theirs = sharded.train_dataloader(), reference.train_dataloader()
    for epoch in (0, 1):
        ours.sampler.set_epoch(epoch)
        theirs.sampler.set_epoch(epoch)
        pairs = list(zip(ours, theirs, strict=True))
        assert len(pairs) == 3 and all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in pairs)
    tests = list(zip(sharded.test_dataloader(), reference.test_dataloader(), strict=True))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in tests)


def _files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _killed_write(data, modify, out):
    def dying(x, index):  # killed while shard 1 (images 5-9) is half written
        if 7 in index.tolist():
            os.kill(os.getpid(), signal.SIGKILL)
        return modify(x, index)

    write_modified_split(data, "train", dying, out, "random t=0.5", shard_images=5, chunk=3)


def test_kill_9_then_resume_writes_the_uninterrupted_bytes(folder, tmp_path):
    """A writer killed (SIGKILL) in the middle of a shard leaves the finished shard and a temporary
    file; the rerun keeps the finished shard (same inode, same modification time), removes the
    dead writer's temporary file (not another machine's) and ends with the files, byte for byte,
    of an uninterrupted write and of two processes writing shards 0/2 and 1/2."""
    data = _data(folder, tmp_path / "cache", True)
    _, modify = _removal(data)
    whole = write_modified_split(data, "train", modify["train"], tmp_path / "whole", "random t=0.5", shard_images=5,
                                 chunk=3)  # fmt: skip
    killed = tmp_path / "killed"
    child = multiprocessing.get_context("fork").Process(target=_killed_write, args=(data, modify["train"], killed))
    child.start()
    child.join()
    assert child.exitcode == -signal.SIGKILL
    folder_killed = tmp_path / "killed" / whole.name
    left = sorted(p.name for p in folder_killed.iterdir())
    assert left[1:] == ["00000.json", "00000.npy", "manifest.json"] and left[0].startswith(".00001.npy.tmp-")
    finished = (folder_killed / "00000.npy").stat()
    elsewhere = folder_killed / ".00001.npy.tmp-another-machine-1"  # a writer on another machine: left alone
    elsewhere.write_bytes(b"")
    write_modified_split(data, "train", modify["train"], tmp_path / "killed", "random t=0.5", shard_images=5, chunk=3)
    elsewhere.unlink()
    again = (folder_killed / "00000.npy").stat()
    assert (again.st_ino, again.st_mtime_ns) == (finished.st_ino, finished.st_mtime_ns)
    assert _files(folder_killed) == _files(whole) and len(_files(whole)) == 7  # 3 shards × 2 files + manifest
    for i in (1, 0):
        write_modified_split(data, "train", modify["train"], tmp_path / "two", "random t=0.5", shard=(i, 2),
                             shard_images=5, chunk=3)  # fmt: skip
    assert _files(tmp_path / "two" / whole.name) == _files(whole)
    stored = np.load(whole / "00001.npy")
    x, _ = data.stored_split("train")
    assert np.array_equal(stored, modify["train"](x[5:10], torch.arange(5, 10)).numpy())


def test_a_changed_input_or_modification_writes_another_folder(folder, tmp_path):
    """The folder's key follows the stored images and the modification's name: an edited image
    file or another name write a new folder and leave the old one as it was."""
    data = _data(folder, tmp_path / "cache", False)
    _, modify = _removal(_data(folder, tmp_path / "cache", True))
    first = write_modified_split(data, "test", modify["test"], tmp_path / "out", "random t=0.5")
    before = _files(first)
    other = write_modified_split(data, "test", modify["test"], tmp_path / "out", "random t=0.7")
    image = next((folder / "test").rglob("*.png"))
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(image)
    os.utime(image, ns=(1, 1))
    edited = write_modified_split(_data(folder, tmp_path / "cache", False), "test", modify["test"], tmp_path / "out",
                                  "random t=0.5")  # fmt: skip
    assert len({first, other, edited}) == 3 and _files(first) == before


def test_bad_modification_and_unfinished_folder_are_clear_errors(folder, tmp_path):
    data = _data(folder, tmp_path / "cache", True)
    with pytest.raises(InputError, match=r"modify returned torch.float32 .* expected uint8 images"):
        write_modified_split(data, "train", lambda x, index: x.float(), tmp_path / "bad", "float")
    part = write_modified_split(data, "train", lambda x, index: x, tmp_path / "part", "same", shard=(0, 3),
                                shard_images=4)  # fmt: skip
    with pytest.raises(InputError, match=r"shard\(s\) \[1, 2\] of 3 not written yet"):
        ShardImages(part)
    with pytest.raises(InputError, match="expected options name and out_dir"):
        roar_datamodule(_data(folder, tmp_path / "cache", False), {"train": lambda x, i: x, "test": lambda x, i: x})


def test_the_tools_fill_is_the_in_memory_training_mean(folder, tmp_path):
    """ROAR's streamed fill (the tools' and the grid's), from the normalisation's statistics of the
    whole split or summed a chunk at a time over a subset, is training_fill of the split held in memory."""
    from evaluators.protocols.roar.rankings import streamed_fill

    for subset in (None, {"train": 7}):
        memory = ImageFolderDataModule(root=str(folder), cache_dir=str(tmp_path / "cache"), subset=subset)
        files = ImageFolderDataModule(root=str(folder), cache_dir=str(tmp_path / "cache"), subset=subset,
                                      in_memory=False)  # fmt: skip
        assert torch.equal(streamed_fill(files, chunk=3), training_fill(memory))
    whole = ImageFolderDataModule(root=str(folder), cache_dir=str(tmp_path / "cache"))
    assert not torch.equal(training_fill(memory), training_fill(whole))  # the subset's mean is another


OPTIONS = ["--arch", "small_cnn", "--batch_size", "4", "--shard_images", "5", "--accelerator", "cpu", "--max_epochs",
           "2", "--random_crop_padding", "1", "--horizontal_flip"]  # fmt: skip


def _env(port: int) -> dict:
    return {**os.environ, "NPROC": "2", "MASTER_PORT": str(port), "PYTHON": str(ROOT / ".venv" / "bin" / "python"),
            "OMP_NUM_THREADS": "1"}  # fmt: skip


def _check_ranks(record: dict) -> None:
    """Each epoch the two ranks trained on disjoint halves of the 12 training images that together
    cover them, in another order in the second epoch; the accuracy is over the 12 test images."""
    assert record["world_size"] == 2 and record["test_images"] == 12
    ranks = record["seen"]
    assert len(ranks) == 2 and all(len(epochs) == 2 for epochs in ranks)
    for epoch in (0, 1):
        first, second = ranks[0][epoch], ranks[1][epoch]
        assert len(first) == len(second) == 6 and sorted(first + second) == list(range(12))
    assert ranks[0][0] != ranks[0][1]


def test_two_gloo_processes_train_one_cell_from_the_shards(folder, tmp_path):
    """tools/roar_shards.py fit under torchrun --nproc_per_node=2 (Lightning DDP, gloo) on shards
    written here: each rank reads its own half of every epoch (26 s at load 1)."""
    args = ["--root", str(folder), "--out", str(tmp_path / "shards"), "--cache_dir", str(tmp_path / "cache")]
    from tools.roar_shards import main

    main(["write", *args, *OPTIONS])
    assert len(list((tmp_path / "shards").glob("*/00002.json"))) == 2  # 12 images a split, 5 a shard
    command = [str(ROOT / ".venv" / "bin" / "python"), "-m", "torch.distributed.run", "--nproc_per_node=2",
               "--master_port=29516", "tools/roar_shards.py", "fit", *args, *OPTIONS, "--devices", "2", "--strategy",
               "ddp", "--result", str(tmp_path / "cell.json")]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=_env(29516), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    _check_ranks(json.loads((tmp_path / "cell.json").read_text()))


def _recipe(folder: Path, tmp_path: Path, port: int) -> dict:
    """docs/roar_torchrun.sh's one cell: two writers, then two gloo DDP processes (2 epochs)."""
    result = tmp_path / f"cell-{port}.json"
    subprocess.run(["bash", "docs/roar_torchrun.sh", "cell", str(folder), str(tmp_path / "shards"), "--cache_dir",
                    str(tmp_path / "cache"), *OPTIONS, "--result", str(result)],
                   cwd=ROOT, env=_env(port), check=True, capture_output=True, timeout=600)  # fmt: skip
    return json.loads(result.read_text())


@pytest.mark.slow
def test_torchrun_recipe_is_deterministic(folder, tmp_path):
    """docs/roar_torchrun.sh with NPROC=2 on the CPU, twice (the second run finds the shards
    written): the same images per rank and epoch, the same trained weights and accuracy (about
    a minute: two writer processes and two training processes, twice)."""
    first = _recipe(folder, tmp_path, 29518)
    _check_ranks(first)
    assert _recipe(folder, tmp_path, 29519) == first
