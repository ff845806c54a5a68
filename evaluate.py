"""Evaluate a finished training run on its held-out test split.

    python evaluate.py runs/german/<run>                    # the run's own data settings
    python evaluate.py runs/heloc/<run> --data_dir ../shared/data --out eval.json

Rebuilds the datamodule from the run's ``config.yaml`` and the model from
``checkpoints/last.ckpt`` (loaded with ``weights_only=True``), tests it and
prints the metrics as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytorch_lightning as pl
import yaml
from pytorch_lightning.cli import instantiate_class

import lightning_modules  # noqa: F401  (the only model classes a checkpoint may name)
from datamodules.errors import InputError


def evaluate(run_dir: Path, data_dir: str | None = None, checkpoint: str = "last.ckpt") -> dict:
    """Test accuracy and loss of ``run_dir``'s checkpoint on its test split."""
    config_path, ckpt_path = run_dir / "config.yaml", run_dir / "checkpoints" / checkpoint
    for path in (config_path, ckpt_path):
        if not path.is_file():
            raise InputError(f"{path}: file not found; expected a run folder written by train.py")
    config = yaml.safe_load(config_path.read_text())
    data_cfg = config["data"]
    if data_dir is not None:
        data_cfg["init_args"]["data_dir"] = data_dir
    data = instantiate_class((), data_cfg)
    model = pl.LightningModule.load_from_checkpoint(ckpt_path, weights_only=True)
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    (tested,) = trainer.test(model, datamodule=data, verbose=False)
    return {"run_dir": str(run_dir), "checkpoint": str(ckpt_path), "test_acc": tested["test/acc"],
            "test_loss": tested["test/loss"], "data": data.describe()}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a folder written by train.py")
    parser.add_argument("--data_dir", default=None, help="override the run's data folder")
    parser.add_argument("--checkpoint", default="last.ckpt", help="file name under <run_dir>/checkpoints")
    parser.add_argument("--out", type=Path, default=None, help="also write the metrics here (never overwritten)")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.exists():
        raise InputError(f"--out {args.out}: already exists; choose a new file name")
    metrics = evaluate(args.run_dir, args.data_dir, args.checkpoint)
    text = json.dumps(metrics, indent=2)
    if args.out is not None:
        args.out.write_text(text)
    print(text)
    return metrics


if __name__ == "__main__":
    try:
        main()
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
