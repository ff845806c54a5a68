"""What a failure leaves: a training run that fails before its first epoch ends removes the run
folder it made (the W&B files in it included); an evaluator that fails before writing anything
removes its output folders (tests/entry_points/test_cli_errors.py); the image cache keeps no lock file."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from datamodules import InputError, unpack_archive
from datamodules.image_cache import _locked
from tests.datamodules.test_images import make_archive, make_folder
from tests.support import ROOT


def test_a_run_that_fails_before_training_leaves_no_folder(tmp_path):
    """A corrupt JPEG ends ``train.py`` while the data are decoded, after W&B (offline) opened
    its run in the run folder: the folder goes, W&B files and the dataset folder made for it too."""
    make_folder(tmp_path / "corrupt", size=32)
    (tmp_path / "corrupt" / "train" / "dog" / "broken.jpg").write_bytes(b"not a jpeg")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    result = subprocess.run([
        sys.executable, "train.py", "--config", "configs/images/cifar10_resnet8.yaml", "--data.root",
        str(tmp_path / "corrupt"), "--data.cache_dir", str(tmp_path / "cache"), "--trainer.max_epochs", "1",
        "--trainer.accelerator", "cpu", "--output_dir", str(tmp_path / "runs"), "--log_to", "wandb_offline",
    ], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith("error: image file "), result.stderr[-2000:]
    assert "broken.jpg': cannot decode it" in result.stderr
    assert not (tmp_path / "runs").exists(), list((tmp_path / "runs").rglob("*"))


def test_a_run_that_fails_after_an_epoch_is_kept_for_resume(tmp_path, monkeypatch):
    """The other side of the cleanup: a checkpoint is there to resume from, so the folder stays."""
    import train

    monkeypatch.setenv("RELEXP_TEST_INTERRUPT", "1")
    with pytest.raises(RuntimeError, match="simulated crash"):
        train.main(["--log_to", "none", "--run_name", "x-chunk-001", "--trainer.max_epochs", "3",
                    "--trainer.callbacks+=tests.support.helpers.InterruptChunk", "--output_dir", str(tmp_path),
                    "--trainer.enable_progress_bar", "false"])  # fmt: skip
    assert (tmp_path / "german" / "x-chunk-001" / "checkpoints" / "last.ckpt").is_file()


def test_a_truncated_archive_leaves_nothing_in_the_cache(tmp_path):
    root = tmp_path / "data"
    make_folder(root)
    archive = make_archive(root, tmp_path / "tiny.tar.gz")
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(InputError, match=r"archive '.*cut\.tar\.gz': cannot unpack it"):
        unpack_archive(cut, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []
    unpacked = unpack_archive(archive, tmp_path / "cache")  # and a good one leaves its folder alone
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [unpacked.name]


def test_the_lock_excludes_while_its_file_is_removed(tmp_path):
    """Eight threads (each its own open file, as separate processes have) take the lock 25 times
    each: never two inside at once, though every release removes the lock file."""
    lock, inside, overlaps = tmp_path / ".entry.lock", [], []

    def work() -> None:
        for _ in range(25):
            with _locked(lock):
                inside.append(1)
                if len(inside) > 1:
                    overlaps.append(len(inside))
                time.sleep(0.0005)
                inside.pop()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [] and not lock.exists()
