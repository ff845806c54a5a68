"""Evaluate trained models.

    python evaluate.py run runs/german/<run>                 # re-test a run from its checkpoint
    python evaluate.py landscape --config configs/landscape/german.yaml --data_dir ../shared/data
    python evaluate.py sigma --config configs/sigma/german.yaml
    python evaluate.py consistency --config configs/consistency/heloc.yaml   # Ley et al.'s Table 1
    python evaluate.py consistency --config configs/consistency/heloc.yaml --set n_points_smoothgrad=100

``run`` rebuilds the datamodule from the run's ``config.yaml`` and the model from
``checkpoints/last.ckpt`` (loaded with ``weights_only=True``) and tests it.
``landscape`` runs the ensembles-over-the-loss-landscape evaluator
(``evaluators/landscape.py``), ``sigma`` the σ ablation of perturbed models
(``evaluators/sigma_ablation.py``); each writes JSON, CSV and a PNG to a new folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
from pathlib import Path

import pytorch_lightning as pl
import yaml
from pytorch_lightning.cli import instantiate_class

import lightning_modules  # noqa: F401  (the only model classes a checkpoint may name)
from datamodules.errors import InputError
from evaluators.consistency_protocol import ConsistencyConfig, evaluate_consistency, write_consistency_report
from evaluators.landscape import LandscapeConfig, evaluate_landscape, write_landscape_report
from evaluators.sigma_ablation import SigmaAblationConfig, evaluate_sigma, write_sigma_report


def evaluate_run(
    run_dir: Path, data_dir: str | None = None, checkpoint: str = "last.ckpt", accelerator: str = "auto"
) -> dict:
    """Test accuracy and loss of ``run_dir``'s checkpoint on its test split, on ``accelerator``
    (Lightning's name: ``auto`` takes a GPU where there is one)."""
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
    trainer = pl.Trainer(
        logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator=accelerator, devices=1
    )
    (tested,) = trainer.test(model, datamodule=data, verbose=False)
    return {"run_dir": str(run_dir), "checkpoint": str(ckpt_path), "test_acc": tested["test/acc"],
            "test_loss": tested["test/loss"], "data": data.describe()}  # fmt: skip


def load_config(path: Path, cls, overrides: dict):
    """A dataclass config from YAML; unknown keys name themselves."""
    if not path.is_file():
        raise InputError(f"--config {path}: file not found")
    values = {**(yaml.safe_load(path.read_text()) or {}), **{k: v for k, v in overrides.items() if v is not None}}
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise InputError(f"{path}: unknown option(s) {unknown}; expected some of {sorted(known)}")
    return cls(**values)


# name -> (help, config class, evaluate, write report, whether --n_sets applies)
EVALUATORS = {
    "landscape": ("ensembles over the loss landscape (Ley et al.)",
                  LandscapeConfig, evaluate_landscape, write_landscape_report, True),
    "sigma": ("sigma ablation of perturbed models (Ley et al., Fig. 4-5)",
              SigmaAblationConfig, evaluate_sigma, write_sigma_report, False),
    "consistency": ("Ley et al.'s consistency protocol (Table 1, Figure 6)",
                    ConsistencyConfig, evaluate_consistency, write_consistency_report, True),
}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="re-test a training run")
    run.add_argument("run_dir", type=Path, help="a folder written by train.py")
    run.add_argument("--data_dir", default=None, help="override the run's data folder")
    run.add_argument("--checkpoint", default="last.ckpt", help="file name under <run_dir>/checkpoints")
    run.add_argument("--accelerator", default="auto", help="Lightning accelerator: auto, cpu or gpu")
    run.add_argument("--out", type=Path, default=None, help="also write the metrics here (never overwritten)")
    for name, (help_text, *_, has_sets) in EVALUATORS.items():
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("--config", type=Path, required=True)
        sub.add_argument("--population", default=None, help="override the config's population file")
        sub.add_argument("--data_dir", default=None, help="folder holding the raw dataset")
        sub.add_argument("--output_dir", default=None)
        if has_sets:
            sub.add_argument("--n_sets", type=int, default=None)
        sub.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                         help="override any option of the config; VALUE is read as YAML")  # fmt: skip
    args = parser.parse_args(argv)
    if args.command == "run":
        if args.out is not None and args.out.exists():
            raise InputError(f"--out {args.out}: already exists; choose a new file name")
        metrics = evaluate_run(args.run_dir, args.data_dir, args.checkpoint, args.accelerator)
        text = json.dumps(metrics, indent=2)
        if args.out is not None:
            args.out.write_text(text)
        print(text)
        return metrics
    _, config_cls, evaluate_fn, write_fn, _ = EVALUATORS[args.command]
    overrides = {k: getattr(args, k, None) for k in ("population", "data_dir", "n_sets", "output_dir")}
    for setting in args.settings:
        key, sep, value = setting.partition("=")
        if not sep or not key:
            raise InputError(f"--set {setting!r}: expected KEY=VALUE, e.g. --set n_background=10")
        overrides[key] = yaml.safe_load(value)
    cfg = load_config(args.config, config_cls, overrides)
    summary = evaluate_fn(cfg)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = Path(cfg.output_dir) / f"{summary['dataset']}-{stamp}"
    write_fn(summary, out_dir)
    print(f"report: {out_dir}")
    return summary


if __name__ == "__main__":
    try:
        main()
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
