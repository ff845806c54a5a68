"""``adapters.default_rows``: a stacked population on a CPU takes passes large enough for its
member blocks' matrix products (bench: 11 passes of 16 MB were 1.2-2× one pass)."""

from __future__ import annotations

import math

import torch

from evaluators.maps.adapters import default_rows
from lightning_modules import PopulationMLP


def test_ley_et_al_population_smoothgrad_of_200_rows_takes_at_most_two_passes_within_128_mib():
    population = PopulationMLP(in_features=23, seeds=list(range(20)))
    widths = sum(w.shape[1] for w in population.weights)  # one member's activations per row
    rows = default_rows(population, torch.randn(200, 23), None)
    assert rows * widths * 4 <= 128 * 2**20  # float32 activations of one pass: bounded
    assert math.ceil(200 * 50 * 20 / rows) <= 2  # 50 noise samples per input, 20 members
    member = population.member(0).net
    assert default_rows(member, torch.randn(200, 23), None) * widths * 4 <= 16 * 2**20  # one MLP: 16 MB
    assert default_rows(population, torch.randn(200, 23), 512) == 512  # max_batch wins
