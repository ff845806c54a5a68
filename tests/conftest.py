"""Shared fixtures. Real data is found through one environment variable,
RELIABLE_EXPLANATIONS_DATA, which defaults to ../shared/data (beside the checkout)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.support import ROOT

DATA_DIR = Path(os.environ.get("RELIABLE_EXPLANATIONS_DATA", ROOT.parent / "shared" / "data"))

os.environ.setdefault("WANDB_MODE", "offline")  # tests never reach a W&B server
os.environ.setdefault("WANDB_SILENT", "true")
if "PYTEST_XDIST_WORKER" in os.environ:  # `make test` runs one worker per core: one thread each, set before torch loads
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def deterministic_algorithms_off():
    """A Trainer with deterministic=True turns torch.use_deterministic_algorithms on for the
    whole process, also from a session fixture's training run: every test starts from
    torch's default (off), as a fresh process would, and turns it on itself if it trains
    with deterministic=True."""
    import torch

    torch.use_deterministic_algorithms(False)
    yield
    torch.use_deterministic_algorithms(False)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.skip(f"real data folder {DATA_DIR} not found (set RELIABLE_EXPLANATIONS_DATA)")
    return DATA_DIR


@pytest.fixture(scope="session")
def small_population(tmp_path_factory) -> str:
    """A German Credit population of 8 members trained for 3 epochs: its file's path."""
    import train

    out = tmp_path_factory.mktemp("pop")
    metrics = train.main([
        "--config", "configs/population.yaml", "--model.size", "8", "--trainer.max_epochs", "3",
        "--trainer.enable_progress_bar", "false", "--log_to", "none", "--output_dir", str(out),
    ])  # fmt: skip
    return metrics["population"]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A train.py run folder of the ResNet-8 config on a tiny 32x32 image folder (2 steps)."""
    import train
    from tests.datamodules.test_images import make_folder

    tmp = tmp_path_factory.mktemp("tiny_run")
    make_folder(tmp / "tiny", size=32)
    train.main([
        "--config", "configs/images/cifar10_resnet8.yaml", "--data.root", str(tmp / "tiny"),
        "--data.cache_dir", str(tmp / "cache"), "--data.batch_size", "4", "--trainer.accelerator", "cpu",
        "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--log_to", "none",
        "--output_dir", str(tmp / "runs"), "--run_name", "r", "--trainer.enable_progress_bar", "false",
    ])  # fmt: skip
    return tmp / "runs" / "tiny" / "r"


@pytest.fixture(scope="session")
def planted_run(tmp_path_factory) -> Path:
    """A train.py run folder of the small CNN on 16x16 planted-pattern images (64 training and 16
    test images, 1 epoch; ``datamodules.PlantedPatternDataModule``, whose truth is known)."""
    import train

    out = tmp_path_factory.mktemp("planted_run")
    train.main([
        "--config", "configs/ground_truth/planted_cnn.yaml", "--data.n_train", "64", "--data.n_test", "16",
        "--data.size", "16", "--data.pattern", "4", "--data.batch_size", "16", "--data.eval_batch_size", "16",
        "--trainer.max_epochs", "1", "--trainer.accelerator", "cpu", "--log_to", "none", "--output_dir", str(out),
        "--run_name", "r", "--trainer.enable_progress_bar", "false",
    ])  # fmt: skip
    return out / "planted_patterns" / "r"


@pytest.fixture(scope="session")
def synthetic_table_run(tmp_path_factory) -> Path:
    """A train.py run folder of the default MLP on a 400-row synthetic table (1 epoch;
    ``datamodules.SyntheticTableDataModule``, whose truth is known)."""
    import train

    out = tmp_path_factory.mktemp("table_run")
    train.main(["--data", "SyntheticTableDataModule", "--data.n_rows", "400", "--trainer.max_epochs", "1",
                "--log_to", "none", "--output_dir", str(out), "--run_name", "r",
                "--trainer.enable_progress_bar", "false"])  # fmt: skip
    return out / "synthetic_table" / "r"


@pytest.fixture(scope="session")
def synthetic_table_population(tmp_path_factory) -> str:
    """A population file of 3 MLPs on a 400-row synthetic table (1 epoch): its path."""
    import train

    out = tmp_path_factory.mktemp("table_population")
    return train.main(["--config", "configs/population.yaml", "--data", "SyntheticTableDataModule", "--data.n_rows",
                       "400", "--model.size", "3", "--trainer.max_epochs", "1", "--log_to", "none",
                       "--trainer.enable_progress_bar", "false", "--output_dir", str(out)])["population"]  # fmt: skip


@pytest.fixture(scope="module")
def model():
    """The tiny image classifier the image explainers are checked on (``support.tiny_models.TinyCNN``,
    seeded, eval mode): tests/evaluators/maps/test_image_explainers.py and test_perturbations.py."""
    import torch

    from tests.support.tiny_models import TinyCNN

    torch.manual_seed(0)
    return TinyCNN().eval()


@pytest.fixture(scope="module")
def images():
    """Four random 3 x 16 x 16 images for ``model``."""
    import torch

    torch.manual_seed(1)
    return torch.randn(4, 3, 16, 16)


@pytest.fixture(scope="module")
def population():
    """A population of three 6-feature MLPs, their weights moved off the initialisation so members
    differ: tests/evaluators/maps/test_explainers.py and test_stacked_deepshap.py."""
    import torch

    from lightning_modules import PopulationMLP

    torch.manual_seed(0)
    pop = PopulationMLP(in_features=6, seeds=[0, 1, 2])
    with torch.no_grad():
        for p in pop.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return pop
