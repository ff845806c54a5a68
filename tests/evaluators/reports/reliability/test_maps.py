"""evaluators/reports/reliability/maps.py: members' saliency maps of linear classifiers against their
weights (the closed form), the similarities against scipy's Spearman of |maps|, the cascading steps
chosen by hand, and an explainer's unit computed once and read back."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

from evaluators.reports.reliability.maps import (cascade_positions, explainer_unit, mean_similarity, member_maps,
                                                 random_logit_similarity, randomisation)
from foundation.errors import InputError


def linear_members(k: int = 3) -> list[nn.Module]:
    members = []
    for seed in range(k):
        torch.manual_seed(seed)
        members.append(nn.Linear(6, 2).double())
    return members


def x_and_target():
    return torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(9)), torch.ones(5).long()


def the_input(model, x, method, target=None, seed=0, **options):
    """An explainer that ignores the model: its map is the input."""
    return x.clone()


def spearman_abs(a: np.ndarray, b: np.ndarray) -> float:
    return stats.spearmanr(np.abs(a), np.abs(b)).statistic


def test_saliency_of_linear_members_is_their_target_weight_row():
    members, (x, target) = linear_members(), x_and_target()
    maps = member_maps(members, x, target, "saliency", {}, 0)
    assert maps.dtype == torch.float64 and maps.shape == (3, 5, 6)
    for m, member in enumerate(members):
        torch.testing.assert_close(maps[m], member.weight[1].detach().expand(5, 6), rtol=0, atol=1e-12)


def test_mean_similarity_leaves_out_inputs_where_it_is_undefined():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(4, 6, generator=g, dtype=torch.float64), torch.randn(4, 6, generator=g, dtype=torch.float64)
    a[2] = 1.0  # a constant map: Spearman undefined
    expected = np.mean([spearman_abs(a[i].numpy(), b[i].numpy()) for i in (0, 1, 3)])
    assert mean_similarity(a, b, "spearman_abs", ("a", "b")) == pytest.approx(expected, abs=1e-12)
    assert np.isnan(mean_similarity(a[2:3], b[2:3], "spearman_abs", ("a", "b")))


def test_random_logit_of_a_binary_linear_member_compares_its_two_weight_rows():
    member, (x, target) = linear_members(1)[0], x_and_target()
    own = member_maps([member], x, target, "saliency", {}, 0)[0]
    w = member.weight.detach().numpy()
    got = random_logit_similarity(member, own, x, target, 2, "saliency", {}, 0, "spearman_abs")
    assert got == pytest.approx(spearman_abs(w[0], w[1]), abs=1e-12)  # the other class of 1 is 0


def test_cascade_positions_by_hand():
    # linspace(10, 1, 5) = 10, 7.75, 5.5, 3.25, 1, rounded
    assert cascade_positions(10, 5) == {10, 8, 6, 3, 1}
    assert cascade_positions(3, 5) == {1, 2, 3} and cascade_positions(4, 1) == {4}


def test_randomisation_of_a_model_ignoring_explainer_keeps_similarity_one():
    member = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    x, target = x_and_target()
    layers, steps, last = randomisation(member, x, x, target, "input", {}, 0, "spearman_abs", the_input)
    assert layers == ["2", "0"] and steps == pytest.approx([1.0, 1.0]) and torch.equal(last, x)


def test_an_explainers_unit_is_computed_once_and_read_back(tmp_path):
    members, (x, target) = linear_members(2), x_and_target()
    args = (members, x, target, 2, "saliency", {}, 0, "spearman_abs", [], {})
    unit = explainer_unit(tmp_path, *args, progress=lambda _: None)
    assert unit["layers"] == [""] and unit["cascade"].shape == (2, 1)  # a Linear: one layer, the model itself

    def fail(*a, **k):
        raise AssertionError("computed again")

    again = explainer_unit(tmp_path, *args, explain_fn=fail, progress=lambda _: None)
    assert torch.equal(again["maps"], unit["maps"]) and torch.equal(again["random_logit"], unit["random_logit"])
    torch.save({"maps": unit["maps"]}, tmp_path / "other.pt")
    with pytest.raises(InputError, match=r"other\.pt: holds \['maps'\]; expected \['maps', 'randomised'"):
        explainer_unit(tmp_path, *args[:4], "other", *args[5:], progress=lambda _: None)
