"""How many inputs one forward (and backward) pass takes: :func:`resolve_max_batch`, the
``max_batch`` option of every explainer, metric and protocol (``MAX_BATCH`` rows, at most
``PIXELS_PER_PASS`` input pixels per pass on the inputs' kind of device; docs/explainers.md);
and a datamodule's loader batches, :func:`loader_batch_sizes`."""

from __future__ import annotations

import math
import numbers

import torch

from foundation.errors import InputError

MAX_BATCH = 256
PIXELS_PER_PASS = {"cpu": 2**18, "accelerator": 2**22}


def loader_batch_sizes(batch_size, eval_batch_size) -> tuple[int, int]:
    """A datamodule's ``batch_size`` (training batches) and ``eval_batch_size`` (evaluation and
    map batches), each checked to be a positive integer; InputError naming the option if not."""
    for option, value in (("batch_size", batch_size), ("eval_batch_size", eval_batch_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"option {option}={value!r}; expected a positive integer")
    return batch_size, eval_batch_size


def rows_within(x: torch.Tensor, max_rows: int, max_pixels: int) -> int:
    """The most rows of inputs like ``x`` one pass may take: at most ``max_rows``, holding at
    most ``max_pixels`` input pixels (H·W; a tabular row counts as one); at least 1."""
    pixels = math.prod(x.shape[2:]) if x.dim() > 2 else 1
    return max(1, min(max_rows, max_pixels // pixels))


def resolve_max_batch(max_batch: int | None, x: torch.Tensor) -> int:
    """Rows per forward (and backward) pass for inputs ``x``: ``max_batch`` where given (a
    positive integer), else :func:`rows_within` ``MAX_BATCH`` rows and ``PIXELS_PER_PASS``
    pixels on x's kind of device."""
    if max_batch is None:
        return rows_within(x, MAX_BATCH, PIXELS_PER_PASS["cpu" if x.device.type == "cpu" else "accelerator"])
    if isinstance(max_batch, bool) or not isinstance(max_batch, numbers.Integral) or max_batch < 1:
        raise InputError(f"option max_batch={max_batch!r}; expected a positive integer (rows per forward pass) "
                         "or None (the default for the inputs' size and device)")  # fmt: skip
    return int(max_batch)
