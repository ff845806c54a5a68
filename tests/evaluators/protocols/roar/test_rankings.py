"""The sharded, resumable ranking pass of ROAR over image folders (evaluators.protocols.roar.rankings):
equal to remove_top on the in-memory maps, shard-split free, resumable after kill -9, keyed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules.images import ImageFolderDataModule
from datamodules.roar import FRACTIONS, RemoveAndRetrainDataModule, remove_top
from foundation.errors import InputError
from evaluators.protocols.roar import grid as grid_module
from evaluators.protocols.roar import maps as roar_maps
from evaluators.protocols.roar.grid import RoarGrid
from evaluators.protocols.roar.rankings import RankingStore, ranking_pass, removal_order, streamed_fill
from lightning_modules.image_classifier import create_image_model
from tests.support import ROOT

CLASSES = ("a", "b", "c")


def make_folder(root: Path, n: int = 4, size: int = 12) -> Path:
    """12x12 PNGs under root/{train,test}/<class>/; images 0 and 3 of a class one flat colour (Sobel maps of ties)."""
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for name in CLASSES:
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                if i % 3 == 0:
                    pixels[:] = pixels[0, 0]
                Image.fromarray(pixels).save(root / split / name / f"{i:02d}.png")
    return root


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return create_image_model("small_cnn", len(CLASSES), 3).eval()


def folder(root: Path, tmp_path: Path, in_memory: bool) -> ImageFolderDataModule:
    return ImageFolderDataModule(str(root), in_memory=in_memory, cache_dir=str(tmp_path / "image-cache"))


def shard_bytes(store: RankingStore) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(store.root.iterdir())}


@pytest.mark.parametrize("unit", ["element", "pixel"])
@pytest.mark.parametrize("square", [True, False])
def test_removal_order_is_remove_tops_choice_with_ties(unit, square):
    """The first k of the order are the units remove_top replaces, for every k: quantised maps
    (many ties), constant maps (all tied) and distinct maps, against remove_top itself."""
    gen = torch.Generator().manual_seed(1)
    scores = torch.randint(-3, 4, (6, 3, 5, 5), generator=gen).float()
    scores[1] = 0.5
    scores[2] = torch.randn(3, 5, 5, generator=gen)
    index = torch.tensor([7, 3, 11, 0, 2, 5])
    order = removal_order(scores, unit, square, seed=4, index=index)
    n = order.shape[1]
    x = torch.zeros(scores.shape, dtype=torch.uint8)
    for k in range(n + 1):
        replaced = remove_top(x, scores, k / n, 1, unit, square, seed=4, index=index)
        replaced = replaced[:, :1].reshape(6, -1) if unit == "pixel" else replaced.reshape(6, -1)
        assert torch.equal(order[:, :k].sort(1).values, replaced.bool().nonzero()[:, 1].view(6, k)), k


@pytest.mark.parametrize("estimator, from_files", [("saliency", True), ("sobel", True), ("sobel", False)])
def test_folder_pass_modifies_as_the_in_memory_path(tmp_path, estimator, from_files):
    """Files read in chunks (or the in-memory split) and ranked give, for every fraction, both units,
    ROAR and KAR, the images RemoveAndRetrainDataModule makes from dataset_maps of the split in memory."""
    root = make_folder(tmp_path / "images")
    model, files, memory = tiny_model(), folder(root, tmp_path, not from_files), folder(root, tmp_path, True)
    stores = {store: ranking_pass(model, files, estimator, "test", tmp_path / "rankings", seed=3, chunk=2,
                                  shard_size=4, units=("element", "pixel"), store=store)
              for store in ("levels", "order")}  # fmt: skip
    assert stores["levels"].n_shards == 3 and stores["levels"].computed == [0, 1, 2]
    maps = roar_maps.dataset_maps(model, memory, estimator, "test", tmp_path / "maps", seed=3, chunk=2,
                                  progress=False)  # fmt: skip
    distinct = torch.tensor([m.unique().numel() for m in maps])
    assert estimator == "saliency" or (distinct <= 3).sum() == 6  # the flat images' Sobel maps: 432 units tied
    index = torch.arange(12)
    for unit in ("element", "pixel"):
        for keep in (False, True):
            for fraction in FRACTIONS:
                roar = RemoveAndRetrainDataModule(memory, maps, maps, fraction, unit, keep=keep, seed=3)
                expected, _ = roar.stored_split("test")
                clean = memory.stored_split("test")[0]
                for store in stores.values():
                    modified = store.modifier(fraction, roar.fill, unit, keep)(clean, index)
                    assert torch.equal(modified, expected), (store.store, unit, keep, fraction)
    assert torch.equal(streamed_fill(files, chunk=5), roar.fill)  # the training mean read 5 images at a time
    # the order store is exact beyond the grid (up to its largest fraction); levels refuse it
    roar = RemoveAndRetrainDataModule(memory, maps, maps, 0.25, "pixel", seed=3)
    modify = stores["order"].modifier(0.25, roar.fill, "pixel")
    assert torch.equal(modify(clean[5:9], index[5:9]), roar.stored_split("test")[0][5:9])
    with pytest.raises(InputError, match="fractions"):
        stores["levels"].mask(index, 0.25, "pixel")


def test_sharded_passes_equal_one_pass_and_read_nothing_missing(tmp_path):
    """Two shard processes' files (k = 2) are byte for byte one process's, also for a noise
    estimator (SmoothGrad draws per image); reading a shard not yet computed is refused."""
    root = make_folder(tmp_path / "images")
    model, files = tiny_model(), folder(root, tmp_path, False)
    options = {"seed": 1, "chunk": 2, "shard_size": 2, "nt_samples": 2, "units": ("pixel",)}
    half = ranking_pass(model, files, "smoothgrad", "train", tmp_path / "two", shard=(0, 2), **options)
    assert half.computed == [0, 2, 4] and half.missing() == [1, 3, 5]
    with pytest.raises(InputError, match="shard-000001.pt"):
        half.mask(torch.tensor([0, 3]), 0.5, "pixel")
    ranking_pass(model, files, "smoothgrad", "train", tmp_path / "two", shard=(1, 2), **options)
    one = ranking_pass(model, files, "smoothgrad", "train", tmp_path / "one", **options)
    assert one.root.name == half.root.name and shard_bytes(one) == shard_bytes(half)
    assert len(shard_bytes(one)) == 7  # the manifest and 6 shards of 2 images


def test_launched_ranks_split_the_pass_and_keep_live_writers_files(tmp_path, monkeypatch):
    """A process of a launched group (RANK/WORLD_SIZE, as torchrun sets them) computes its own
    shards first, then those still missing from the last down, not the whole pass again; the
    files equal one process's. The end-of-pass clean-up removes a dead writer's temporary file
    and keeps a live process's and another machine's (a rank writing the same shard)."""
    root = make_folder(tmp_path / "images")
    model, files = tiny_model(), folder(root, tmp_path, False)
    calls = []

    def spy(*args, **kwargs):
        store = ranking_pass(*args, **kwargs)
        calls.append((kwargs["shard"], kwargs["descending"], store.computed))
        return store

    monkeypatch.setattr(grid_module, "ranking_pass", spy)
    grid = RoarGrid(estimators={"saliency": {}}, fractions=[0.5], retrainings=1, unit="pixel")
    for name, value in {"TORCHELASTIC_RUN_ID": "test", "RANK": "1", "WORLD_SIZE": "2"}.items():  # as torchrun sets
        monkeypatch.setenv(name, value)
    ranked = grid_module.ranking_store(model, files, grid, "saliency", {}, "train", tmp_path / "two", shard_size=2)
    assert calls == [((1, 2), False, [1, 3, 5]), (None, True, [4, 2, 0])]
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    calls.clear()
    alone = grid_module.ranking_store(model, files, grid, "saliency", {}, "train", tmp_path / "one", shard_size=2)
    assert calls == [(None, False, [0, 1, 2, 3, 4, 5])] and shard_bytes(alone) == shard_bytes(ranked)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    names = {"live": f".shard-000000.pt.tmp-{host}-{os.getpid()}", "dead": f".shard-000000.pt.tmp-{host}-{dead.pid}",
             "elsewhere": ".shard-000000.pt.tmp-another-machine-1"}  # fmt: skip
    for name in names.values():
        (ranked.root / name).write_bytes(b"")
    grid_module.ranking_store(model, files, grid, "saliency", {}, "train", tmp_path / "two", shard_size=2)
    assert sorted(p.name for p in ranked.root.glob(".*.tmp-*")) == sorted([names["live"], names["elsewhere"]])


def test_changed_model_or_folder_misses_and_bad_shards_are_redone(tmp_path):
    root = make_folder(tmp_path / "images")
    model, files = tiny_model(), folder(root, tmp_path, False)
    first = ranking_pass(model, files, "saliency", "test", tmp_path / "r", chunk=2, shard_size=4)
    again = ranking_pass(model, files, "saliency", "test", tmp_path / "r", chunk=2, shard_size=4)
    assert again.root == first.root and again.computed == []
    first.shard_path(1).write_bytes(first.shard_path(1).read_bytes()[:100])  # a truncated shard
    assert ranking_pass(model, files, "saliency", "test", tmp_path / "r", chunk=2, shard_size=4).computed == [1]
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    other_model = ranking_pass(model, files, "saliency", "test", tmp_path / "r", chunk=2, shard_size=4)
    assert other_model.root != first.root and other_model.computed == [0, 1, 2]
    Image.new("RGB", (12, 12), (9, 9, 9)).save(root / "test" / "b" / "01.png")
    other_folder = ranking_pass(model, folder(root, tmp_path, False), "saliency", "test", tmp_path / "r", chunk=2,
                                shard_size=4)  # fmt: skip
    assert other_folder.root not in (first.root, other_model.root) and other_folder.computed == [0, 1, 2]
    other_grid = ranking_pass(model, folder(root, tmp_path, False), "saliency", "test", tmp_path / "r", chunk=2,
                              shard_size=4, fractions=(0.2, 0.4))  # fmt: skip
    assert other_grid.root != other_folder.root
    with pytest.raises(InputError, match="multiple of chunk"):
        ranking_pass(model, files, "saliency", "test", tmp_path / "r", chunk=3, shard_size=4)


CHILD = """
import sys, time
import torch
from datamodules.images import ImageFolderDataModule
from evaluators.protocols.roar.rankings import ranking_pass
from lightning_modules.image_classifier import create_image_model
torch.manual_seed(0)
model = create_image_model("small_cnn", 3, 3).eval()
model.register_forward_hook(lambda *args: time.sleep(0.4))  # slow, the state dict unchanged
files = ImageFolderDataModule(sys.argv[1], in_memory=False, cache_dir=sys.argv[2])
ranking_pass(model, files, "saliency", "train", sys.argv[3], chunk=1, shard_size=2, units=("element", "pixel"))
"""


def test_kill_9_then_resume_ends_identical_without_recomputing(tmp_path):
    root = make_folder(tmp_path / "images")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cache = tmp_path / "resumed"
    child = subprocess.Popen([sys.executable, str(script), str(root), str(tmp_path / "image-cache"), str(cache)],
                             cwd=ROOT, env=env, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(cache.glob("*.rankings/shard-000000.pt")):
        assert child.poll() is None, child.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stderr.close()
    (folder_path,) = cache.glob("*.rankings")
    done = {p.name: p.stat().st_mtime_ns for p in folder_path.glob("shard-*.pt")}
    assert 1 <= len(done) < 6
    model, files = tiny_model(), folder(root, tmp_path, False)
    options = {"chunk": 1, "shard_size": 2, "units": ("element", "pixel")}
    resumed = ranking_pass(model, files, "saliency", "train", cache, **options)
    assert resumed.root == folder_path and len(resumed.computed) == 6 - len(done)
    assert all(resumed.shard_path(j).name not in done for j in resumed.computed)
    assert {n: resumed.root.joinpath(n).stat().st_mtime_ns for n in done} == done
    whole = ranking_pass(model, files, "saliency", "train", tmp_path / "whole", **options)
    assert shard_bytes(resumed) == shard_bytes(whole)  # the same files (a killed write's temporary removed)


def test_bad_input_is_one_clear_error(tmp_path):
    root = make_folder(tmp_path / "images")
    model, files = tiny_model(), folder(root, tmp_path, False)
    store = ranking_pass(model, files, "saliency", "test", tmp_path / "r", chunk=2, shard_size=4)
    images = files.stored_images("test", torch.arange(3))[0]
    with pytest.raises(InputError, match="unit='pixel'"):
        store.mask(torch.arange(3), 0.5, "pixel")
    with pytest.raises(InputError, match="fill"):
        store.modifier(0.5, [1.5, 2, 3])
    with pytest.raises(InputError, match="uint8"):
        store.modifier(0.5, 0)(images.float(), torch.arange(3))
    with pytest.raises(InputError, match="0 … 11"):
        store.modifier(0.5, 0)(images, torch.tensor([0, 1, 12]))
    with pytest.raises(InputError, match="store"):
        ranking_pass(model, files, "saliency", "test", tmp_path / "r", store="float16")
    with pytest.raises(InputError, match="no readable manifest.json"):
        RankingStore(tmp_path)


def test_evaluate_py_roar_rankings_only_fills_the_shards(tmp_path):
    """``evaluate.py roar --rankings_only --shard i/k`` on a train.py image run: the two shards'
    processes fill every ranking shard file of both splits, equal to ranking_pass with the run's
    model; no cell is trained."""
    import evaluate
    from evaluators.inputs.runs import load_run
    from tests.support.helpers import tiny_image_run

    run = tiny_image_run(make_folder(tmp_path / "images"), tmp_path)
    config = tmp_path / "roar.yaml"
    config.write_text(f"run: {run}\nestimators: {{saliency: {{}}}}\nfractions: [0.0, 0.5]\nunit: pixel\n"
                      f"data: {{in_memory: false}}\nlog_to: none\ndevice: cpu\noutput_dir: {tmp_path / 'roar'}\n")
    for i in (1, 0):
        assert evaluate.main(["roar", "--config", str(config), "--rankings_only", "--shard", f"{i}/2",
                              "--rankings_shard_size", "4"]) == {}  # fmt: skip
        (grid,) = (tmp_path / "roar").iterdir()
        shards = sorted(p.name for p in (grid / "rankings").glob("*/shard-*.pt"))
        assert shards == (["shard-000001.pt"] * 2 if i else sorted(f"shard-00000{j}.pt" for j in (0, 1, 2) * 2))
    assert not (grid / "cells").exists() and not (grid / "roar.json").exists()
    folders = sorted((grid / "rankings").iterdir())
    assert [f.name.split("-")[0] for f in folders] == ["test", "train"]
    model, data, _ = load_run(run, "last.ckpt", data_options={"in_memory": False})
    for split, found in zip(("test", "train"), folders):
        direct = ranking_pass(model, data, "saliency", split, tmp_path / "direct", 0, 4, 4, units=("pixel",),
                              fractions=(0.0, 0.5))  # fmt: skip
        assert direct.root.name == found.name and shard_bytes(direct) == shard_bytes(RankingStore(found))
