"""A finished ROAR grid's results (Hooker et al. 2019, §4, Figures 4-5): per estimator and
fraction t, the mean ± standard deviation (over the K retrainings, n - 1 in the denominator)
of the retrained models' test accuracy and the clean model's accuracy without retraining,
as ``roar.json`` and ``roar.csv``; ``roar.png`` (accuracy vs t after retraining, one panel
per estimator, the controls ``random`` and ``sobel`` drawn in every panel, as Figure 4) and
``retrain_vs_no_retrain.png`` (each estimator's two curves, as Figure 5's comparison);
logged to W&B."""

from __future__ import annotations

import csv
from pathlib import Path

from evaluators.protocols.roar.estimators import ROAR_CONTROLS
from evaluators.protocols.roar.grid import CLEAN, RoarGrid, read_cells
from evaluators.reports.wandb_log import log_report, table_scalars
from foundation.files import atomic_open, pyplot, save_figure, write_json

COLUMNS = ["estimator", "fraction", "retrain_mean", "retrain_std", "no_retrain_acc", "k"]


def result_rows(cells: list[dict], grid: RoarGrid) -> list[dict]:
    """One row per (estimator, t), t ascending; t = 0 is the shared clean cell."""
    by_key = {(c["estimator"], c["fraction"]): c for c in cells}
    rows = []
    for estimator in grid.estimators:
        for t in sorted(grid.fractions):
            c = by_key[(CLEAN, 0.0)] if t == 0 else by_key[(estimator, t)]
            rows.append({"estimator": estimator, "fraction": t, "retrain_mean": c["retrain_mean"],
                         "retrain_std": c["retrain_std"], "no_retrain_acc": c["no_retrain_acc"],
                         "k": len(c["retrain_acc"])})  # fmt: skip
    return rows


def collect(out_dir: Path, grid: RoarGrid, config: dict, log_to: str) -> dict:
    """Write the results and plots of the finished grid in ``out_dir`` and log them."""
    cells = read_cells(out_dir, grid)
    rows = result_rows(cells, grid)
    summary = {"config": config, "rows": rows, "cells": cells}
    with atomic_open(out_dir / "roar.csv", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    pngs = {"retrained": plot_retrained(rows, grid, out_dir / "roar.png"),
            "retrain_vs_no_retrain": plot_no_retrain(rows, grid, out_dir / "retrain_vs_no_retrain.png")}
    table = [[r[c] for c in COLUMNS] for r in rows]
    log_report(log_to, out_dir, "roar", config, {"roar": (COLUMNS, table)}, pngs,
               table_scalars("roar", COLUMNS, table, 2), config.get("run"))  # fmt: skip
    # roar.json last: its presence marks the finished report
    write_json(out_dir / "roar.json", summary)
    return summary


def markdown_table(rows: list[dict]) -> str:
    """The rows as a markdown table: accuracies in %, retrained as mean ± std over the K retrainings."""
    lines = ["| estimator | t | retrained acc. (mean ± std) | no retraining |", "|---|---|---|---|"]
    lines += [f"| {r['estimator']} | {r['fraction']:.1f} | {100 * r['retrain_mean']:.2f} ± "
              f"{100 * r['retrain_std']:.2f} | {100 * r['no_retrain_acc']:.2f} |" for r in rows]  # fmt: skip
    return "\n".join(lines) + "\n"


def _curve(rows: list[dict], estimator: str, key: str) -> tuple[list[float], list[float]]:
    mine = [r for r in rows if r["estimator"] == estimator]
    return [100 * r["fraction"] for r in mine], [100 * r[key] for r in mine]


def _panels(n: int):
    plt = pyplot()

    cols = min(n, 4)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), dpi=120, squeeze=False, sharey=True)
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, list(axes.flat[:n])


def _save(fig, axes, ylabel: str, path: Path) -> Path:
    axes[0].set_ylabel(ylabel)
    save_figure(fig, path)
    return path


def plot_retrained(rows: list[dict], grid: RoarGrid, path: Path) -> Path:
    """Test accuracy after retraining vs t: one panel per estimator (each control alone if
    the grid holds nothing else), with every control of the grid in each panel."""
    controls = [e for e in grid.estimators if e in ROAR_CONTROLS]
    shown = [e for e in grid.estimators if e not in ROAR_CONTROLS] or controls
    fig, axes = _panels(len(shown))
    for ax, estimator in zip(axes, shown):
        for name, style in [(estimator, "o-")] + [(c, "s--") for c in controls if c != estimator]:
            t, acc = _curve(rows, name, "retrain_mean")
            _, std = _curve(rows, name, "retrain_std")
            ax.errorbar(t, acc, yerr=std, fmt=style, ms=3, capsize=2, label=name,
                        color=None if name == estimator else ("grey" if name == "random" else "black"))  # fmt: skip
        ax.set(title=estimator, xlabel="% removed (t)")
        ax.legend(fontsize=7)
    return _save(fig, axes, "test accuracy (%), retrained", path)


def plot_no_retrain(rows: list[dict], grid: RoarGrid, path: Path) -> Path:
    """Each estimator's accuracy vs t with retraining (solid, ± std) and without (dashed)."""
    fig, axes = _panels(len(grid.estimators))
    for ax, estimator in zip(axes, grid.estimators):
        t, acc = _curve(rows, estimator, "retrain_mean")
        _, std = _curve(rows, estimator, "retrain_std")
        ax.errorbar(t, acc, yerr=std, fmt="o-", ms=3, capsize=2, label="retrained (ROAR)")
        t, acc = _curve(rows, estimator, "no_retrain_acc")
        ax.plot(t, acc, "s--", ms=3, label="no retraining")
        ax.set(title=estimator, xlabel="% removed (t)")
        ax.legend(fontsize=7)
    return _save(fig, axes, "test accuracy (%)", path)
