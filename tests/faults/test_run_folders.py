"""Issue 41, items 2 and 3: a run folder belongs to one process (two train.py with the same
--run_name at once; a lock left by a kill -9'd process never blocks --resume), and every file is
written whole or not at all (a full disk during a run, a population chunk, the aggregation
protocol and ROAR: rc 2, one line naming the folder, the previous files intact, a resume after
freeing space continues). The disk-full cases mount a small tmpfs, which needs root."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import yaml

from foundation.errors import DiskFull, InputError
from foundation.run_folders import LOCK, hold, new_folder, release
from tests.support.helpers import ROOT, assert_one_line_error, run_in_process

FILL_ENV = "RELEXP_TEST_FILL"  # the mounted tmpfs that FillDisk fills


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill ``disk`` up to ``leave`` free bytes (whole pages) with ``<disk>/filler``; its path."""
    spare = disk / "spare"
    if leave:
        spare.write_bytes(b"\0" * leave)
    filler = disk / "filler"
    handle = open(filler, "ab")
    try:
        while True:
            handle.write(b"\0" * 4096)
            handle.flush()
    except OSError:
        pass
    finally:
        try:
            handle.close()
        except OSError:
            pass
    spare.unlink(missing_ok=True)
    return filler


class FillDisk(pl.Callback):
    """At the end of epoch ``epoch`` of a Trainer whose folder ends with ``chunk``, before Lightning's
    checkpoint of that epoch, fill the tmpfs named by RELEXP_TEST_FILL (a disk that fills mid-run)."""

    def __init__(self, epoch: int = 1, chunk: str = "") -> None:
        self.epoch, self.chunk = epoch, chunk

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        disk = os.environ.get(FILL_ENV)
        if disk and trainer.current_epoch == self.epoch and trainer.default_root_dir.endswith(self.chunk):
            fill(Path(disk))


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs mounted for the test (root only; else skipped with the reason)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs (a disk to fill) needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], capture_output=True,
                             text=True)  # fmt: skip
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def loads(checkpoint: Path) -> int:
    """The epoch a checkpoint was saved at; it must read whole."""
    return torch.load(checkpoint, weights_only=True, map_location="cpu")["epoch"]


TRAIN = ["--log_to", "none", "--trainer.enable_progress_bar", "false"]


# --- one process per folder -------------------------------------------------------------


def test_two_trainings_with_one_run_name_and_a_killed_holder(tmp_path):
    """A second train.py --run_name X while the first still trains into X stops at once, naming X
    and the first's pid; once the first is killed with -9, its lock blocks nothing: --resume goes on."""
    out, log = tmp_path / "runs", tmp_path / "first.log"
    run = out / "german" / "x"
    with log.open("w") as handle:
        first = subprocess.Popen([sys.executable, "train.py", *TRAIN, "--output_dir", str(out), "--run_name", "x",
                                  "--trainer.max_epochs", "100000"],
                                 cwd=ROOT, stdout=handle, stderr=handle)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (run / "checkpoints" / "last.ckpt").exists():
            assert first.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        second = run_in_process("train.py", *TRAIN, "--output_dir", str(out), "--run_name", "x",
                                "--trainer.max_epochs", "1", "--seed_everything", "7")  # fmt: skip
        assert_one_line_error(second, f"{run}: in use by process {first.pid}")
        resumed = run_in_process("train.py", "--resume", str(run), "--trainer.max_epochs", "3")
        assert_one_line_error(resumed, f"{run}: in use by process {first.pid}")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert not (run / "metrics.json").exists() and [p.name for p in (out / "german").iterdir()] == ["x"]
    seed = yaml.safe_load((run / "config.yaml").read_text())["seed_everything"]
    epochs = loads(run / "checkpoints" / "last.ckpt") + 2
    resumed = run_in_process("train.py", "--resume", str(run), "--trainer.max_epochs", str(epochs))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((run / "metrics.json").read_text())["run_dir"] == str(run)
    assert seed != 7 and yaml.safe_load((run / "config.yaml").read_text())["seed_everything"] == seed


def _hold_then_wait(folder: str, ready, done) -> None:
    hold(Path(folder))
    ready.set()
    done.wait(60)


def _new_folder_then_wait(path: str, named: bool, results, barrier, done) -> None:
    barrier.wait(10)
    try:
        results.put(str(new_folder(Path(path), stop_if_in_use=named)))
    except InputError as err:
        results.put(f"error: {err}")
    done.wait(60)


def test_folders_made_at_once_are_never_shared(tmp_path):
    """Four processes that ask for one new folder at the same moment: four folders (x, x-2, ...); with
    a name the user chose, one gets it and the others stop naming it and its holder."""
    fork = multiprocessing.get_context("fork")
    for named in (False, True):
        results, barrier, done = fork.Queue(), fork.Barrier(4), fork.Event()
        path = tmp_path / str(named) / "x"
        workers = [fork.Process(target=_new_folder_then_wait, args=(str(path), named, results, barrier, done))
                   for _ in range(4)]  # fmt: skip
        for w in workers:
            w.start()
        got = sorted(results.get(timeout=30) for _ in workers)
        done.set()
        for w in workers:
            w.join()
        if named:
            assert got[0] == str(path) and all(g.startswith(f"error: {path}: in use by process ") for g in got[1:])
        else:
            assert got == sorted(str(path.with_name(n)) for n in ("x", "x-2", "x-3", "x-4"))
        assert not [p for p in path.parent.iterdir() if ".tmp-" in p.name]  # no staging folder left


def test_a_held_protocol_folder_stops_a_second_resume_until_its_holder_is_killed(tmp_path):
    """``evaluate.py <protocol> --resume`` holds its folder like train.py; a holder killed with -9
    leaves a lock file that blocks nothing."""
    folder = tmp_path / "consistency-1"
    folder.mkdir()
    fork = multiprocessing.get_context("fork")
    ready, done = fork.Event(), fork.Event()
    holder = fork.Process(target=_hold_then_wait, args=(str(folder), ready, done))
    holder.start()
    assert ready.wait(30)
    with pytest.raises(InputError, match=f"{folder}: in use by process {holder.pid}"):
        hold(folder)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join()
    assert (folder / LOCK).read_text().split() == [str(holder.pid)]
    try:
        hold(folder)
        assert (folder / LOCK).read_text().split() == [str(os.getpid())]
    finally:
        release(folder)


# --- a full disk ------------------------------------------------------------------------


def test_full_disk_during_a_single_run_keeps_the_last_checkpoint(small_disk, monkeypatch):
    run = small_disk / "german" / "single"
    monkeypatch.setenv(FILL_ENV, str(small_disk))
    args = [*TRAIN, "--output_dir", str(small_disk), "--run_name", "single", "--trainer.max_epochs", "3",
            "--trainer.callbacks+=tests.faults.test_run_folders.FillDisk"]  # fmt: skip
    full = run_in_process("train.py", *args)
    assert_one_line_error(full, f"out of disk space in {run / 'checkpoints'}; the write needed ")
    assert loads(run / "checkpoints" / "last.ckpt") == 0  # epoch 0's, whole
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["last.ckpt"]  # no temporary left


def test_full_disk_at_a_population_chunk_checkpoint_keeps_the_last_one_and_resumes(small_disk, monkeypatch):
    run = small_disk / "german" / "pop"
    chunk = run / "chunks" / "chunk-000"
    monkeypatch.setenv(FILL_ENV, str(small_disk))
    args = ["--config", "configs/population.yaml", "--model.size", "2", "--population.chunk_size", "2", *TRAIN,
            "--output_dir", str(small_disk), "--run_name", "pop", "--trainer.max_epochs", "2",
            "--trainer.callbacks+=" + json.dumps({"class_path": "tests.faults.test_run_folders.FillDisk",
                                                  "init_args": {"chunk": "chunk-000"}})]  # fmt: skip
    full = run_in_process("train.py", *args)
    assert_one_line_error(full, f"out of disk space in {chunk}; the write needed ")
    assert loads(chunk / "last.ckpt") == 0
    (small_disk / "filler").unlink()
    monkeypatch.delenv(FILL_ENV)
    resumed = run_in_process("train.py", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((run / "metrics.json").read_text())["members_trained"] == 2


@pytest.fixture(scope="module")
def german_run(tmp_path_factory) -> Path:
    """A German Credit MLP trained for one epoch: its run folder."""
    import train

    out = tmp_path_factory.mktemp("runs")
    metrics = train.main([*TRAIN, "--trainer.max_epochs", "1", "--output_dir", str(out), "--run_name", "g"])
    return Path(metrics["run_dir"])


def test_full_disk_during_the_aggregation_protocol(small_disk, tmp_path, german_run):
    config = tmp_path / "agg.yaml"
    config.write_text(json.dumps({
        "run": str(german_run), "n_inputs": 4, "explainers": {"saliency": {}},
        "aggregators": {"mean": {}}, "normalisations": ["z"], "steps": 4, "log_to": "none", "device": "cpu",
        "output_dir": str(small_disk / "out"), "n_grid": 2,
    }))  # fmt: skip
    (small_disk / "out").mkdir()
    fill(small_disk)
    full = run_in_process("evaluate.py", "aggregation", "--config", str(config))
    assert_one_line_error(full, f"out of disk space in {small_disk / 'out'}, 0 bytes free")
    assert list((small_disk / "out").iterdir()) == []  # no folder without its config
    (small_disk / "filler").unlink()
    fill(small_disk, leave=3 * 4096)  # the folder, its lock and config.yaml: then full
    full = run_in_process("evaluate.py", "aggregation", "--config", str(config))
    (report,) = (small_disk / "out").iterdir()
    assert_one_line_error(full, f"out of disk space in {report}")
    (small_disk / "filler").unlink()
    resumed = run_in_process("evaluate.py", "aggregation", "--resume", str(report))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (report / "aggregation.json").is_file()


def test_full_disk_during_a_roar_grid(small_disk, tmp_path, german_run):
    """A tabular ROAR grid whose disk fills at its first cache: one line naming the folder; the same
    command once space is freed finishes the grid."""
    config = tmp_path / "roar.yaml"
    config.write_text(f"run: {german_run}\nestimators: {{saliency: {{}}, random: {{}}}}\nfractions: [0.0, 0.5]\n"
                      "retrainings: 2\ntrainer: {max_epochs: 1, accelerator: cpu}\nlog_to: none\ndevice: cpu\n"
                      f"output_dir: {small_disk / 'roar'}\n")  # fmt: skip
    fill(small_disk, leave=2 * 4096)  # the grid's folder and config.yaml: then full
    full = run_in_process("evaluate.py", "roar", "--config", str(config))
    (grid,) = (small_disk / "roar").iterdir()
    assert_one_line_error(full, f"out of disk space in {grid}")
    assert yaml.safe_load((grid / "config.yaml").read_text())["run"] == str(german_run)
    (small_disk / "filler").unlink()
    again = run_in_process("evaluate.py", "roar", "--config", str(config))
    assert again.returncode == 0, again.stderr[-2000:]
    assert len(json.loads((grid / "roar.json").read_text())["rows"]) == 4


def test_full_disk_under_a_roar_shard_is_an_error_not_a_bus_error(small_disk):
    """A ROAR shard of images is written through a memory map: on a full disk its blocks are
    allocated first, so the write is one error naming the folder and the size, not SIGBUS."""
    from datamodules.roar_shards import reserved_memmap

    fill(small_disk, leave=8192)  # room for the file's header and last page: a sparse file maps
    with pytest.raises(DiskFull, match=f"out of disk space in {small_disk}; the write needed 3,145,728 bytes"):
        reserved_memmap(small_disk / "shard.npy", (1, 3, 1024, 1024))
    (small_disk / "filler").unlink()
    out = reserved_memmap(small_disk / "shard.npy", (1, 3, 1024, 1024))
    out[:] = 7
    out.flush()


def test_ranks_other_than_the_launching_one_share_the_run_folder_and_hold_nothing(tmp_path, monkeypatch):
    """DDP ranks of one run never block each other: only the launching process (rank 0) makes and
    holds the folder; a rank that Lightning's launcher or torchrun started uses its path as it is."""
    from foundation.run_folders import claim_run_folder

    run = tmp_path / "german" / "ddp"
    folder, made = claim_run_folder(run, resume=False, named=True)
    try:
        assert folder == run and made == [run, run.parent] and (run / LOCK).is_file()
        for variables in ({"LOCAL_RANK": "1"}, {"TORCHELASTIC_RUN_ID": "1", "RANK": "1", "LOCAL_RANK": "1",
                                                "WORLD_SIZE": "2", "GROUP_RANK": "0", "LOCAL_WORLD_SIZE": "2"}):
            with monkeypatch.context() as patched:
                for name, value in variables.items():
                    patched.setenv(name, value)
                assert claim_run_folder(run, resume=False, named=True) == (run, [])
                assert claim_run_folder(run, resume=True, named=False) == (run, [])
    finally:
        release(run)
