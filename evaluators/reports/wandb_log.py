"""W&B runs of the protocols and reports, in project ``WANDB_PROJECT`` where train.py logs too,
one W&B group per population, linked to the population's training runs.

* ``log_to`` (``LOG_TO``): ``wandb`` (the default) logs online when the environment says so
  (``WANDB_MODE=online``, or ``WANDB_API_KEY`` set and ``WANDB_MODE`` unset) and offline
  otherwise (``wandb_mode``); ``wandb_offline`` and ``wandb_online`` force one; ``none`` logs
  nothing.
* The group (``run_group``): train.py writes a run to ``<output_dir>/<dataset>/<run>``; a
  population trained in one run (a population file) is the group ``<dataset>/<run>``; a model
  trained alone is a member of the population its ``output_dir`` holds (a folder of runs), the
  group ``<dataset>/<output_dir's name>``. train.py logs training into that group and every
  protocol on the population logs into it too (``population_link``).
* The link (``Link``): a protocol's W&B config carries its group, the W&B ids of the training
  runs (``training_run_ids``: each run folder's ``config.yaml`` records its W&B logger's id
  when it was trained with ``--log_to wandb*``; none for ``csv``/``none``) and the groups they
  were logged in (``training_groups``; runs trained before the groups were per population
  were grouped by dataset). train.py also records the link in the population file
  (``training_link``), which keeps it when moved away from its run folder.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from evaluators.inputs.image_members import member_runs
from evaluators.inputs.sources import POPULATIONS, run_kind
from foundation.errors import InputError
from lightning_modules.population_io import read_population_file

LOG_TO = ("wandb", "wandb_offline", "wandb_online", "none")
WANDB_PROJECT = "reliable-explanations"


def check_log_to(value: str, option: str = "log_to") -> None:
    if value not in LOG_TO:
        raise InputError(f"option {option}={value!r}; expected one of {list(LOG_TO)}")


@dataclass(kw_only=True)
class ReportLogging:
    """The option every protocol's config shares for where its report goes besides its files:
    ``log_to``, one of ``LOG_TO`` (``wandb``, ``wandb_offline``, ``wandb_online``, ``none``),
    checked when the config is made. Listed first among a config's bases, its check runs, then
    the next base's ``__post_init__``."""

    log_to: str = "wandb"

    def __post_init__(self) -> None:
        check_log_to(self.log_to)
        after = getattr(super(), "__post_init__", None)
        if after is not None:
            after()


def wandb_mode(log_to: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """``online``, ``offline`` or None (``none``: no W&B run) for ``log_to``: ``wandb`` is online
    when ``WANDB_MODE`` is ``online``, or ``WANDB_API_KEY`` is set and ``WANDB_MODE`` unset; else offline."""
    check_log_to(log_to)
    if log_to == "none":
        return None
    if log_to != "wandb":
        return log_to.removeprefix("wandb_")
    mode = environ.get("WANDB_MODE", "")
    return "online" if mode == "online" or (not mode and environ.get("WANDB_API_KEY")) else "offline"


def run_group(run_dir: Path, population: bool) -> str:
    """The W&B group of train.py's run folder ``<output_dir>/<dataset>/<run>``: ``<dataset>/<run>``
    for a ``population`` trained in the run, else ``<dataset>/<output_dir's name>`` (a member)."""
    run_dir = Path(run_dir).resolve()
    return f"{run_dir.parent.name}/{(run_dir if population else run_dir.parent.parent).name}"


def training_runs(source: str | Path) -> list[Path]:
    """The train.py run folders (those holding ``config.yaml``) that ``source`` was trained in: a
    population file's or model file's folder (or the folder above, for ``checkpoints/<file>``), a
    run folder, or each run of a folder of runs; none for a file outside a run folder."""
    path = Path(source)
    if path.is_file():
        found = [folder for folder in (path.parent, path.parent.parent) if (folder / "config.yaml").is_file()]
        return found[:1]
    if (path / "config.yaml").is_file():
        return [path]
    return member_runs(path) if path.is_dir() else []


@dataclass(frozen=True)
class Link:
    """A protocol run's W&B group and its population's training runs' W&B ids and groups."""

    group: str
    training_run_ids: list[str]
    training_groups: list[str]

    def config(self) -> dict:
        return {"group": self.group, "training_run_ids": self.training_run_ids,
                "training_groups": self.training_groups}  # fmt: skip


def logger_args(config: dict) -> dict:
    """The W&B logger's ``init_args`` in a train.py run's config (its ``config.yaml``); {} for a
    run trained with another logger or none."""
    logger = (config.get("trainer") or {}).get("logger") or {}
    if isinstance(logger, dict) and str(logger.get("class_path", "")).endswith("WandbLogger"):
        return logger.get("init_args") or {}
    return {}


def training_link(config: dict, run_dir: Path) -> dict:
    """The link train.py writes into a population file's metadata (``wandb_link``): the file's
    group and its training run's W&B id and group, so that a file moved out of its run folder
    keeps them (:func:`population_link`)."""
    args = logger_args(config)
    return Link(run_group(run_dir, population=True), [str(args["id"])] if args.get("id") else [],
                [str(args["group"])] if args.get("group") else []).config()  # fmt: skip


def recorded_link(path: Path) -> dict | None:
    """The ``wandb_link`` a population file's metadata records, or None (another file, or one
    written before train.py recorded it)."""
    try:
        return read_population_file(path, mmap=True)["metadata"].get("wandb_link")
    except InputError:  # a model file, not a population file
        return None


def population_link(source: str | Path, *others: str | Path) -> Link:
    """The ``Link`` of the population (or model) ``source``, with the training runs of ``others``
    too (e.g. data randomisation's permuted-label side). A population file outside its run folder
    keeps the link train.py recorded in it; outside train.py's run folders the group is
    ``<folder>/<file or folder name>``."""
    path = Path(source).resolve()
    runs = training_runs(path)
    others_runs = [run for other in others for run in training_runs(Path(other).resolve())]
    configs = [yaml.safe_load((run / "config.yaml").read_text()) or {} for run in [*runs, *others_runs]]
    wandb_args = [args for args in map(logger_args, configs) if args]
    ids = [str(a["id"]) for a in wandb_args if a.get("id")]
    groups = list(dict.fromkeys(str(a["group"]) for a in wandb_args if a.get("group")))
    if not runs:
        recorded = recorded_link(path) if path.is_file() else None
        if recorded is not None:
            return Link(recorded["group"], [*recorded["training_run_ids"], *ids],
                        list(dict.fromkeys([*recorded["training_groups"], *groups])))  # fmt: skip
        return Link(f"{path.parent.name}/{path.stem}", ids, groups)
    population = (runs[0] / "population.pt").is_file() or run_kind(configs[0]) in POPULATIONS
    return Link(run_group(runs[0], population), ids, groups)


def table_scalars(name: str, columns: list[str], rows: list[list], n_keys: int) -> dict[str, float]:
    """A table's numbers as scalars a dashboard charts across runs: ``<name>/<key>/.../<column>``
    for each row (its first ``n_keys`` cells name it) and each finite numeric cell after those."""
    out = {}
    for row in rows:
        key = "/".join(str(cell) for cell in row[:n_keys])
        for column, cell in zip(columns[n_keys:], row[n_keys:]):
            if isinstance(cell, (int, float)) and math.isfinite(cell):
                out[f"{name}/{key}/{column}"] = float(cell)
    return out


def log_report(log_to: str, out_dir: Path, job_type: str, config: dict,
               tables: dict[str, tuple[list[str], list[list]]] | None = None,
               images: dict[str, Path] | None = None, scalars: dict[str, float] | None = None,
               population: str | Path | list[str | Path] | None = None) -> None:  # fmt: skip
    """One W&B run in ``out_dir`` holding ``tables`` (name -> (columns, rows)), ``images``
    (name -> PNG) and ``scalars`` (name -> number, also the run's summary, which a dashboard
    charts across runs), in the group of what it evaluated, ``population`` (a population, run
    or model, or a list of them: ``population_link``, its ``Link.config`` in the config's
    ``wandb_link`` entry); nothing when ``log_to`` is ``none``."""
    names = [*(tables or {}), *(images or {}), *(scalars or {})]
    if len(set(names)) < len(names):  # one name, one logged value: a table would hide an image
        raise ValueError(f"W&B names logged twice: {sorted(n for n in set(names) if names.count(n) > 1)}")
    mode = wandb_mode(log_to)
    if mode is None:
        return
    import wandb

    sources = [] if population is None else population if isinstance(population, list) else [population]
    link = population_link(*sources) if sources else None
    config = config if link is None else {**config, "wandb_link": link.config()}
    run = wandb.init(project=WANDB_PROJECT, dir=str(out_dir), mode=mode, job_type=job_type, config=config,
                     group=None if link is None else link.group)  # fmt: skip
    run.log({**{name: wandb.Table(columns=columns, data=rows) for name, (columns, rows) in (tables or {}).items()},
             **{name: wandb.Image(str(path)) for name, path in (images or {}).items()}, **(scalars or {})})  # fmt: skip
    run.finish()
