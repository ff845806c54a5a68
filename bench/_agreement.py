"""Agreement checks between a naive way's and a batched way's maps, used by the gradient benches
(``image_explainers.py``, ``ensembles.py``); not a bench.

Why two checks. A gradient through a ReLU network is piecewise constant in the
pre-activations: where one sits within float32 rounding of 0, a last-bit difference between
two kernels (one image per call against 256 rows per pass, AVX2 against AVX-512, one CPU
against a GPU) flips the gate and moves the gradient by far more than rounding, up to a few
per cent of the largest |map| value at a handful of values (measured: 26 of 196,608 values of
a random ResNet-8's Saliency maps on an AVX2 CPU, 162 on an AVX-512/AMX one). So:

* ``check_float64``: both ways in float64 on a few inputs, where kernels differ by about 1e-16
  relative and a gate sits that close to 0 with negligible probability: every value agrees
  within ``FLOAT64_TOLERANCE`` of its row's largest |value| (measured 1e-15 or below). Any
  real difference (a region zeroed, a row shifted, a wrong scale) is far above it.
* ``check_float32``: the timed float32 results of all inputs: a value is *outside* when
  |ours - naive| > ``RTOL`` |naive| + ``ATOL`` max|naive row| (0.1 % of the value plus 0.1 %
  of its row's, an input's, largest |value|), and at most ``MAX_SHARE_OUTSIDE`` (1 %) of the
  values may be. Measured (``bench/_gate_flips.py``, bench/README.md): at most 0.26 % where
  the naive way ran on inputs 1 ulp away, which flips gates throughout a ResNet-18 and
  spreads small changes over many pixels; a map of one image in 64 wrong (1.6 %), a region
  zeroed or a whole map scaled fails.
"""

from __future__ import annotations

import torch

RTOL, ATOL, MAX_SHARE_OUTSIDE, FLOAT64_TOLERANCE = 1e-3, 1e-3, 0.01, 1e-10


def agreement(naive: torch.Tensor, ours: torch.Tensor) -> dict:
    """``max_diff_relative``: the largest |ours - naive| over the largest |naive| of its row (an
    input's map); ``share_outside``: the share of values outside ``RTOL`` and ``ATOL`` (relative
    to the row's largest |naive|), NaN counted as outside; ``values``: how many were compared."""
    if naive.shape != ours.shape:
        raise AssertionError(f"shapes differ: naive {tuple(naive.shape)}, batched {tuple(ours.shape)}")
    naive, ours = naive.detach().flatten(1).double().cpu(), ours.detach().flatten(1).double().cpu()
    scale = naive.abs().amax(1, keepdim=True).clamp(min=1e-300)
    difference = (ours - naive).abs()
    inside = difference <= RTOL * naive.abs() + ATOL * scale
    relative = (difference / scale).nan_to_num(nan=float("inf"))
    return {"max_diff_relative": float(f"{relative.max().item():.2e}"),
            "share_outside": float(f"{1 - inside.double().mean().item():.2e}"), "values": naive.numel()}  # fmt: skip


def check_float32(naive: torch.Tensor, ours: torch.Tensor, label: str) -> dict:
    """``agreement`` of the timed results; AssertionError where more than ``MAX_SHARE_OUTSIDE``
    of the values are outside the tolerance."""
    stats = agreement(naive, ours)
    if not stats["share_outside"] <= MAX_SHARE_OUTSIDE:
        raise AssertionError(f"{label}: naive and batched differ at {stats['share_outside']:.2%} of "
                             f"{stats['values']} values (> {MAX_SHARE_OUTSIDE:.0%}; largest difference "
                             f"{stats['max_diff_relative']:.1e} of the row's largest |value|)")  # fmt: skip
    return stats


def check_float64(naive: torch.Tensor, ours: torch.Tensor, label: str) -> dict:
    """``agreement`` of both ways run in float64; AssertionError where any value differs by more
    than ``FLOAT64_TOLERANCE`` of its row's largest |value|."""
    if naive.dtype != torch.float64 or ours.dtype != torch.float64:
        raise AssertionError(f"{label}: the float64 check got {naive.dtype} and {ours.dtype}")
    stats = agreement(naive, ours)
    if not stats["max_diff_relative"] <= FLOAT64_TOLERANCE:
        raise AssertionError(f"{label}: naive and batched differ in float64 by {stats['max_diff_relative']:.1e} of "
                             f"the row's largest |value| (> {FLOAT64_TOLERANCE:.0e})")  # fmt: skip
    return {"float64_max_diff_relative": stats["max_diff_relative"], "float64_values": stats["values"]}
