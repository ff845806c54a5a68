"""tools/member_accuracy.py: every member's accuracy, in pieces of rows, against each
member as a plain classifier."""

from __future__ import annotations

import torch

from lightning_modules.population import PopulationMLP
from tools import member_accuracy
from tools.member_accuracy import member_accuracies, spread


def test_member_accuracies_equal_each_member_alone_whatever_the_pieces(monkeypatch):
    population = PopulationMLP(in_features=6, size=5, hidden=(8, 4))
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(37, 6, generator=gen), torch.randint(0, 2, (37,), generator=gen)
    with torch.no_grad():
        by_member = torch.tensor([(population.member(i)(x).argmax(-1) == y).double().mean().item() for i in range(5)],
                                 dtype=torch.float64)  # fmt: skip
    torch.testing.assert_close(member_accuracies(population, x, y), by_member)
    monkeypatch.setattr(member_accuracy, "PREDICT_BLOCK_FLOATS", 5 * 8 * 3)  # pieces of 3 rows, the last of 1
    torch.testing.assert_close(member_accuracies(population, x, y), by_member)
    assert len(set(by_member.tolist())) > 1  # the members differ, so a mix-up of members would show


def test_spread_is_percent_mean_and_sample_std():
    assert spread(torch.tensor([0.5, 0.7, 0.9], dtype=torch.float64)) == {"mean": 70.0, "std": 20.0}
