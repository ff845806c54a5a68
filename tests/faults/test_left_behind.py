"""What a failure leaves: a training run that fails before its first epoch ends removes the run
folder it made (the W&B files in it included); an evaluator that fails before writing anything
removes its output folders (tests/entry_points/test_cli_errors.py); the image cache's lock and a truncated
archive leave nothing: tests/datamodules/test_image_cache.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.datamodules.test_images import make_folder
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
