"""The sanity-check report's figures (``evaluators.protocols.sanity``), as Adebayo et al.'s Figure 2:

* :func:`plot_stage_maps`: per image, a block of rows, one per explainer, and columns: the
  image, then the explainer's map of the original model and after each randomisation stage
  (cascading: the top layer randomised, then one more layer down each column; independent:
  each layer alone). Each cell shows the absolute map scaled from 0 to its maximum (the
  paper's absolute-value visualisation); a blank map (``evaluators.reports.map_grid``) has
  its kind written on its cell.
* :func:`plot_similarity_curves`: one panel per similarity measure, the mean similarity of
  each explainer's maps to the original's against the stage, with its 95 % interval as a band.
"""

from __future__ import annotations

from pathlib import Path

import torch

from evaluators.reports.map_grid import blank_kinds
from foundation.files import pyplot, save_figure


def _pyplot():
    plt = pyplot()

    return plt


def plot_stage_maps(x: torch.Tensor, maps: dict[str, torch.Tensor], stages: list[str], normalization,
                    path: Path, title: str = "", cell: float = 1.1) -> Path:  # fmt: skip
    """Images x (n, C, H, W), un-normalised with the datamodule's ``normalization`` (mean, std
    per channel); ``maps``: explainer -> (S, n, H, W), the maps after each of the S ``stages``
    (stage 0: the original model)."""
    plt = _pyplot()
    mean, std = (torch.tensor(v).view(1, -1, 1, 1) for v in normalization)
    shown = (x.detach().cpu() * std + mean).clamp(0, 1)
    n, names = len(x), list(maps)
    rows, cols = n * len(names), 1 + len(stages)
    fig, axes = plt.subplots(rows, cols, figsize=(cell * cols + 1.0, cell * rows + 0.6), dpi=110, squeeze=False)
    for i in range(n):
        image = shown[i].permute(1, 2, 0).numpy()
        gray = image.shape[-1] == 1
        for k, name in enumerate(names):
            r = i * len(names) + k
            ax = axes[r, 0]
            if k == 0:
                ax.imshow(image[..., 0] if gray else image, cmap="gray" if gray else None)
            else:
                ax.set_frame_on(False)
            ax.set_ylabel(name, fontsize=6, rotation=0, ha="right", va="center")
            stage_maps = maps[name][:, i].detach().cpu().abs()
            for s, kind in enumerate(blank_kinds(maps[name][:, i])):
                scaled = stage_maps[s] / stage_maps[s].max().clamp_min(1e-12)
                axes[r, 1 + s].imshow(scaled.numpy(), cmap="gray", vmin=0, vmax=1)
                if kind is not None:
                    axes[r, 1 + s].text(0.5, 0.5, kind.replace("_", " "), transform=axes[r, 1 + s].transAxes,
                                        ha="center", va="center", color="tab:red", fontsize=5)  # fmt: skip
    for s, label in enumerate(["input", *stages]):
        axes[0, s].set_title(label, fontsize=6)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    if title:
        fig.suptitle(title, fontsize=8, y=1 - 0.1 / (cell * rows + 0.6), va="top")
    fig.subplots_adjust(left=1.0 / (cell * cols + 1.0), right=0.99, bottom=0.01, top=1 - 0.6 / (cell * rows + 0.6),
                        wspace=0.05, hspace=0.05)  # fmt: skip
    save_figure(fig, path, layout=False)
    return path


def plot_similarity_curves(similarity: dict[str, dict[str, list[dict]]], stages: list[str], path: Path,
                           title: str = "") -> Path:  # fmt: skip
    """``similarity``: explainer -> measure -> one entry per stage (``mean``, ``ci95``; None
    where no input had a defined value); one panel per measure, one line per explainer."""
    plt = _pyplot()
    measures = list(next(iter(similarity.values())))
    fig, axes = plt.subplots(1, len(measures), figsize=(3.4 * len(measures), 3.3), dpi=110, squeeze=False)
    xs = list(range(len(stages)))
    for ax, measure in zip(axes[0], measures):
        for name, by_measure in similarity.items():
            entries = by_measure[measure]
            mean = [e["mean"] if e["mean"] is not None else float("nan") for e in entries]
            ci = [e["ci95"] if e["ci95"] is not None else float("nan") for e in entries]
            (line,) = ax.plot(xs, mean, marker="o", ms=3, lw=1, label=name)
            ax.fill_between(xs, [m - c for m, c in zip(mean, ci)], [m + c for m, c in zip(mean, ci)],
                            color=line.get_color(), alpha=0.2, lw=0)  # fmt: skip
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xticks(xs)
        if len(stages) > 6:  # many layers (ResNet-8: 16 stages): one rotated line per stage
            ax.set_xticklabels([s.replace("\n", " ") for s in stages], fontsize=5, rotation=90)
        else:
            ax.set_xticklabels(stages, fontsize=6)
        ax.set_title(measure, fontsize=8)
        ax.set_ylabel("similarity to the original map", fontsize=7)
    axes[0, -1].legend(fontsize=6)
    if title:
        fig.suptitle(title, fontsize=8)
    save_figure(fig, path)
    return path


def stage_labels(summary: dict, mode: str) -> list[str]:
    """The x-axis labels of ``mode``'s stages: each stage's layer name over its layer type."""
    return [f"{stage}\n{kind}" if kind else stage
            for stage, kind in zip(summary["stages"][mode], summary["layer_types"][mode])]
