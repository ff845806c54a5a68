"""One PNG grid of images and their maps, for the explanation grid, the aggregation report
and the aggregation-fidelity callback."""

from __future__ import annotations

from pathlib import Path

import torch


def plot_map_grid(x: torch.Tensor, maps: dict[str, torch.Tensor], normalization, path: Path,
                  row_titles: list[str] | None = None, cell: float = 1.6) -> Path:  # fmt: skip
    """Images x (N, C, H, W), un-normalised with the datamodule's ``normalization`` (mean,
    std per channel), in the first column; each map (N, H, W) of ``maps`` (column title ->
    maps) in the next, scaled per map from its minimum to its maximum."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mean, std = (torch.tensor(v).view(1, -1, 1, 1) for v in normalization)
    shown = (x.detach().cpu() * std + mean).clamp(0, 1)
    n, cols = len(x), 1 + len(maps)
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
            if i == 0:
                axes[i, j].set_title(title, fontsize=7 if cell >= 1.6 else 6)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
