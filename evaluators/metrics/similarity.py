"""Similarity of two batches of explanation maps, map by map: the measures of Adebayo et al.'s
sanity checks (NeurIPS 2018, §3; docs/sanity_checks.md#definitions).

``similarity(a, b, measure)`` compares ``a[i]`` with ``b[i]`` for every i and returns a float64
tensor (N,) on the maps' device. Maps are (N, H, W) images (channels already reduced) or
(N, d) rows; ``MEASURES``:

* ``"spearman_abs"``: Spearman's rank correlation of |a[i]| and |b[i]| over all pixels
  (features): the Pearson correlation of their ranks, tied values given their average rank
  (as ``scipy.stats.spearmanr``);
* ``"spearman"``: the same of the signed maps;
* ``"ssim"``: the structural similarity index of scikit-image's ``structural_similarity`` with
  its defaults (7 × 7 uniform window, K1 = 0.01, K2 = 0.03, sample covariances, the mean over
  the windows that fit inside the image), ``data_range`` the range of the two maps together,
  max(a[i], b[i]) − min(a[i], b[i]), as Quantus 0.6's ``ssim`` sets it: the maps are compared
  as they are, not rescaled to [0, 1] first; images only, at least 7 × 7;
* ``"hog_pearson"``: the Pearson correlation of the two maps' histograms of oriented gradients,
  scikit-image's ``feature.hog`` with its defaults (9 orientations, 8 × 8 pixels per cell,
  3 × 3 cells per block, L2-Hys), computed in torch (:func:`hog_features`); images only, at
  least 24 × 24.

All measures are batched over the pairs in torch (for speed on the maps' device: no per-map
Python or library call).

A correlation of a constant vector is undefined: a constant map (or an all-zero HOG) gives NaN
for its pair, as scipy does, rather than a number the map does not support; SSIM of two
constant, equal maps (data range 0) is NaN too. Callers that average scores say how many were
NaN. Non-finite maps, shapes that differ and unknown measures are an ``InputError``.

Which measures take a modality's maps (``measures_for``): all four where a unit has neighbours
(``Modality.spatial``: image maps), the two Spearman measures for a table's feature vectors;
``checked_measures`` is every protocol's check of a ``measures`` option against both.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from foundation.errors import InputError
from foundation.finite import check_finite
from foundation.modality import Modality

MEASURES = ("spearman_abs", "spearman", "ssim", "hog_pearson")
IMAGE_ONLY = {"ssim": 7, "hog_pearson": 24}  # measure -> the least height and width it takes
SSIM_WINDOW, SSIM_K1, SSIM_K2 = 7, 0.01, 0.03


def measures_for(modality: Modality) -> list[str]:
    """The measures that take maps of ``modality``'s inputs (the module docstring)."""
    return [m for m in MEASURES if modality.spatial or m not in IMAGE_ONLY]


def checked_measures(measures: Sequence[str] | None, modality: Modality | None = None,
                     option: str = "measures") -> list[str]:  # fmt: skip
    """The option ``measures`` (None: every one of ``measures_for(modality)``) as a list, refused,
    naming ``option``, unless it is a non-empty list of known measures that take ``modality``'s
    maps (None: any modality's)."""
    if measures is None and modality is not None:
        return measures_for(modality)
    unknown = [] if isinstance(measures, str) or not measures else [m for m in measures if m not in MEASURES]
    if isinstance(measures, str) or not measures or unknown:
        named = f": unknown measure(s) {unknown}" if unknown else ""
        raise InputError(f"option {option}={measures!r}{named}; expected a non-empty list from {list(MEASURES)}")
    other = [m for m in measures if modality is not None and m not in measures_for(modality)]
    if other:
        raise InputError(f"option {option}: {other} compare 2-D image maps; {modality.kind} maps ({modality.noun}) "
                         f"take some of {measures_for(modality)}")  # fmt: skip
    return list(measures)


def similarity(a: torch.Tensor, b: torch.Tensor, measure: str,
               names: tuple[str, str] = ("maps a", "maps b")) -> torch.Tensor:  # fmt: skip
    """Similarity (N,) float64 of ``a[i]`` and ``b[i]`` by ``measure`` (the module docstring);
    ``names`` name the two inputs in errors (e.g. an explainer and a layer)."""
    if measure not in MEASURES:
        raise InputError(f"unknown similarity measure {measure!r}; expected one of {list(MEASURES)}")
    for maps, name in zip((a, b), names):
        if not isinstance(maps, torch.Tensor) or maps.dim() not in (2, 3) or not maps.is_floating_point():
            raise InputError(f"{name}: expected a float tensor of maps (N, H, W) or (N, d); got "
                             f"{type(maps).__name__} of shape {tuple(getattr(maps, 'shape', ()))}")  # fmt: skip
        check_finite(maps, name)
    if a.shape != b.shape:
        raise InputError(f"{names[0]} has shape {tuple(a.shape)} and {names[1]} {tuple(b.shape)}; "
                         "expected equal shapes")
    least = IMAGE_ONLY.get(measure)
    if least is not None and (a.dim() != 3 or min(a.shape[1:]) < least):
        raise InputError(f"similarity measure {measure!r} takes image maps (N, H, W) of at least {least} x {least} "
                         f"pixels; got {names[0]} of shape {tuple(a.shape)}")  # fmt: skip
    if b.device != a.device:
        b = b.to(a.device)
    if measure == "spearman_abs":
        return spearman(a.abs(), b.abs())
    if measure == "spearman":
        return spearman(a, b)
    if measure == "ssim":
        return ssim(a, b)
    return hog_pearson(a, b)


def _check_both(a: torch.Tensor, b: torch.Tensor) -> None:
    """NaN or ±inf in maps ``a`` or ``b`` refused (a second sum where ``similarity`` checked them)."""
    check_finite(a, "maps a")
    check_finite(b, "maps b")


def average_ranks(x: torch.Tensor) -> torch.Tensor:
    """Ranks 1 … d (float64) of each row of ``x`` (N, d), tied values given the mean of the ranks
    they span (``scipy.stats.rankdata``'s ``"average"``). Written in torch and batched over the
    rows, for speed on the maps' device: one sort, no per-row Python."""
    n, d = x.shape
    values, order = x.sort(dim=1)
    position = torch.arange(d, device=x.device).expand(n, d)
    first = torch.ones_like(values, dtype=torch.bool)
    first[:, 1:] = values[:, 1:] != values[:, :-1]
    last = torch.ones_like(first)
    last[:, :-1] = first[:, 1:]
    start = torch.where(first, position, 0).cummax(dim=1).values
    end = torch.where(last, position, d - 1).flip(1).cummin(dim=1).values.flip(1)
    mean_rank = (start + end).double() / 2 + 1
    return torch.empty_like(mean_rank).scatter_(1, order, mean_rank)


def pearson(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Pearson correlation (N,) float64 of the rows of ``x`` and ``y`` (N, d); NaN where a row is
    constant."""
    x, y = x.double(), y.double()
    x = x - x.mean(dim=1, keepdim=True)
    y = y - y.mean(dim=1, keepdim=True)
    denominator = (x.square().sum(1) * y.square().sum(1)).sqrt()
    numerator = (x * y).sum(1)
    return torch.where(denominator > 0, numerator / denominator.clamp_min(torch.finfo(torch.float64).tiny),
                       torch.full_like(numerator, float("nan")))  # fmt: skip


def spearman(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Spearman's rank correlation (N,) of ``a[i]`` and ``b[i]`` over all their values."""
    _check_both(a, b)
    return pearson(average_ranks(a.reshape(len(a), -1)), average_ranks(b.reshape(len(b), -1)))


def ssim(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """SSIM (N,) of image maps (N, H, W) as ``skimage.metrics.structural_similarity(a[i], b[i],
    data_range=max - min of both)``, all pairs at once in float64: local means and sample
    (co)variances over every 7 × 7 window inside the image (skimage filters with reflection at
    the border and then drops the 3 outer pixels, which leaves exactly these windows)."""
    _check_both(a, b)
    a, b = a.double()[:, None], b.double()[:, None]
    both = torch.cat([a, b], dim=1).flatten(1)
    data_range = (both.amax(1) - both.amin(1))[:, None, None, None]
    c1, c2 = (SSIM_K1 * data_range) ** 2, (SSIM_K2 * data_range) ** 2
    pool = (lambda t: F.avg_pool2d(t, SSIM_WINDOW, stride=1))  # noqa: E731
    mean_a, mean_b = pool(a), pool(b)
    sample = SSIM_WINDOW**2 / (SSIM_WINDOW**2 - 1)
    var_a = sample * (pool(a * a) - mean_a**2)
    var_b = sample * (pool(b * b) - mean_b**2)
    cov = sample * (pool(a * b) - mean_a * mean_b)
    index = ((2 * mean_a * mean_b + c1) * (2 * cov + c2)) / ((mean_a**2 + mean_b**2 + c1) * (var_a + var_b + c2))
    return index.mean(dim=(1, 2, 3))


def hog_features(maps: torch.Tensor, orientations: int = 9, cell: int = 8, block: int = 3,
                 eps: float = 1e-5) -> torch.Tensor:  # fmt: skip
    """``skimage.feature.hog(maps[i])`` with its defaults for every image map (N, H, W), batched
    in float64 on the maps' device: central-difference gradients (0 at the border), each
    pixel's magnitude voting into the bin of its unsigned orientation (``orientations`` bins
    over [0°, 180°)), the mean vote per ``cell`` × ``cell`` cell, every ``block`` × ``block``
    block of cells L2-Hys normalised (L2, clipped at 0.2, L2 again), flattened in skimage's
    order. scikit-image sums each cell in float32: its features differ from these by rounding
    (measured up to 3e-8)."""
    check_finite(maps, "maps")
    img = maps.double()
    g_row, g_col = torch.zeros_like(img), torch.zeros_like(img)
    g_row[:, 1:-1, :] = img[:, 2:, :] - img[:, :-2, :]
    g_col[:, :, 1:-1] = img[:, :, 2:] - img[:, :, :-2]
    magnitude = torch.hypot(g_col, g_row)
    orientation = torch.rad2deg(torch.atan2(g_row, g_col)) % 180
    n, height, width = img.shape
    rows, cols = height // cell, width // cell
    bounds = torch.arange(1, orientations, dtype=torch.float64, device=img.device) * (180 / orientations)
    votes = F.one_hot((orientation[..., None] >= bounds).sum(-1), orientations) * magnitude[..., None]
    cells = votes[:, :rows * cell, :cols * cell].reshape(n, rows, cell, cols, cell, orientations).sum((2, 4))
    blocks = (cells / cell**2).unfold(1, block, 1).unfold(2, block, 1).permute(0, 1, 2, 4, 5, 3).flatten(3)
    blocks = (blocks / (blocks.square().sum(-1, keepdim=True) + eps**2).sqrt()).clamp(max=0.2)
    return (blocks / (blocks.square().sum(-1, keepdim=True) + eps**2).sqrt()).flatten(1)


def hog_pearson(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pearson correlation (N,) of the HOG features (:func:`hog_features`) of ``a[i]`` and ``b[i]``."""
    return pearson(hog_features(a), hog_features(b))


__all__ = ["MEASURES", "average_ranks", "checked_measures", "hog_features", "hog_pearson", "measures_for", "pearson",
           "similarity", "spearman", "ssim"]
