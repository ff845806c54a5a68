"""Rows per forward pass (foundation/batching.py): ``MAX_BATCH`` rows holding at most
``PIXELS_PER_PASS`` pixels on the inputs' kind of device, by hand (⌊2^18 / (H·W)⌋ on a CPU,
⌊2^22 / (H·W)⌋ elsewhere), or the positive integer given; a datamodule's two loader batch sizes,
checked alike for tables and images."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foundation.batching import loader_batch_sizes, resolve_max_batch, rows_within
from foundation.errors import InputError


def test_default_rows_per_pass_keep_a_pixel_budget_per_device():
    cpu = {(3, 32, 32): 256, (1, 28, 28): 256, (23,): 256, (3, 64, 64): 64, (3, 224, 224): 5, (3, 1024, 1024): 1}
    for shape, rows in cpu.items():  # at most 256 rows of at most 2^18 pixels on a CPU
        assert resolve_max_batch(None, torch.zeros(2, *shape)) == rows, shape
    accelerator = {(3, 32, 32): 256, (3, 128, 128): 256, (3, 224, 224): 83}  # 2^22 pixels elsewhere
    for shape, rows in accelerator.items():
        assert resolve_max_batch(None, torch.zeros(2, *shape, device="meta")) == rows, shape
    assert resolve_max_batch(7, torch.zeros(2, 3, 224, 224)) == resolve_max_batch(np.int64(7), torch.zeros(2, 23)) == 7
    assert rows_within(torch.zeros(2, 3, 224, 224), 4096, 2**22) == 83 and rows_within(torch.zeros(2, 23), 9, 1) == 1
    for bad in (0, -1, 2.5, True, "256"):
        with pytest.raises(InputError, match="option max_batch="):
            resolve_max_batch(bad, torch.zeros(2, 3, 32, 32))


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, None, "64"])
def test_loader_batch_sizes_name_the_option_that_is_not_a_positive_integer(bad):
    from datamodules.images import MNIST5kDataModule
    from datamodules.tabular import TwoMoonsDataModule

    assert loader_batch_sizes(1, 4096) == (1, 4096)
    for option in ("batch_size", "eval_batch_size"):
        sizes = {"batch_size": 32, "eval_batch_size": 64, option: bad}
        for make in (lambda: loader_batch_sizes(**sizes), lambda: TwoMoonsDataModule(**sizes),
                     lambda: MNIST5kDataModule(**sizes)):  # fmt: skip
            with pytest.raises(InputError, match=rf"option {option}={bad!r}; expected a positive integer"):
                make()
