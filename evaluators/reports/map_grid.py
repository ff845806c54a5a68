"""One PNG grid of images and their maps, for the explanation grid, the aggregation report
and the aggregation-fidelity callback, and the count of blank maps the reports give.

A map is **blank** when it says nothing about where the evidence lies: ``all zero`` (every
value 0, e.g. GradCAM where no channel of the layer has a positive weighted activation) or
``constant`` (every value equal, not 0). Scaled from its minimum to its maximum a blank map
is one flat colour, so the grid writes its kind on the cell instead of leaving a black square."""

from __future__ import annotations

from pathlib import Path

import torch

from foundation.files import pyplot, save_figure

BLANK_KINDS = ("all_zero", "constant")


def blank_kinds(maps: torch.Tensor) -> list[str | None]:
    """Per map of ``maps`` (N, ...): ``"all_zero"``, ``"constant"`` or None (not blank)."""
    flat = maps.detach().flatten(1)
    constant = (flat == flat[:, :1]).all(1).tolist()
    zero = (flat[:, 0] == 0).tolist()
    return [None if not c else "all_zero" if z else "constant" for c, z in zip(constant, zero)]


def count_blank_maps(maps: dict[str, torch.Tensor]) -> dict[str, dict[str, int]]:
    """Per explainer (name -> maps (N, ...)): how many of its N maps are ``all_zero`` and
    ``constant`` (see the module's docstring)."""
    return {name: {kind: blank_kinds(m).count(kind) for kind in BLANK_KINDS} for name, m in maps.items()}


def blank_note(counts: dict[str, dict[str, int]], n: int) -> str:
    """One line naming each explainer with blank maps, e.g. ``blank maps (of 8 per explainer):
    gradcam 2 all zero``; empty where no map is blank."""
    parts = [f"{name} " + ", ".join(f"{c[kind]} {kind.replace('_', ' ')}" for kind in BLANK_KINDS if c[kind])
             for name, c in counts.items() if any(c.values())]  # fmt: skip
    return f"blank maps (of {n} per explainer): " + "; ".join(parts) if parts else ""


def plot_map_grid(x: torch.Tensor, maps: dict[str, torch.Tensor], normalization, path: Path,
                  row_titles: list[str] | None = None, cell: float = 1.6) -> Path:  # fmt: skip
    """Images x (N, C, H, W), un-normalised with the datamodule's ``normalization`` (mean,
    std per channel), in the first column; each map (N, H, W) of ``maps`` (column title ->
    maps) in the next, scaled per map from its minimum to its maximum; a blank map's cell
    says ``all zero`` or ``constant``."""
    plt = pyplot()

    mean, std = (torch.tensor(v).view(1, -1, 1, 1) for v in normalization)
    shown = (x.detach().cpu() * std + mean).clamp(0, 1)
    n, cols = len(x), 1 + len(maps)
    blanks = {title: blank_kinds(m) for title, m in maps.items()}
    fig, axes = plt.subplots(n, cols, figsize=(cell * cols, cell * n), dpi=110, squeeze=False)
    for i in range(n):
        image = shown[i].permute(1, 2, 0).numpy()
        gray = image.shape[-1] == 1
        axes[i, 0].imshow(image[..., 0] if gray else image, cmap="gray" if gray else None)
        if row_titles is not None:
            axes[i, 0].set_title(row_titles[i], fontsize=6)
        for j, (title, m) in enumerate(maps.items(), start=1):
            values = m[i].detach().cpu()
            scaled = (values - values.min()) / (values.max() - values.min()).clamp_min(1e-12)
            axes[i, j].imshow(scaled.numpy(), cmap="inferno", vmin=0, vmax=1)
            if blanks[title][i] is not None:
                axes[i, j].text(0.5, 0.5, blanks[title][i].replace("_", " "), transform=axes[i, j].transAxes,
                                ha="center", va="center", color="white", fontsize=7 if cell >= 1.6 else 6)  # fmt: skip
            if i == 0:
                axes[i, j].set_title(title, fontsize=7 if cell >= 1.6 else 6)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    save_figure(fig, path)
    return path
