"""Train a model composed from configs/ (LightningCLI; see docs/getting-started.md "Configuration").

    python train.py                                   # German Credit MLP, embedded data
    python train.py --config configs/heloc.yaml --data.data_dir ../shared/data
    python train.py --config configs/population.yaml --config configs/adult.yaml --data.data_dir ../shared/data
    python train.py --config configs/images/fashion_mnist_cnn.yaml   # an image classifier (configs/images/)
    python train.py --resume runs/adult/<run>          # continue an interrupted run
    python train.py --print_config                    # the full composed configuration
    python train.py --portable                        # the same bits on any x86-64 CPU (portable.py)

Beneath a command's own ``--config`` files and options lie ``configs/defaults.yaml`` and its data's
defaults: ``configs/german.yaml``, or ``configs/table.yaml`` for any table (``CSVDataModule``);
for data other than German Credit, train.py prints them and the batch size, learning rate and
epochs the run takes.

Each run writes to ``<output_dir>/<dataset>/<run_name>/``: the composed
``config.yaml``, checkpoints, the logger's files (W&B offline by default) and,
only once training and testing finished, ``metrics.json`` (and for a population, tabular or
image, ``population.pt``, ``members.csv`` and ``accuracy_histogram.png``).
"""

from __future__ import annotations

import sys

import portable

portable.enable_if_asked(sys.argv)  # before torch is imported: the mode's variables are read at import

import argparse
import contextlib
import datetime
import importlib
import inspect
import io
import logging
import re
import shutil
import time
import uuid
import warnings
from pathlib import Path
from typing import Literal

import pytorch_lightning as pl
import torch
from jsonargparse import Namespace
from pytorch_lightning.callbacks import ModelCheckpoint, ProgressBar
from pytorch_lightning.cli import LightningCLI, SaveConfigCallback
from pytorch_lightning.loggers import WandbLogger

from evaluators.inputs.model_fit import check_resumed_checkpoint
from evaluators.reports.wandb_log import WANDB_PROJECT, run_group, training_link, wandb_mode
from foundation.errors import InputError, one_line, run_entry_point
from foundation.files import read_yaml, write_json, write_text
from foundation.modality import ROWS
from foundation.run_folders import claim_run_folder, release
from lightning_modules.checkpoint_io import atomic_checkpoints
from lightning_modules.net_options import net_options_from_data, one_net_option, set_net_options
from lightning_modules.population_base import Population
from lightning_modules.population_fit import drop_below_mean, fit_population, write_reports
from lightning_modules.population_io import save_population

if portable.is_active():
    portable.configure_torch()

ROOT = Path(__file__).resolve().parent
DEFAULT_CONFIGS = [str(ROOT / "configs" / "defaults.yaml"), str(ROOT / "configs" / "german.yaml")]
# a datamodule class (by name) -> the defaults composed in place of german.yaml's for its data
DATA_DEFAULTS = {"CSVDataModule": str(ROOT / "configs" / "table.yaml")}
LogTo = Literal["wandb", "wandb_offline", "wandb_online", "csv", "none"]  # wandb: wandb_log.wandb_mode
# The seed is in every run's config.yaml; its log line would only stand before errors.
logging.getLogger("lightning_fabric.utilities.seed").setLevel(logging.WARNING)
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")  # Lightning's own, every fit


def logger_config(log_to: LogTo, run_dir: Path, run_name: str, group: str, resumed: bool,
                  previous: Namespace | None = None) -> Namespace | bool:  # fmt: skip
    """The ``trainer.logger`` entry for a ``log_to`` choice; W&B never needs a key offline.
    A resumed run logs CSV metrics to ``csv/resume-<k>/`` so the first part's file stays,
    and W&B metrics to the same W&B run and group: its id and group are kept in the run's
    config.yaml (``previous``: the logger entry the run was started with), where the
    protocols read them (``wandb_log.population_link``)."""
    if log_to == "none":
        return False
    if log_to == "csv":
        version = ""
        if resumed:
            k = 1
            while (run_dir / "csv" / f"resume-{k}").exists():
                k += 1
            version = f"resume-{k}"
        return Namespace(
            class_path="foundation.csv_logger.CSVLogger",
            init_args=Namespace(save_dir=str(run_dir), name="csv", version=version),
        )
    return Namespace(
        class_path="pytorch_lightning.loggers.WandbLogger",
        init_args=Namespace(
            save_dir=str(run_dir),
            project=WANDB_PROJECT,
            name=run_name,
            group=getattr(getattr(previous, "init_args", None), "group", None) or group,
            offline=wandb_mode(log_to) == "offline",
            id=wandb_run_id(previous),
        ),
    )


def wandb_run_id(previous: Namespace | None) -> str:
    """The W&B run id a run started with (Lightning resumes a W&B run of a given id),
    or a new one."""
    init_args = getattr(previous, "init_args", None)
    if getattr(previous, "class_path", "").endswith("WandbLogger") and getattr(init_args, "id", None):
        return init_args.id
    # a leading letter: the id goes through config.yaml, and YAML reads hex such as "12e4090" as a number
    return "r" + uuid.uuid4().hex[:11]


def dataset_name(data: Namespace) -> str:
    """The dataset part of the run folder: the datamodule's ``dataset`` option (tabular data),
    else its class's ``dataset_name(options)`` (image data), else its class name in lower case."""
    args = data.init_args
    if getattr(args, "dataset", None):
        return args.dataset
    module, _, name = data.class_path.rpartition(".")
    datamodule_class = getattr(importlib.import_module(module), name)
    if hasattr(datamodule_class, "dataset_name"):
        return datamodule_class.dataset_name(args.as_dict())
    return name.lower()


class RunFolderConfig(SaveConfigCallback):
    """Writes the composed config to ``<run folder>/config.yaml`` whatever the logger, where
    ``--resume`` and ``evaluate.py run`` read it (Lightning's own place, the logger's
    ``log_dir``, is ``<run>/csv/`` for CSV logs)."""

    def save_config(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        path = Path(trainer.default_root_dir) / self.config_filename
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, self.parser.dump(self.config, skip_none=False))


class TrainCLI(LightningCLI):
    """LightningCLI plus the run folder, the logger choice and the dataset-to-model links."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--output_dir", type=str, default="runs", help="root of all run folders")
        parser.add_argument("--run_name", type=str | None, default=None, help="default: <model>-seed<seed>-<time>")
        parser.add_argument("--log_to", type=LogTo, default="wandb", help="where metrics are logged")
        parser.add_argument("--resume", type=str | None, default=None, help="a run folder to continue")
        parser.add_argument("--population.chunk_size", type=int | None, default=None, help="members per chunk (auto)")
        parser.add_argument(
            "--population.drop_below_mean", type=float | None, default=None,
            help="drop members whose test accuracy is more than this below the mean (paper: 0.01)",
        )  # fmt: skip
        parser.add_argument(
            "--population.keep_chunks", type=bool, default=False,
            help="keep <run>/chunks/ (per-chunk files and last epoch checkpoints) once population.pt is written",
        )  # fmt: skip
        # each link applies where the datamodule has the property and the model the option:
        # tabular data -> MLPs (in_features), image data -> ImageClassifier (num_classes, in_channels),
        # a table's rows -> a ModulePopulation's inputs
        parser.link_arguments("data.num_features", "model.init_args.in_features", apply_on="instantiate")
        parser.link_arguments("data.num_classes", "model.init_args.num_classes", apply_on="instantiate")
        parser.link_arguments("data.in_channels", "model.init_args.in_channels", apply_on="instantiate")
        parser.link_arguments("data.inputs", "model.init_args.inputs", apply_on="instantiate")

    def before_instantiate_classes(self) -> None:
        cfg = self.config
        dataset = dataset_name(cfg.data)
        if cfg.resume:
            run_dir = Path(cfg.resume)
        else:
            model_name = cfg.model.class_path.rsplit(".", 1)[-1]
            model_args = cfg.model.init_args
            seed = getattr(model_args, "seed", None)
            seed = getattr(model_args, "first_seed", cfg.seed_everything) if seed is None else seed
            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            run_name = cfg.run_name or f"{model_name}-seed{seed}-{stamp}"
            run_dir = Path(cfg.output_dir) / dataset / run_name
        self.run_dir, self.new_folders = claim_run_folder(run_dir, bool(cfg.resume), bool(cfg.run_name))
        run_dir = self.run_dir
        cfg.trainer.default_root_dir = str(run_dir)
        previous = cfg.trainer.logger if cfg.resume else None
        module, _, name = cfg.model.class_path.rpartition(".")
        population = issubclass(getattr(importlib.import_module(module), name), Population)
        group = run_group(run_dir, population)  # the group the protocols on its population log into
        cfg.trainer.logger = logger_config(cfg.log_to, run_dir, run_dir.name, group, bool(cfg.resume), previous)
        checkpoint = Namespace(  # last.ckpt, rewritten at every epoch end, for --resume
            class_path="pytorch_lightning.callbacks.ModelCheckpoint",
            init_args=Namespace(
                dirpath=str(run_dir / "checkpoints"), filename="last", save_top_k=1, enable_version_counter=False
            ),
        )
        finite = Namespace(class_path="lightning_modules.finite.FiniteTraining")  # stops at a NaN loss, never saved
        others = [c for c in (cfg.trainer.callbacks or [])
                  if not c.class_path.endswith(("ModelCheckpoint", "FiniteTraining"))]  # fmt: skip
        if cfg.trainer.enable_progress_bar is False:  # `--trainer.enable_progress_bar false` silences the bar
            others = [c for c in others if not c.class_path.endswith("ProgressBar")]
        cfg.trainer.callbacks = [*others, finite, checkpoint]

    def instantiate_classes(self) -> None:
        """Instantiate; where the model's ``net`` (``Classifier``) takes options that the
        datamodule determines (``net_options_from_data``) and they differ, set them and
        instantiate again from the same seed, so the run's config.yaml makes the same weights.
        A failure leaves no new run folder behind (:func:`remove_untrained_run`)."""
        try:
            self._instantiate_classes()
        except BaseException as err:
            remove_untrained_run(self.new_folders)
            release(self.run_dir)
            short = short_instantiation_error(str(err)) if isinstance(err, ValueError) else None
            if short is not None:
                raise InputError(short) from None
            raise

    def _instantiate_classes(self) -> None:
        super().instantiate_classes()
        atomic_checkpoints(self.trainer)
        net = getattr(self.config.model.init_args, "net", None)
        changed = net_options_from_data(net, self.datamodule)
        if changed:
            set_net_options(net, changed)
            if hasattr(self, "config_dump"):  # LightningCLI's copy of the config, the model's hparams
                del self.config_dump
            self._set_seed()
            super().instantiate_classes()
        drop_unaccepted_links(self.model)


def short_instantiation_error(message: str) -> str | None:
    """jsonargparse's failure to build a class of the config ("Does not validate against any of
    the Union subtypes"), cut to the class it was building and the first error (a network's own,
    e.g. timm's "Unknown model (name)"); None for another message."""
    errors = re.findall(r"^\s+- (.+)$", message, re.M)
    built = re.search(r"Given value: Namespace\(class_path='([\w.]+)'", message)
    if not message.startswith("Does not validate against any of the Union subtypes") or not errors or not built:
        return None
    return f"building {built.group(1)} from the options: {errors[0]}; see train.py --help"


def drop_unaccepted_links(model: pl.LightningModule) -> None:
    """Lightning records every instantiation link's value among the model's hyperparameters, also
    one its class has no option for (a datamodule's ``num_classes`` for a model without that
    option), which would make its checkpoint unloadable; such values are taken out."""
    parameters = inspect.signature(type(model).__init__).parameters
    if any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        return
    for key in [k for k in model.hparams if not k.startswith("_") and k not in parameters]:
        del model.hparams[key]


def resume_args(args: list[str]) -> list[str]:
    """``--resume RUN`` composes the run's own saved config first, so nothing need be repeated;
    the run's last checkpoint, where there is one, must be readable and of the run's model class."""
    if "--resume" in args:
        run_dir = Path(args[args.index("--resume") + 1])
        config = run_dir / "config.yaml"
        if not config.is_file():
            raise InputError(f"--resume {run_dir}: no config.yaml there; expected a run folder written by train.py")
        if (run_dir / "checkpoints" / "last.ckpt").exists():
            check_resumed_checkpoint(run_dir)
        return ["--config", str(config), *args]
    return args


def data_class(args: list[str]) -> str | None:
    """The datamodule class a command names: its last ``--data`` option, else the ``data:`` of its
    last ``--config`` file that has one (a class path or a name); None: the defaults' German Credit."""
    named = [value for flag, value in zip(args, args[1:]) if flag == "--data"]
    named += [a.split("=", 1)[1] for a in args if a.startswith("--data=")]
    if named:
        return named[-1]
    configs = [value for flag, value in zip(args, args[1:]) if flag in ("--config", "-c")]
    for config in reversed(configs):
        data = (read_yaml(Path(config)) or {}).get("data") if Path(config).is_file() else None
        if isinstance(data, dict) and data.get("class_path"):
            return data["class_path"]
    return None


def default_configs(args: list[str]) -> list[str]:
    """The config files composed beneath a command's own: ``configs/defaults.yaml`` and its data's
    defaults (``DATA_DEFAULTS``: ``configs/table.yaml`` for a ``CSVDataModule``), else ``configs/german.yaml``."""
    name = str(data_class(args) or "").rsplit(".", 1)[-1]
    return [DEFAULT_CONFIGS[0], DATA_DEFAULTS.get(name, DEFAULT_CONFIGS[1])]


def print_defaults(cli: TrainCLI, files: list[str]) -> None:
    """For data other than the defaults' German Credit: which default files lay beneath the run's
    options, and the batch size, learning rate and epochs the run takes (whatever set them)."""
    if cli.config.data.class_path.endswith(".FinancialDataModule"):
        return
    values = {"batch size": getattr(cli.config.data.init_args, "batch_size", None),
              "learning rate": getattr(cli.config.model.init_args, "lr", None),
              "epochs": cli.config.trainer.max_epochs}  # fmt: skip
    taken = ", ".join(f"{name} {value}" for name, value in values.items() if value is not None)
    names = " and ".join(Path(f).relative_to(ROOT).as_posix() for f in files)
    print(f"defaults: {names} beneath your --config files and options; this run: {taken}")


def check_config_files(args: list[str]) -> None:
    """Every ``--config FILE`` exists and is YAML, else an error naming the file and the
    line (jsonargparse would report a parse error in "<unicode string>")."""
    for flag, value in zip(args, args[1:]):
        if flag in ("--config", "-c"):
            read_yaml(Path(value))


def short_parse_error(message: str) -> str:
    """jsonargparse's error, cut to the option and what was expected: a wrong type names
    the nested keys (model / lr) and the first "Expected ..." line under them."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    keys = [m.group(1) for line in lines if (m := re.match(r'Parser key "([^"]+)":$', line))]
    expected = next((line for line in lines if line.startswith("Expected a")), None)
    if keys and expected:
        expected = re.sub(r"<class '([\w.]+)'>", r"\1", expected).replace("Expected a", "expected a")
        return f"option {'.'.join(keys)}: {expected}; see train.py --help"
    return f"{one_line(message)[:300]}; see train.py --help"  # other errors: their own words, on one line


def fit_single(cli: TrainCLI) -> dict:
    trainer, model, data = cli.trainer, cli.model, cli.datamodule
    last = cli.run_dir / "checkpoints" / "last.ckpt"
    trainer.fit(model, datamodule=data, ckpt_path=last if last.exists() else None, weights_only=True)
    (tested,) = trainer.test(model, datamodule=data, verbose=False)
    metrics = {
        "test_acc": tested["test/acc"],
        "test_loss": tested["test/loss"],
        "train_acc": train_accuracy(cli, model),
        "data": data.describe(),
        "model": dict(model.hparams),
        "epochs": trainer.current_epoch,
        "run_dir": str(cli.run_dir),
        "mode": portable.describe(),
    }
    if portable.is_active():
        metrics["weights_sha256"] = portable.weights_sha256(model.state_dict())
    write_json(cli.run_dir / "metrics.json", metrics, sort_keys=True)
    on_train = "" if metrics["train_acc"] is None else f", training accuracy {metrics['train_acc']:.4f}"
    print(f"test accuracy: {metrics['test_acc']:.4f}{on_train}  ({data.name}, {metrics['epochs']} epochs, "
          f"run {cli.run_dir})")
    if portable.is_active():
        print(f"portable mode: the same on any x86-64 CPU; weights sha256 {metrics['weights_sha256']}")
    return metrics


def measures_training_accuracy(cli: TrainCLI) -> bool:
    """Whether train.py measures the training accuracy: on one device (a run on several, e.g. under
    DDP, records none: :func:`quiet_tester` is a one-device Trainer) of a datamodule with
    ``eval_dataloader`` (the project's do; a user's own may not)."""
    return cli.trainer.world_size == 1 and hasattr(cli.datamodule, "eval_dataloader")


def quiet_tester(cli: TrainCLI) -> pl.Trainer:
    """A Trainer on the run's accelerator (one device) that logs, checkpoints and prints nothing:
    it measures the training accuracy (the trained model on the training split as served, labels
    permuted where ``data.permute_labels`` says so, without augmentation), which must not reach the
    run's logger under the test names its ``test`` logs. It reads as many batches as the test
    (``trainer.limit_test_batches``)."""
    config = cli.config.trainer
    return pl.Trainer(accelerator=config.accelerator, devices=1, precision=config.precision, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      limit_test_batches=config.limit_test_batches, default_root_dir=str(cli.run_dir))  # fmt: skip


def train_accuracy(cli: TrainCLI, model: pl.LightningModule) -> float | None:
    """A model's training accuracy, measured by :func:`quiet_tester`; None where train.py measures
    none (:func:`measures_training_accuracy`)."""
    if not measures_training_accuracy(cli):
        return None
    (on_train,) = quiet_tester(cli).test(model, dataloaders=cli.datamodule.eval_dataloader("train"), verbose=False)
    return on_train["test/acc"]


def member_train_accuracy(cli: TrainCLI, population: Population) -> torch.Tensor:
    """Each member's training accuracy (M,), measured by :func:`quiet_tester`; the population's
    ``member_test_acc`` is kept as it was."""
    tested = population.member_test_acc
    quiet_tester(cli).test(population, dataloaders=cli.datamodule.eval_dataloader("train"), verbose=False)
    on_train, population.member_test_acc = population.member_test_acc, tested
    return on_train


def chunk_trainer_factory(cli: TrainCLI):
    """Fresh Trainers configured like ``cli.trainer``, one per chunk, sharing its logger."""
    skip = ("callbacks", "logger", "default_root_dir", "enable_progress_bar")
    kwargs = {k: v for k, v in cli.config.trainer.as_dict().items() if k not in skip}
    configured = cli.config_init.trainer.callbacks or []
    extra = [c for c in configured if not isinstance(c, (ModelCheckpoint, ProgressBar))]
    bars = [c for c in configured if isinstance(c, ProgressBar)] if cli.trainer.progress_bar_callback else []

    def make(chunk_dir: Path) -> pl.Trainer:
        checkpoint = ModelCheckpoint(dirpath=chunk_dir, filename="last", save_top_k=1, enable_version_counter=False)
        progress = [type(bars[0])()] if bars else []
        return atomic_checkpoints(pl.Trainer(
            **kwargs, default_root_dir=str(chunk_dir), logger=cli.trainer.logger or False,
            callbacks=[*extra, *progress, checkpoint], enable_progress_bar=bool(progress),
        ))  # fmt: skip

    return make


def fit_population_run(cli: TrainCLI) -> dict | None:
    population, data, run_dir = cli.model, cli.datamodule, cli.run_dir
    options = cli.config.population
    run_dir.mkdir(parents=True, exist_ok=True)
    if not (run_dir / "config.yaml").exists():
        write_text(run_dir / "config.yaml", cli.parser.dump(cli.config, skip_none=False))
    started = time.perf_counter()
    result = fit_population(population, data, chunk_trainer_factory(cli), run_dir, options.chunk_size,
                            (lambda part: member_train_accuracy(cli, part)) if measures_training_accuracy(cli)
                            else None)  # fmt: skip
    if result is None:
        print(f"interrupted; continue with: python train.py --resume {run_dir}", file=sys.stderr)
        return None
    trained, accuracy = result
    kept = drop_below_mean(accuracy, options.drop_below_mean)
    keep = torch.nonzero(kept).flatten().tolist()
    info = data.describe()
    on_train = trained.member_train_acc
    metadata = {
        "dataset": info,
        "datamodule": cli.config.data.as_dict(),
        "max_epochs": cli.config.trainer.max_epochs,
        "drop_below_mean": options.drop_below_mean,
        "dropped_seeds": [s for s, k in zip(trained.seeds, kept.tolist()) if not k],
        "dropped_test_acc": accuracy[~kept].tolist(),
        **({} if on_train is None else {"member_train_acc": on_train[kept].tolist()}),
        "wandb_link": training_link(cli.config.as_dict(), run_dir),
    }
    save_population(run_dir / "population.pt", trained.subset(keep), accuracy[kept].tolist(), metadata)
    if not options.keep_chunks:  # everything in them is in population.pt now (they were 4x its size)
        shutil.rmtree(run_dir / "chunks")
    plot = write_reports(run_dir, trained.seeds, accuracy, kept, f"{info['dataset']}: {trained.size} members",
                         on_train)  # fmt: skip
    summary = {
        "members_trained": trained.size,
        "members_kept": len(keep),
        "test_acc_mean": accuracy.mean().item(),
        "test_acc_std": accuracy.std(unbiased=False).item(),
        "test_acc_min": accuracy.min().item(),
        "test_acc_max": accuracy.max().item(),
        **({} if on_train is None else spread("train_acc", on_train)),
        "train_seconds": round(time.perf_counter() - started, 1),
    }
    logger = cli.trainer.logger
    if logger:
        logger.log_metrics({f"population/{k}": v for k, v in summary.items()})
        if isinstance(logger, WandbLogger):
            import wandb

            logger.experiment.log(
                {
                    "population/test_acc_histogram": wandb.Histogram(accuracy.numpy()),
                    "population/accuracy_histogram": wandb.Image(str(plot)),
                }
            )
        logger.finalize("success")
    metrics = {**summary, "data": info, "run_dir": str(run_dir), "population": str(run_dir / "population.pt"),
               "mode": portable.describe()}  # fmt: skip
    write_json(run_dir / "metrics.json", metrics, sort_keys=True)
    pct = {k: 100 * v for k, v in summary.items() if k.startswith("test_acc")}
    print(
        f"population: {trained.size} members, test accuracy {pct['test_acc_mean']:.2f} % ± {pct['test_acc_std']:.2f} "
        f"(min {pct['test_acc_min']:.2f}, max {pct['test_acc_max']:.2f}); kept {len(keep)}; "
        f"{summary['train_seconds']} s; run {run_dir}"
    )
    print(f"mean over the seeds: {pct['test_acc_mean']:.1f} % ± {100 * standard_error(accuracy):.2f} (standard error; "
          "each member's accuracy depends on the CPU's last bits, this mean does not beyond its error)")
    if on_train is not None:
        print(f"training accuracy: {100 * summary['train_acc_mean']:.2f} % (min {100 * summary['train_acc_min']:.2f}, "
              f"max {100 * summary['train_acc_max']:.2f})")
    return metrics


def spread(name: str, values: torch.Tensor) -> dict:
    """``{name}_mean``, ``_std`` (population), ``_min`` and ``_max`` of per-member ``values``."""
    return {f"{name}_mean": values.mean().item(), f"{name}_std": values.std(unbiased=False).item(),
            f"{name}_min": values.min().item(), f"{name}_max": values.max().item()}  # fmt: skip


def standard_error(values: torch.Tensor) -> float:
    """The standard error of the mean of ``values``: their sample standard deviation over √n."""
    return (values.double().std(unbiased=True) / len(values) ** 0.5).item()


def fit_whole_population_run(cli: TrainCLI) -> dict:
    """Train a population that is not ``CHUNKED`` (``ImagePopulation``, ``ModulePopulation``) like one
    model, test every member, and save the population file."""
    trainer, population, data, run_dir = cli.trainer, cli.model, cli.datamodule, cli.run_dir
    last = run_dir / "checkpoints" / "last.ckpt"
    started = time.perf_counter()
    trainer.fit(population, datamodule=data, ckpt_path=last if last.exists() else None, weights_only=True)
    trainer.test(population, datamodule=data, verbose=False)
    accuracy, info = population.member_test_acc, data.describe()
    seconds = round(time.perf_counter() - started, 1)
    on_train = member_train_accuracy(cli, population) if measures_training_accuracy(cli) else None
    measured = {} if on_train is None else {"member_train_acc": on_train.tolist(), **spread("train_acc", on_train)}
    metadata = {"dataset": info, "datamodule": cli.config.data.as_dict(), "max_epochs": cli.config.trainer.max_epochs,
                "wandb_link": training_link(cli.config.as_dict(), run_dir),
                **({} if on_train is None else {"member_train_acc": on_train.tolist()})}  # fmt: skip
    save_population(run_dir / "population.pt", population, accuracy.tolist(), metadata)
    write_reports(run_dir, population.seeds, accuracy, torch.ones_like(accuracy, dtype=torch.bool),
                  f"{info['dataset']}: {population.size} members", on_train)  # fmt: skip
    metrics = {
        "members": population.size, "member_test_acc": accuracy.tolist(), "test_acc_mean": accuracy.mean().item(),
        "test_acc_std": accuracy.std(unbiased=False).item(), **measured, "train_seconds": seconds,
        "data": info, "run_dir": str(run_dir), "population": str(run_dir / "population.pt"),
        "mode": portable.describe(),
    }  # fmt: skip
    write_json(run_dir / "metrics.json", metrics, sort_keys=True)
    trained = "" if on_train is None else f", training accuracy {100 * metrics['train_acc_mean']:.2f} %"
    kind = "population" if population.modality is ROWS else f"{population.modality.kind} population"
    print(f"{kind}: {population.size} members, test accuracy {100 * metrics['test_acc_mean']:.2f} % "
          f"± {100 * metrics['test_acc_std']:.2f}{trained}; {metrics['train_seconds']} s; run {run_dir}")  # fmt: skip
    return metrics


def main(args: list[str] | None = None) -> dict | None:
    """Train, test on the held-out split and return the test metrics (None if interrupted)."""
    args = list(sys.argv[1:] if args is None else args)
    portable.enable_if_asked(args)  # in-process callers: an error unless the process started in the mode
    args = one_net_option(resume_args(args))
    check_config_files(args)
    defaults = default_configs(args)
    try:
        cli = TrainCLI(
            run=False,
            subclass_mode_model=True,
            subclass_mode_data=True,
            save_config_callback=RunFolderConfig,
            save_config_kwargs={"overwrite": True, "save_to_log_dir": False},
            parser_kwargs={"default_config_files": defaults, "allow_abbrev": False, "exit_on_error": False},
            args=args,
        )
    except argparse.ArgumentError as err:
        raise InputError(short_parse_error(str(err))) from None
    print_defaults(cli, defaults)
    try:
        record_fitted_transform(cli)
        if isinstance(cli.model, Population):
            return fit_population_run(cli) if cli.model.CHUNKED else fit_whole_population_run(cli)
        return fit_single(cli)
    except BaseException:
        remove_untrained_run(cli.new_folders)
        raise
    finally:
        release(cli.run_dir)


def record_fitted_transform(cli: TrainCLI) -> None:
    """A datamodule that fits its preprocessing to the training rows (``fitted_transform``, e.g.
    ``CSVDataModule``) gets it as its ``fitted`` option in the run's config (``config.yaml``, a
    population file's metadata), so whatever rebuilds the datamodule from there applies the same
    transform."""
    fitted = getattr(cli.datamodule, "fitted_transform", None)
    if fitted is not None:
        cli.config.data.init_args.fitted = fitted


def remove_untrained_run(new_folders: list[Path]) -> None:
    """Remove the run folder and its parents that this process made (``new_folders``, innermost
    first; none for ``--resume``) if no epoch ended in it (no checkpoint, chunk or population
    file): a run that failed before training (e.g. on an unreadable image) leaves nothing to
    resume, only its config and the logger's files. An open W&B run is finished first, quietly
    (its files are written there, and its note on syncing them would name a folder that is gone)."""
    if not new_folders or not new_folders[0].is_dir():
        return
    if any(p.suffix in (".ckpt", ".pt") for p in new_folders[0].rglob("*")):
        return
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            wandb.finish(exit_code=1)
    shutil.rmtree(new_folders[0], ignore_errors=True)
    for folder in new_folders[1:]:
        try:
            folder.rmdir()  # only while empty
        except OSError:
            break


if __name__ == "__main__":
    run_entry_point(main)
