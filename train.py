"""Train a model composed from configs/ (LightningCLI; see README "Configuration").

    python train.py                                   # German Credit MLP, embedded data
    python train.py --config configs/heloc.yaml --data.data_dir ../shared/data
    python train.py --print_config                    # the full composed configuration

Each run writes to ``<output_dir>/<dataset>/<run_name>/``: the composed
``config.yaml``, ``checkpoints/``, the logger's files (W&B offline by default)
and, only once training and testing finished, ``metrics.json``.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path
from typing import Literal

from jsonargparse import Namespace
from pytorch_lightning.cli import LightningCLI

from datamodules.errors import InputError

ROOT = Path(__file__).resolve().parent
DEFAULT_CONFIGS = [str(ROOT / "configs" / "defaults.yaml"), str(ROOT / "configs" / "german.yaml")]
LogTo = Literal["wandb_offline", "wandb_online", "csv", "none"]
WANDB_PROJECT = "reliable-explanations"


def logger_config(log_to: LogTo, run_dir: Path, run_name: str, group: str) -> Namespace | bool:
    """The ``trainer.logger`` entry for a ``log_to`` choice; W&B never needs a key offline."""
    if log_to == "none":
        return False
    if log_to == "csv":
        return Namespace(
            class_path="pytorch_lightning.loggers.CSVLogger",
            init_args=Namespace(save_dir=str(run_dir), name="csv", version=""),
        )
    return Namespace(
        class_path="pytorch_lightning.loggers.WandbLogger",
        init_args=Namespace(
            save_dir=str(run_dir),
            project=WANDB_PROJECT,
            name=run_name,
            group=group,
            offline=log_to == "wandb_offline",
        ),
    )


def unique_run_dir(output_dir: Path, dataset: str, run_name: str) -> Path:
    """A run folder that does not exist yet: earlier runs are never overwritten."""
    candidate, suffix = output_dir / dataset / run_name, 1
    while candidate.exists():
        suffix += 1
        candidate = output_dir / dataset / f"{run_name}-{suffix}"
    return candidate


class TrainCLI(LightningCLI):
    """LightningCLI plus the run folder, the logger choice and the dataset-to-model link."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--output_dir", type=str, default="runs", help="root of all run folders")
        parser.add_argument("--run_name", type=str | None, default=None, help="default: <model>-seed<seed>-<time>")
        parser.add_argument("--log_to", type=LogTo, default="wandb_offline", help="where metrics are logged")
        parser.add_argument("--ckpt_path", type=str | None, default=None, help="resume training from this checkpoint")
        parser.link_arguments("data.num_features", "model.init_args.in_features", apply_on="instantiate")

    def before_instantiate_classes(self) -> None:
        cfg = self.config
        data_args = cfg.data.init_args
        dataset = getattr(data_args, "dataset", None) or cfg.data.class_path.rsplit(".", 1)[-1].lower()
        model_name = cfg.model.class_path.rsplit(".", 1)[-1]
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_name = cfg.run_name or f"{model_name}-seed{cfg.model.init_args.seed}-{stamp}"
        run_dir = unique_run_dir(Path(cfg.output_dir), dataset, run_name)
        cfg.trainer.default_root_dir = str(run_dir)
        cfg.trainer.logger = logger_config(cfg.log_to, run_dir, run_dir.name, dataset)
        checkpoint = Namespace(
            class_path="pytorch_lightning.callbacks.ModelCheckpoint",
            init_args=Namespace(dirpath=str(run_dir / "checkpoints"), save_last=True, save_top_k=0),
        )
        cfg.trainer.callbacks = [*(cfg.trainer.callbacks or []), checkpoint]
        self.run_dir = run_dir


def write_json_atomically(path: Path, payload: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True))
    os.replace(tmp, path)


def main(args: list[str] | None = None) -> dict:
    """Train, test on the held-out split and return the test metrics."""
    cli = TrainCLI(
        run=False,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_kwargs={"overwrite": False},
        parser_kwargs={"default_config_files": DEFAULT_CONFIGS, "allow_abbrev": False},
        args=args,
    )
    trainer, model, data = cli.trainer, cli.model, cli.datamodule
    trainer.fit(model, datamodule=data, ckpt_path=cli.config.ckpt_path)
    (tested,) = trainer.test(model, datamodule=data, verbose=False)
    metrics = {
        "test_acc": tested["test/acc"],
        "test_loss": tested["test/loss"],
        "data": data.describe(),
        "model": dict(model.hparams),
        "epochs": trainer.current_epoch,
        "run_dir": str(cli.run_dir),
    }
    write_json_atomically(cli.run_dir / "metrics.json", metrics)
    print(f"test accuracy: {metrics['test_acc']:.4f}  ({data.name}, {metrics['epochs']} epochs, run {cli.run_dir})")
    return metrics


def input_error_in(err: BaseException) -> InputError | None:
    """The InputError behind ``err``, also when jsonargparse wrapped it while instantiating."""
    while err is not None:
        if isinstance(err, InputError):
            return err
        err = err.__cause__ or err.__context__
    return None


if __name__ == "__main__":
    try:
        main()
    except Exception as err:
        cause = input_error_in(err)
        if cause is None:
            raise
        print(f"error: {cause}", file=sys.stderr)
        sys.exit(2)
