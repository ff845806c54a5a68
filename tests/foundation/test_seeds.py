"""Seeds of the explainers' random draws (foundation/seeds.py): an input's seed is NumPy's
``SeedSequence([seed, index])`` state, and within ``seeded_generators`` torch's, NumPy's and
Python's global generators start as ``torch.manual_seed``/``np.random.seed``/``random.seed`` of
the seed would start them, and are back where they were afterwards."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from foundation.errors import InputError
from foundation.seeds import check_seed, derived_seed, input_index, input_seeds, seeded_generators


def test_input_seeds_are_numpy_seed_sequences_of_seed_and_index():
    assert input_seeds(7, None, 3) == [int(np.random.SeedSequence([7, i]).generate_state(1)[0]) for i in range(3)]
    assert input_seeds(7, torch.tensor([4, 0]), 2) == [derived_seed(7, 4), derived_seed(7, 0)]
    for bad, message in ((-1, "option seed=-1"), (1.5, "option seed=1.5"), (True, "option seed=True")):
        with pytest.raises(InputError, match=message):
            input_seeds(bad, None, 2)
    with pytest.raises(InputError, match=r"option index of shape \(3,\)"):
        input_seeds(0, torch.arange(3), 2)


def test_seeds_and_indices_are_checked():
    assert check_seed(np.int64(3)) == 3 and type(check_seed(np.int64(3))) is int
    assert input_index(None, 3) == [0, 1, 2] and input_index([5, 2], 2) == [5, 2]
    for bad in (torch.tensor([1.0, 2.0]), torch.tensor([-1, 2])):
        with pytest.raises(InputError, match="option index of shape"):
            input_index(bad, 2)
    assert derived_seed(1, 2) != derived_seed(2, 1) and 0 <= derived_seed(9) < 2**32


def test_the_global_generators_start_from_the_seed_and_are_restored():
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    after = (torch.rand(2), np.random.rand(2), random.random())  # what the caller draws next without the block
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    with seeded_generators(2**32 + 5, torch.device("cpu")):
        inside = (torch.rand(2), np.random.rand(2), random.random())
    torch.manual_seed(2**32 + 5)
    np.random.seed(5)  # NumPy takes the seed modulo 2^32
    random.seed(2**32 + 5)
    assert torch.equal(inside[0], torch.rand(2)) and np.array_equal(inside[1], np.random.rand(2))
    assert inside[2] == random.random()
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    with seeded_generators(7, torch.device("cpu")):
        torch.rand(5), np.random.rand(5), random.random()
    assert torch.equal(torch.rand(2), after[0]) and np.array_equal(np.random.rand(2), after[1])
    assert random.random() == after[2]
