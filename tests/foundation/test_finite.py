"""The one finiteness check (foundation/finite.py): finite tensors pass, and the error names the
first unit holding NaN or ±inf, its counts of each (counted by hand), how many units do, the entry
of a stack, and the unit's own number where given; finite values whose sum overflows pass."""

from __future__ import annotations

import pytest
import torch

from foundation.errors import InputError
from foundation.finite import check_finite


def test_finite_values_pass_also_when_their_sum_overflows():
    check_finite(torch.randn(4, 3), "maps")
    check_finite(torch.full((3,), 3e38), "maps")  # the sum is inf in float32; every value is finite


def test_the_first_bad_unit_and_its_counts_are_named():
    maps = torch.zeros(5, 2, 3)
    maps[1, 0, 0] = float("nan")
    maps[3, 1, :2] = float("inf")
    maps[3, 0, 0] = float("nan")
    with pytest.raises(InputError, match=r"^explainer 'x': map 1 has 1 NaN value\(s\) \(2 of 5 maps not finite\); "
                                         r"expected finite values$"):  # fmt: skip
        check_finite(maps, "explainer 'x'")
    maps[1, 0, 0] = 0.0
    with pytest.raises(InputError, match=r"map 3 has 1 NaN value\(s\) and 2 infinite value\(s\) \(1 of 5"):
        check_finite(maps, "explainer 'x'")
    with pytest.raises(InputError, match=r"inputs x: row 13 has"):  # the unit's own number
        check_finite(maps, "inputs x", "row", numbers=torch.arange(10, 15))


def test_units_of_the_last_dims_and_stacks():
    values = torch.zeros(2, 3, 4)
    values[1, 2, 3] = float("-inf")
    with pytest.raises(InputError, match=r"block 5 has 1 infinite value\(s\) \(1 of 6 blocks"):
        check_finite(values, "scores", "block", unit_dims=1)  # 2 x 3 blocks of 4: the last is block 5
    with pytest.raises(InputError, match=r"^maps\[1\]: map 2 has 1 infinite"):
        check_finite(values, "maps", stacked=True)
