"""Rows per forward pass (foundation/batching.py): ``MAX_BATCH`` rows holding at most
``PIXELS_PER_PASS`` pixels on the inputs' kind of device, by hand (⌊2^18 / (H·W)⌋ on a CPU,
⌊2^22 / (H·W)⌋ elsewhere), or the positive integer given."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foundation.batching import resolve_max_batch, rows_within
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
