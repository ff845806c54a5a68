"""Member sets, pairs and the curves between them (evaluators/protocols/population_sets.py):
disjoint sets as a seeded ``randperm`` cut into sets, pairs and per-set splits by hand, a
population of networks refusing trained end points, the trainers quiet and deterministic.
Curves trained end to end: tests/evaluators/protocols/test_landscape.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from evaluators.protocols.population_sets import (disjoint_sets, member_pairs, quiet_trainer, split_per_set,
                                                  train_network_curves)  # fmt: skip
from foundation.errors import InputError


def test_sets_are_a_seeded_permutation_cut_in_order():
    order = torch.randperm(10, generator=torch.Generator().manual_seed(4)).tolist()
    assert disjoint_sets(10, 3, 3, 4) == [order[0:3], order[3:6], order[6:9]]
    with pytest.raises(InputError, match="4 disjoint sets of 3 models need 12; the population has 10"):
        disjoint_sets(10, 3, 4, 0)


def test_pairs_and_their_split_per_set():
    assert member_pairs([7, 2, 9, 4, 5]) == [(7, 2), (9, 4)]  # an odd member out
    pairs = [[(0, 1), (2, 3)], [(4, 5)], [(6, 7), (8, 9), (1, 2)]]
    curves = ["c0", "c1", "c2", "c3", "c4", "c5"]
    assert split_per_set(curves, pairs) == [["c0", "c1"], ["c2"], ["c3", "c4", "c5"]]


def test_networks_take_fixed_end_points_only_and_trainers_are_quiet():
    with pytest.raises(InputError, match="option curve_mode='trained'; a population of networks takes 'fixed'"):
        train_network_curves(SimpleNamespace(nets=[]), [], None, 1, "bezier", "trained")
    trainer = quiet_trainer(3, torch.device("cpu"))
    assert trainer.max_epochs == 3 and trainer.logger is None and not trainer.checkpoint_callback
    assert torch.are_deterministic_algorithms_enabled()  # deterministic=True (conftest turns it off again)
