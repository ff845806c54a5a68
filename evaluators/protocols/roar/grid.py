"""The ROAR grid (Hooker et al. 2019, §4): every (estimator, fraction) cell retrained and
scored, cell by cell, resumable and shardable.

A cell (e, t) removes the fraction t of every training and test input's elements that the
estimator e ranks highest (its maps of the clean model, ``evaluators.protocols.roar.maps.dataset_maps``,
computed once per estimator and cached on disk; the removal is ``datamodules.roar``), then

* retrains K fresh models from random initialisation (seeds ``seed``, ..., ``seed + K - 1``)
  on the modified training set and scores each FINAL model's accuracy on the modified test
  set (never a maximum over epochs or test evaluations);
* scores the clean model on the same modified test set (the no-retrain variant).

t = 0 is one cell shared by every estimator (``clean-t00``: nothing removed). Tabular cells
train as ONE ``PopulationMLP``: the K retrainings of up to ``cells_per_population`` cells
(default: every cell the process has to run), member (c, k) reading cell c's modified rows
(``datamodules.stacked_cells``) and equal to ``MLPClassifier(seed=seed+k)`` trained alone on
them (``tests/evaluators/protocols/roar/test_grid.py``), so a tabular grid costs about one population's training.
Image cells fit K copies of the clean ``ImageClassifier`` one after another. Each fit runs under
a ``pl.Trainer`` built from the grid's ``trainer`` options (``devices``/``strategy``: Lightning
DDP over several GPUs for images; populations train on one device, their hand-written
stacked backward bypasses DDP's gradient hooks).

Image data served from files (an ``ImageFolderDataModule`` whose ``in_memory`` is false: images
larger than 64 pixels a side, ImageNet) never sits in memory: each estimator's maps are reduced
to rankings in a sharded, resumable pass (``evaluators.protocols.roar.rankings``; ``evaluate.py
roar --rankings_only --shard i/k`` runs it alone), each cell's modified splits are written once
as shards and served from them (``datamodules.roar_shards``), and accuracies are counted batch by
batch from the test loader; the cells' numbers equal the in-memory path's on data small enough
for both (``tests/evaluators/protocols/roar/test_streamed_grid.py``).

Every finished cell is written atomically to ``<out>/cells/<estimator>-t<pct>.json``; a run
skips the cells already there, so a grid killed at any moment loses at most the cells in
flight (an image cell; a tabular population's cells). ``shard=(i, k)`` runs cells i, i+k,
i+2k, ... of the fixed order (``grid_cells``), so k processes or SLURM array tasks split a
grid; whoever finds every cell done collects the results (``evaluators.protocols.roar.report``).
"""

from __future__ import annotations

import copy
import difflib
import inspect
import json
import math
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytorch_lightning as pl
import torch

from datamodules.roar import RemoveAndRetrainDataModule, model_inputs
from datamodules.roar_shards import ShardedDataModule, served_from_files
from datamodules.stacked_cells import StackedCellsDataModule
from evaluators.inputs.counts import counted
from foundation.finite import check_finite
from evaluators.protocols.roar.maps import dataset_maps
from evaluators.protocols.roar.rankings import PASS_CHUNK, SHARD_SIZE, RankingStore, ranking_pass, streamed_fill
from foundation.batching import rows_within
from foundation.errors import InputError
from foundation.files import write_json
from foundation.run_folders import launched_rank
from lightning_modules.interface import class_probabilities
from lightning_modules.mlp import MLPClassifier
from lightning_modules.population import PopulationMLP

FRACTIONS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9)  # Hooker et al.'s t
CLEAN = "clean"  # the estimator name of the shared t = 0 cell
UNITS = ("element", "pixel")


def _default_estimators() -> dict:
    """The tabular grid of issue 18 (7a); the controls ``random`` (and ``sobel`` for images)
    are registry names too."""
    return {"saliency": {}, "smoothgrad": {}, "smoothgrad_sq": {}, "vargrad": {}, "integrated_gradients": {},
            "deepshap": {}, "random": {}}  # fmt: skip


@dataclass(kw_only=True)
class RoarGrid:
    """What a ROAR grid runs: ``estimators`` (name -> options of ``estimator_maps``: any
    ``evaluators.maps.explain`` registry name, a control of ``ROAR_CONTROLS`` or an
    ``agg:<aggregator>``), ``fractions`` t, ``retrainings`` K per cell, the retraining
    ``trainer``'s options (``pl.Trainer`` keywords; ``max_epochs`` defaults to the clean
    model's training), the removal options ``unit``, ``square``, ``keep`` (KAR) of
    ``datamodules.roar.remove_top``, the ``seed`` of the retrainings, the random control and
    the tie-breaking order, and ``channels_last``: an image model whose class takes a
    ``channels_last`` option computes its maps, retrains and scores in channels-last memory
    format (:func:`in_fast_layout`)."""

    estimators: dict = field(default_factory=_default_estimators)
    fractions: list[float] = field(default_factory=lambda: list(FRACTIONS))
    retrainings: int = 5
    trainer: dict = field(default_factory=dict)
    unit: str = "element"
    square: bool = True
    keep: bool = False
    seed: int = 0
    cells_per_population: int | None = None
    channels_last: bool = True

    def __post_init__(self) -> None:
        if not self.estimators:
            raise InputError("option estimators is empty; expected estimator name: {options}")
        if CLEAN in self.estimators:
            raise InputError(f"option estimators: {CLEAN!r} names the shared t = 0 cell; expected another name")
        if not self.fractions or any(not 0.0 <= t < 1.0 for t in self.fractions):
            raise InputError(f"option fractions={self.fractions}; expected fractions in [0, 1), "
                             f"e.g. {list(FRACTIONS)}")  # fmt: skip
        if len({cell_name(CLEAN, t) for t in self.fractions}) != len(self.fractions):
            raise InputError(f"option fractions={self.fractions}: two round to the same percentage")
        if self.retrainings < 1:
            raise InputError(f"option retrainings={self.retrainings}; expected at least 1")
        if self.unit not in UNITS:
            raise InputError(f"option unit={self.unit!r}; expected one of {list(UNITS)}")
        if self.cells_per_population is not None and self.cells_per_population < 1:
            raise InputError(f"option cells_per_population={self.cells_per_population}; expected at least 1 or null")
        if not isinstance(self.trainer, dict):
            raise InputError(f"option trainer={self.trainer!r}; expected a mapping of pl.Trainer options")
        options = inspect.signature(pl.Trainer).parameters
        for key in self.trainer:
            if key not in options:
                close = difflib.get_close_matches(key, options, n=3)
                raise InputError(f"option trainer.{key}: not a pl.Trainer option; expected one of "
                                 f"{close or sorted(options)}")  # fmt: skip


@dataclass(frozen=True)
class Cell:
    estimator: str
    fraction: float

    @property
    def name(self) -> str:
        return cell_name(self.estimator, self.fraction)


def cell_name(estimator: str, fraction: float) -> str:
    """``<estimator>-t<pct>``, the percentage removed in two digits (``saliency-t30``)."""
    return f"{estimator}-t{round(100 * fraction):02d}"


def grid_cells(grid: RoarGrid) -> list[Cell]:
    """The grid's cells in their fixed order: the shared t = 0 cell (if 0 is a fraction), then
    estimator by estimator (config order), fraction by fraction (ascending)."""
    cells = [Cell(CLEAN, 0.0)] if 0.0 in grid.fractions else []
    return cells + [Cell(e, t) for e in grid.estimators for t in sorted(grid.fractions) if t > 0]


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/k"`` -> (i, k), 0 <= i < k (SLURM: ``$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT``)."""
    index, sep, count = text.partition("/")
    if not (sep and index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise InputError(f"option --shard {text!r}; expected i/k with 0 <= i < k, e.g. 0/4")
    return int(index), int(count)


def shard_cells(cells: list[Cell], shard: tuple[int, int] | None) -> list[Cell]:
    """Cells i, i+k, i+2k, ... of ``cells`` for shard (i, k); all of them for ``None``."""
    return cells if shard is None else cells[shard[0] :: shard[1]]


def cell_path(out_dir: Path, cell: Cell) -> Path:
    return out_dir / "cells" / f"{cell.name}.json"


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int | None = None,
             what: str = "the model") -> torch.Tensor:  # fmt: skip
    """The share of ``x`` that ``model`` classifies as ``y`` (one value; (M,) for a population),
    in batches on the model's device: ``batch`` rows, by default 4,096 holding at most 2^22
    input pixels (4,096 images up to 32 × 32, 83 at 224 × 224). ``what`` names the model where
    its outputs are not finite (:func:`loader_accuracy`)."""
    batch = batch or rows_within(x, 4096, 2**22)
    return loader_accuracy(model, zip(x.split(batch), y.split(batch)), what)


def loader_accuracy(model: torch.nn.Module, loader, what: str = "the model") -> torch.Tensor:
    """:func:`accuracy` over the (x, y) batches of ``loader`` (e.g. a split served from shards),
    on the model's device. Class probabilities with NaN or ±inf are refused, the error naming
    ``what`` and the test row: their argmax would be a class all the same."""
    device = next(model.parameters()).device
    correct, count = 0, 0
    with torch.no_grad():
        for xs, ys in loader:
            probabilities = class_probabilities(model, xs.to(device))
            check_finite(probabilities.movedim(-2, 0), f"{what}: class probabilities", "test row",
                         numbers=torch.arange(count, count + len(ys)))  # fmt: skip
            correct = correct + (probabilities.argmax(-1) == ys.to(device)).sum(-1)
            count += len(ys)
    return (correct.double() / count).cpu()


def streams(clean, data) -> bool:
    """Whether a grid's cells read ``data`` from shards on disk: image data served from files."""
    return not stacked_retraining(clean) and served_from_files(data)


def stacked_retraining(clean) -> bool:
    """Whether ``clean``'s retrainings train as one stacked population (its class's ``RETRAINS_STACKED``)."""
    return getattr(clean, "RETRAINS_STACKED", False)


def fresh_population(clean: MLPClassifier, seeds: list[int], copies: int) -> PopulationMLP:
    """An untrained ``PopulationMLP`` like the tabular ``clean``: ``copies`` blocks of members
    initialised with ``seeds`` (member c·K + k alone is ``MLPClassifier(seed=seeds[k])``)."""
    hp = dict(clean.hparams)
    if not stacked_retraining(clean):
        raise InputError(f"ROAR retrains tabular MLPClassifier models; got {type(clean).__name__}")
    if hp.get("dropout", 0.0):
        raise InputError(f"ROAR: the clean MLP has dropout={hp['dropout']}; populations train without "
                         "dropout, expected a model trained with dropout 0")  # fmt: skip
    keep = ("in_features", "hidden", "lr", "weight_decay", "explain_output", "loss_on", "num_classes")
    first = PopulationMLP(seeds=seeds, **{k: hp[k] for k in keep})
    # PopulationMLP's seeds must differ: the whole population is labelled 0 .. M-1 (seeds matter
    # only to a per-member data order, unused here) and every block copies the first's weights
    whole = PopulationMLP(**first.init_kwargs(), seeds=list(range(copies * len(seeds))), initialise=False)
    with torch.no_grad():
        for mine, block in zip(whole.parameters(), first.parameters()):
            mine.copy_(block.repeat(copies, 1, 1))
    return whole


def fresh_models(clean: pl.LightningModule, seeds: list[int]) -> list[pl.LightningModule]:
    """Untrained image models like ``clean`` initialised with ``seeds``: its class and
    hyperparameters, no pretrained weights."""
    hp = dict(clean.hparams)
    if "seed" not in hp:
        raise InputError(f"ROAR retrains models from a seed option; {type(clean).__name__} has none (a model "
                         "file cannot be retrained: give the train.py run of a Classifier, ImageClassifier or "
                         "MLPClassifier)")  # fmt: skip
    return [type(clean)(**{**hp, "seed": s, **({"weights_path": None} if "weights_path" in hp else {})})
            for s in seeds]  # fmt: skip


def make_trainer(grid: RoarGrid, default_epochs: int | None, root: Path) -> pl.Trainer:
    """A ``pl.Trainer`` for one retraining: the grid's ``trainer`` options over quiet defaults
    (no logger, checkpoints or progress bar); ``max_epochs`` from the clean model's run unless
    given."""
    options = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
               "enable_model_summary": False, "max_epochs": default_epochs, "default_root_dir": str(root),
               **grid.trainer}  # fmt: skip
    if options["max_epochs"] is None:
        raise InputError("option trainer.max_epochs is not set and the clean run names none; expected a number")
    return pl.Trainer(**options)


def cell_record(cell: Cell, seeds: list[int], acc: torch.Tensor, no_retrain: torch.Tensor, seconds: float) -> dict:
    """What a cell's JSON file holds (``seconds``: the cell's share of its fit's time)."""
    return {"estimator": cell.estimator, "fraction": cell.fraction, "seeds": seeds, "retrain_acc": acc.tolist(),
            "retrain_mean": acc.mean().item(), "retrain_std": acc.std().item() if len(acc) > 1 else 0.0,
            "no_retrain_acc": no_retrain.item(), "seconds": seconds}  # fmt: skip


def run_cells(clean: pl.LightningModule, data, grid: RoarGrid, cells: list[Cell], cache_dir: Path,
              default_epochs: int | None, root: Path,
              stream_dirs: tuple[Path, Path] | None = None) -> tuple[list[dict], int]:  # fmt: skip
    """Cells' modified data, their K retrained models' and the clean model's accuracy on the
    modified test sets: tabular cells as one population, an image cell (one at a time) as K
    fits; ``stream_dirs`` (rankings, shards): an image cell read from shards (:func:`streamed_data`).
    Returns the cells' records and the global rank of this process."""
    start = time.perf_counter()
    seeds = [grid.seed + k for k in range(grid.retrainings)]
    if stream_dirs is not None:  # image data from files: one cell, its splits written as shards
        modified = [streamed_data(clean, data, grid, cells[0], *stream_dirs)]
        tests = [None]
    else:
        modified = [modified_data(clean, data, grid, cell, cache_dir) for cell in cells]
        tests = [m.modified_split("test") for m in modified]

    def clean_accuracy() -> list[torch.Tensor]:
        return [cell_accuracy(clean, m, test, f"ROAR cell {cell.name!r}: the clean model")
                for cell, m, test in zip(cells, modified, tests)]  # fmt: skip

    # in memory: before retraining, so a NaN clean model stops the cell before any work; shards: once
    # the retraining's prepare_data has written them (once per node, under a launcher too)
    no_retrain = clean_accuracy() if stream_dirs is None else None
    if stacked_retraining(clean):
        trainer = make_trainer(grid, default_epochs, root)
        population = fresh_population(clean, seeds, len(cells))
        copies = torch.stack([m.modified_split("train")[0] for m in modified])
        trainer.fit(population, datamodule=StackedCellsDataModule(data, copies, len(seeds)))
        k = len(seeds)  # cell c's members: c·K .. c·K + K - 1
        acc = torch.stack([accuracy(population.subset(list(range(c * k, c * k + k))).to(clean.device).eval(), *test,
                                    what=f"ROAR cell {cell.name!r}: the retrained models")
                           for c, (cell, test) in enumerate(zip(cells, tests))])  # fmt: skip
    else:  # one image cell at a time
        acc = []
        for seed, model in zip(seeds, fresh_models(clean, seeds)):
            trainer = make_trainer(grid, default_epochs, root)
            trainer.fit(model, datamodule=modified[0])
            what = f"ROAR cell {cells[0].name!r}: the model retrained with seed {seed}"
            acc.append(cell_accuracy(model.to(clean.device).eval(), modified[0], tests[0], what))
        acc = torch.stack(acc)[None]
    no_retrain = clean_accuracy() if no_retrain is None else no_retrain
    seconds = (time.perf_counter() - start) / len(cells)
    return [cell_record(cell, seeds, a, clean_acc, seconds)
            for cell, a, clean_acc in zip(cells, acc, no_retrain)], trainer.global_rank  # fmt: skip


def cell_accuracy(model: torch.nn.Module, modified, test: tuple[torch.Tensor, torch.Tensor] | None,
                  what: str) -> torch.Tensor:  # fmt: skip
    """``model``'s accuracy on the cell's modified test split: ``test`` (x, y) in memory, or, where
    None, the batches of ``modified``'s test loader (shards); ``what`` names the model in errors."""
    if test is not None:
        return accuracy(model, *test, what=what)
    return loader_accuracy(model, modified.test_dataloader(), what)


def modified_data(clean: pl.LightningModule, data, grid: RoarGrid, cell: Cell,
                  cache_dir: Path) -> RemoveAndRetrainDataModule:  # fmt: skip
    """The cell's datamodule: the clean data with the top ``cell.fraction`` of the estimator's
    (cached) maps removed, train and test; the clean data itself for the t = 0 cell."""
    estimator, options = cell_estimator(cell, grid, data)
    maps = {split: dataset_maps(clean, data, estimator, split, cache_dir, seed=grid.seed, **options)
            for split in ("train", "test")}  # fmt: skip
    return RemoveAndRetrainDataModule(data, maps["train"], maps["test"], cell.fraction, unit=grid.unit,
                                      square=grid.square, keep=grid.keep, seed=grid.seed)  # fmt: skip


def cell_estimator(cell: Cell, grid: RoarGrid, data) -> tuple[str, dict]:
    """The estimator whose ranking the cell removes by, and its options (:func:`estimator_options`)."""
    if cell.estimator == CLEAN:
        return "random", {}  # any ranking: nothing is removed at t = 0
    return cell.estimator, estimator_options(cell.estimator, grid.estimators[cell.estimator], data, grid.seed)


def ranking_store(clean: pl.LightningModule, data, grid: RoarGrid, estimator: str, options: dict, split: str,
                  rankings_dir: Path, shard: tuple[int, int] | None = None,
                  shard_size: int = SHARD_SIZE) -> RankingStore:  # fmt: skip
    """The estimator's rankings of ``split`` for the grid's unit, ``square``, fractions and seed
    (``rankings.ranking_pass``, chunks of gcd(32, ``shard_size``) images), its shard files of
    ``shard`` computed where missing: the same files whether ``--rankings_only`` or a cell made them.
    Under a launcher of several processes (torchrun, srun) and ``shard=None``, each process first
    computes its own part (i, k) = (rank, world size), then the parts still missing, last first, so
    that it helps a slower rank from the other end instead of repeating the whole pass."""
    def run(part: tuple[int, int] | None, descending: bool = False) -> RankingStore:
        return ranking_pass(clean, data, estimator, split, rankings_dir, seed=grid.seed, shard=part,
                            chunk=math.gcd(PASS_CHUNK, shard_size), shard_size=shard_size, units=(grid.unit,),
                            square=grid.square, fractions=grid.fractions, descending=descending,
                            **options)  # fmt: skip

    rank, world = launched_rank()
    if shard is not None or world == 1:
        return run(shard)
    run((rank, world))
    return run(None, descending=True)


def streamed_data(clean: pl.LightningModule, data, grid: RoarGrid, cell: Cell, rankings_dir: Path,
                  shards_dir: Path) -> ShardedDataModule:  # fmt: skip
    """The cell's datamodule for image data served from files: both splits' rankings
    (:func:`ranking_store`), the training mean as fill (``streamed_fill``) and the splits with the
    top ``cell.fraction`` replaced, written as shards under ``shards_dir`` in ``prepare_data``."""
    fill = streamed_fill(data)
    modify, name = {}, {}
    if cell.fraction == 0.0:  # t = 0 needs no ranking: ROAR replaces nothing, KAR everything
        for split in ("train", "test"):
            modify[split] = partial(_nothing_kept, fill) if grid.keep else _unchanged
            name[split] = f"fraction 0, keep {grid.keep}, fill {fill.tolist()}"
        return ShardedDataModule(data, modify, name, shards_dir)
    estimator, options = cell_estimator(cell, grid, data)
    for split in ("train", "test"):
        store = ranking_store(clean, data, grid, estimator, options, split, rankings_dir)
        modify[split] = store.modifier(cell.fraction, fill, grid.unit, grid.keep)
        name[split] = (f"rankings {store.root.name}, fraction {cell.fraction}, unit {grid.unit}, keep {grid.keep}, "
                       f"fill {fill.tolist()}")  # fmt: skip
    return ShardedDataModule(data, modify, name, shards_dir)


def _unchanged(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return x


def _nothing_kept(fill: torch.Tensor, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return fill.to(x.device, x.dtype).view(-1, 1, 1).expand_as(x).clone()


N_BASELINES = 100  # the default of an estimator's n_baselines


def estimator_options(name: str, options: dict, data, seed: int) -> dict:
    """Estimator ``name``'s options with a named ``baselines`` made a tensor: ``training`` (a sample of
    ``n_baselines`` training inputs, default 100, drawn with ``seed``; DeepSHAP's background) or
    ``mean`` (the training mean, one input)."""
    options = dict(options)
    named, n = options.get("baselines"), options.pop("n_baselines", N_BASELINES)
    if isinstance(named, str):
        x, _ = model_inputs(data, "train")
        if named == "training":
            n = counted(f"estimators.{name}.n_baselines", n, len(x), "training split", "inputs", N_BASELINES)
            options["baselines"] = x[torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:n]]
        elif named == "mean":
            options["baselines"] = x.mean(0, keepdim=True)
        else:
            raise InputError(f"estimator option baselines={named!r}; expected 'training', 'mean' or a tensor")
    return options


def run_grid(clean: pl.LightningModule, data, grid: RoarGrid, out_dir: Path, cache_dir: Path | None = None,
             shard: tuple[int, int] | None = None, default_epochs: int | None = None) -> list[Cell]:  # fmt: skip
    """Run the cells of ``shard`` not yet in ``out_dir/cells`` (image cells one after another,
    tabular ones in populations of ``cells_per_population`` cells), each written atomically
    when finished (by the global rank 0 only under DDP). Maps are cached in ``cache_dir``
    (default ``out_dir/maps``); for image data served from files, rankings in ``cache_dir``
    (default ``out_dir/rankings``) and the modified splits' shards in ``<cache_dir or out_dir>/shards``.
    Returns the grid's cells still missing (other shards', or none)."""
    streamed = streams(clean, data)
    stream_dirs = (cache_dir or out_dir / "rankings", (cache_dir or out_dir) / "shards") if streamed else None
    cache_dir = cache_dir or out_dir / "maps"
    stacked = stacked_retraining(clean)
    if stacked and (str(grid.trainer.get("devices", 1)) != "1" or "ddp" in str(grid.trainer.get("strategy"))):
        raise InputError(f"option trainer={grid.trainer}: a tabular cell's K retrainings are one population on one "
                         "device; expected devices: 1 and no DDP strategy")  # fmt: skip
    clean = in_fast_layout(clean) if grid.channels_last else clean.eval()
    cells = grid_cells(grid)
    pending = [c for c in shard_cells(cells, shard) if not cell_path(out_dir, c).is_file()]
    size = (grid.cells_per_population or max(1, len(pending))) if stacked else 1
    for group in [pending[i : i + size] for i in range(0, len(pending), size)]:
        records, rank = run_cells(clean, data, grid, group, cache_dir, default_epochs, out_dir / "trainer",
                                  stream_dirs)  # fmt: skip
        for cell, record in zip(group, records):
            if rank == 0:
                path = cell_path(out_dir, cell)
                path.parent.mkdir(parents=True, exist_ok=True)
                write_json(path, record)
    return [c for c in cells if not cell_path(out_dir, c).is_file()]


def in_fast_layout(clean: pl.LightningModule) -> pl.LightningModule:
    """``clean`` (in eval mode) as the grid computes with it: where its class takes a
    ``channels_last`` option (``ImageClassifier``) and it is off, a copy with the option on and its
    weights in channels-last memory format, so that its maps, its no-retrain accuracies and the
    retrainings built from its hyperparameters (:func:`fresh_models`) run channels-last.

    Speed is the reason: on a CPU, PyTorch's NCHW max-pooling and convolution kernels are the
    bulk of an image cell's time, and channels-last runs a small CNN's training step about 25 %
    and its gradient maps 30-50 % faster (docs/roar.md). The numbers differ from the default
    layout's by float rounding only; the weights' bytes, and so the maps' cache key, are the same."""
    if clean.hparams.get("channels_last", True):
        return clean.eval()
    fast = copy.deepcopy(clean).to(memory_format=torch.channels_last)
    fast.hparams["channels_last"] = True
    return fast.eval()


def read_cells(out_dir: Path, grid: RoarGrid) -> list[dict]:
    """Every cell's record, in the grid's order."""
    return [json.loads(cell_path(out_dir, c).read_text()) for c in grid_cells(grid)]
