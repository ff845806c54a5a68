"""Hooker et al. (2019)'s RemOve And Retrain benchmark: ``evaluate.py roar --config
configs/roar/<name>.yaml [--shard i/k] [--resume <folder>]``.

From a trained model (a ``train.py`` run folder: a tabular ``MLPClassifier`` or an
``ImageClassifier``) and its datamodule, the grid of ``evaluators.protocols.roar.grid``: every
estimator's maps of the training and test sets (cached), and for every cell (estimator, t)
K models retrained on the data with the top t removed and scored on the modified test set,
beside the clean model scored there without retraining; then ``evaluators.protocols.roar.report``'s
tables and plots.

A grid's folder is ``<output_dir>/<dataset>-<hash of the options that change its numbers>``,
the same for every process started with the same config: a re-run continues it (finished
cells are skipped), and k processes or SLURM array tasks given ``--shard i/k`` fill it
together; the one that finds every cell done writes the report (``roar.json``, CSV, PNG).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from evaluators.inputs.members import model_options
from evaluators.protocols.roar.grid import (RoarGrid, estimator_options, fresh_models, parse_shard, ranking_store,
                                            run_grid, stacked_retraining)
from evaluators.protocols.roar.rankings import SHARD_SIZE
from evaluators.protocols.roar.report import collect, markdown_table
from evaluators.protocols.registry import PROTOCOLS
from foundation.devices import resolve_device
from foundation.errors import InputError
from foundation.files import atomic_write, write_text
from evaluators.inputs.model_inputs import OPTIONS as MODEL_INPUT_OPTIONS
from evaluators.inputs.model_source import ModelSource
from evaluators.inputs.runs import load_run
from evaluators.reports.wandb_log import ReportLogging

# Options that say where things are, where results go or how cells are grouped: they change
# no number, so they do not name another grid.
UNNAMED_OPTIONS = ("data_dir", "output_dir", "cache_dir", "log_to", "cells_per_population", "kind")


@dataclass(kw_only=True)
class RoarConfig(ReportLogging, RoarGrid, ModelSource):
    """Options of the ROAR protocol (configs/roar/<name>.yaml): the clean model and where it
    runs (``ModelSource``: ``run`` a ``train.py`` folder or a model file, not a population),
    ``data`` (options overriding the run's datamodule, e.g. an image ``subset``), the maps'
    ``cache_dir`` (default ``<grid>/maps``; a shared folder lets grids of the same model reuse
    maps), and the grid's options (``RoarGrid``)."""

    data: dict = dataclasses.field(default_factory=dict)
    cache_dir: str | None = None
    output_dir: str = "runs/roar"

    def __post_init__(self) -> None:
        super().__post_init__()  # log_to, then RoarGrid's
        ModelSource.__post_init__(self)

    def report_name(self) -> str:
        return Path(self.run).resolve().parent.name


def grid_report_dir(cfg: RoarConfig) -> Path:
    """``<output_dir>/<dataset>-<12 hex digits>``, named by the options that change the grid's
    numbers, holding its ``config.yaml`` (made now if new)."""
    options = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in UNNAMED_OPTIONS}
    for key in ("data", "model_class", "model_args", "data_config", *MODEL_INPUT_OPTIONS):
        if not options[key]:  # left at its default: the name grids had before the option existed
            del options[key]
    if options["channels_last"]:  # the default, which changes numbers by float rounding only: the old name
        del options["channels_last"]
    digest = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:12]
    run_dir = Path(cfg.output_dir) / f"{cfg.report_name()}-{digest}"
    run_dir.mkdir(parents=True, exist_ok=True)
    config = run_dir / "config.yaml"
    if not config.exists():  # several shards may start at once: each writes the same text, atomically
        text = yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False)
        atomic_write(config, lambda tmp: tmp.write_text(text))
    return run_dir


def ranking_passes(model, data, cfg: RoarConfig, cache_dir: Path, shard: tuple[int, int] | None,
                   shard_size: int) -> None:  # fmt: skip
    """``--rankings_only``: every estimator's ranking pass (``rankings.ranking_pass``) over the
    train and test splits the image data has, for the grid's unit, ``square``, fractions and seed,
    in chunks of gcd(32, ``shard_size``) images."""
    if not callable(getattr(data, "stored_images", None)):
        raise InputError(f"--rankings_only: datamodule {type(data).__name__}; expected image data (stored_images)")
    present = data.split_sizes
    for name, options in cfg.estimators.items():
        for split in [s for s in ("train", "test") if data.stored_split_name(s) in present]:
            store = ranking_store(model, data, cfg, name, estimator_options(name, options or {}, data, cfg.seed),
                                  split, cache_dir, shard, shard_size)  # fmt: skip
            print(f"{name} {split}: {len(store.computed)} shard file(s) computed, {len(store.missing())} of "
                  f"{store.n_shards} missing, in {store.root}")  # fmt: skip


def evaluate_roar(cfg: RoarConfig, run_dir: Path, shard: tuple[int, int] | None = None, rankings_only: bool = False,
                  rankings_shard_size: int = SHARD_SIZE) -> dict | None:  # fmt: skip
    """Run the cells of ``shard`` not yet done; the report once every cell is (None before).
    ``rankings_only``: :func:`ranking_passes` into ``cache_dir`` (default ``<grid>/rankings``), None."""
    model, data, _ = load_run(Path(cfg.run), cfg.checkpoint, data_options=cfg.data, data_location=cfg.data_dir,
                              kind=cfg.kind, where=f"option run={cfg.run!r}", **model_options(cfg))
    model = model.to(resolve_device(cfg.device))
    if rankings_only:
        ranking_passes(model, data, cfg, Path(cfg.cache_dir or run_dir / "rankings"), shard, rankings_shard_size)
        return None
    if not stacked_retraining(model):
        fresh_models(model, [])  # a model that cannot be retrained from a seed is named before any map is made
    config = Path(cfg.run) / "config.yaml"  # a run folder's (a model file has none)
    epochs = yaml.safe_load(config.read_text()).get("trainer", {}).get("max_epochs") if config.is_file() else None
    cache = Path(cfg.cache_dir) if cfg.cache_dir else None
    missing = run_grid(model, data, cfg, run_dir, cache, shard, default_epochs=epochs)
    if missing:
        print(f"{len(missing)} cell(s) left to other shards, e.g. {missing[0].name}; the last shard writes the report")
        return None
    return collect(run_dir, cfg, dataclasses.asdict(cfg), cfg.log_to)


def write_roar_report(summary: dict, out_dir: Path) -> None:
    """Print the results table and write it as ``table.md`` (the other files are written by ``collect``)."""
    table = markdown_table(summary["rows"])
    write_text(out_dir / "table.md", table)
    print(table, end="")


PROTOCOLS.add(
    "roar", evaluate_roar,
    help="remove and retrain: accuracy of models retrained without each estimator's top pixels (Hooker et al.)",
    config=RoarConfig, write=write_roar_report, report="roar.json", resumable=True, source="model",
    options={"shard": dict(type=parse_shard, default=None, metavar="i/k", help="run cells i, i+k, ... only "
                           "(SLURM arrays); the last shard writes the report"),
             "rankings_only": dict(action="store_true", help="image data: only the sharded, resumable map "
                                   "pass storing each image's ranking (evaluators/protocols/roar/"
                                   "rankings.py), shard files i, i+k, ... with --shard; no cell is trained"),
             "rankings_shard_size": dict(type=int, default=256, metavar="N",
                                         help="images per ranking shard file (--rankings_only)")},
    report_dir=grid_report_dir)  # fmt: skip
