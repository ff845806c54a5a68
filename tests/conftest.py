"""Shared fixtures. Real data is found through one environment variable,
RELIABLE_EXPLANATIONS_DATA, which defaults to ../shared/data (beside the checkout)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("RELIABLE_EXPLANATIONS_DATA", ROOT.parent / "shared" / "data"))

os.environ.setdefault("WANDB_MODE", "offline")  # tests never reach a W&B server
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.skip(f"real data folder {DATA_DIR} not found (set RELIABLE_EXPLANATIONS_DATA)")
    return DATA_DIR
