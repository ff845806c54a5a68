"""Training a population of any size in chunks, resumable, with its reports.

The members are split into chunks that are trained one after another, each a
``PopulationMLP`` under its own ``Trainer``. Finished chunks are saved to
``<run>/chunks/chunk-<k>.pt``; the chunk in progress checkpoints every epoch to
``<run>/chunks/chunk-<k>/last.ckpt``. Running again on the same run folder skips
finished chunks and resumes the unfinished one from its last epoch, so the result
equals an uninterrupted run's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch

from datamodules.tabular import TabularDataModule
from foundation.files import pyplot, save_figure, write_text
from lightning_modules.allocator import HEAP_BLOCK_BYTES
from lightning_modules.population import PopulationMLP
from lightning_modules.population_io import load_population, save_population

log = logging.getLogger(__name__)

BYTES = 4  # float32


def auto_chunk_size(population: PopulationMLP, batch_size: int, device: torch.device) -> int:
    """Members per chunk.

    On a GPU: as many as fit in half the free memory. On a CPU: as many as keep every
    tensor of a training step (a layer's activations for the batch, a stacked
    parameter and the optimiser's temporaries of its size) at or below 32 MiB, the
    largest block glibc's allocator serves from its heap once ``retain_freed_memory``
    has raised its thresholds: larger blocks are mapped and unmapped at every step.
    Within that bound the fewest chunks win (each pays a ``Trainer`` set-up and a test
    pass; measured: docs/tabular_population.md).
    """
    widths = [population.hparams.in_features, *population.hparams.hidden, population.hparams.num_classes]
    if device.type == "cuda":
        params = sum(a * b + b for a, b in zip(widths[:-1], widths[1:]))
        per_member = BYTES * (4 * params + 3 * batch_size * sum(widths[1:]))
        free, _ = torch.cuda.mem_get_info(device)
        return int(min(population.size, max(1, free // 2 // per_member)))
    largest = max(batch_size * max(widths[1:]), max(a * b for a, b in zip(widths[:-1], widths[1:])))
    return int(min(population.size, max(1, HEAP_BLOCK_BYTES // (BYTES * largest))))


def plan_chunks(size: int, chunk_size: int) -> list[list[int]]:
    """The fewest chunks of at most ``chunk_size`` members, balanced (sizes differ by at
    most one): 100 members at 69 train as 50 + 50, not 69 + a less efficient 31."""
    n_chunks = -(-size // chunk_size)
    bounds = [round(k * size / n_chunks) for k in range(n_chunks + 1)]
    return [list(range(a, b)) for a, b in zip(bounds[:-1], bounds[1:])]


def fit_population(
    population: PopulationMLP,
    datamodule: TabularDataModule,
    make_trainer: Callable[[Path], pl.Trainer],
    run_dir: Path,
    chunk_size: int | None = None,
    train_accuracy: Callable[[PopulationMLP], torch.Tensor] | None = None,
) -> tuple[PopulationMLP, torch.Tensor] | None:
    """Train all members chunk by chunk; return (population, per-member test accuracy),
    or None when a chunk's training was interrupted (its checkpoint stays for resuming).
    ``train_accuracy``: a chunk's per-member accuracy on the training split, measured after its
    test, kept in its chunk file and set as the population's ``member_train_acc``."""
    chunks_dir = run_dir / "chunks"
    chunks_dir.mkdir(parents=True, exist_ok=True)
    size = chunk_size or auto_chunk_size(population, datamodule.batch_size, population.device)
    plan = plan_chunks(population.size, size)
    log.info("population of %d members in %d chunk(s) of up to %d", population.size, len(plan), size)
    for k, indices in enumerate(plan):
        done = chunks_dir / f"chunk-{k:03d}.pt"
        seeds = [population.seeds[i] for i in indices]
        if done.exists():
            _, saved = load_population(done)
            if saved["seeds"] != seeds:
                raise RuntimeError(f"{done}: holds seeds {saved['seeds'][:3]}...; this run expects {seeds[:3]}...")
            log.info("chunk %d/%d already trained: %s", k + 1, len(plan), done)
            continue
        part = population.subset(indices)
        trainer = make_trainer(chunks_dir / f"chunk-{k:03d}")
        ckpt = chunks_dir / f"chunk-{k:03d}" / "last.ckpt"
        trainer.fit(part, datamodule=datamodule, ckpt_path=ckpt if ckpt.exists() else None, weights_only=True)
        if trainer.interrupted or trainer.current_epoch < trainer.max_epochs:
            return None
        trainer.test(part, datamodule=datamodule, verbose=False)
        metadata, tested = {"chunk": k}, part.member_test_acc.tolist()
        if train_accuracy is not None:
            metadata["member_train_acc"] = train_accuracy(part).tolist()
        save_population(done, part, tested, metadata)
    parts = [load_population(chunks_dir / f"chunk-{k:03d}.pt") for k in range(len(plan))]
    whole = PopulationMLP.concatenate([p for p, _ in parts])
    accuracy = torch.tensor([a for _, payload in parts for a in payload["member_test_acc"]])
    if all("member_train_acc" in payload["metadata"] for _, payload in parts):
        whole.member_train_acc = torch.tensor([a for _, p in parts for a in p["metadata"]["member_train_acc"]])
    return whole, accuracy


def drop_below_mean(accuracy: torch.Tensor, margin: float | None) -> torch.Tensor:
    """Ley et al.'s filter: keep members whose test accuracy is at least mean - margin
    (``margin=0.01``: at most one percentage point below the mean). None keeps all."""
    if margin is None:
        return torch.ones_like(accuracy, dtype=torch.bool)
    return accuracy >= accuracy.mean() - margin


def write_reports(run_dir: Path, seeds: list[int], accuracy: torch.Tensor, kept: torch.Tensor, title: str,
                  train_accuracy: torch.Tensor | None = None) -> Path:  # fmt: skip
    """``members.csv`` (seed, test accuracy, kept and, where given, training accuracy) and
    ``accuracy_histogram.png``."""
    plt = pyplot()

    rows = zip(seeds, accuracy.tolist(), kept.tolist())
    lines = ["seed,test_acc,kept"] + [f"{s},{a:.6f},{int(k)}" for s, a, k in rows]
    if train_accuracy is not None:
        lines = [f"{line},{a}" for line, a in zip(lines, ["train_acc", *(f"{t:.6f}" for t in train_accuracy)])]
    write_text(run_dir / "members.csv", "\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    acc = accuracy.numpy() * 100
    bins = np.linspace(acc.min() - 0.05, acc.max() + 0.05, 31)
    ax.hist(acc[kept.numpy()], bins=bins, color="tab:blue", label=f"kept ({int(kept.sum())})")
    if (~kept).any():
        ax.hist(acc[~kept.numpy()], bins=bins, color="tab:red", label=f"dropped ({int((~kept).sum())})")
    ax.axvline(acc.mean(), color="black", linestyle="--", label=f"mean {acc.mean():.2f} %")
    ax.set(xlabel="test accuracy (%)", ylabel="members", title=title)
    ax.legend()
    path = run_dir / "accuracy_histogram.png"
    save_figure(fig, path)
    return path
