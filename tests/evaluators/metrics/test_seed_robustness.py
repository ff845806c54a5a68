"""``evaluators.metrics.seed_robustness``: the seed-level interval, Kendall's τ_b between
members' rankings (against ``scipy.stats.kendalltau``), best-row agreement and the survival
of findings, against scipy and float64 hand computations."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import kendalltau

from evaluators.metrics.seed_robustness import (
    best_rows, finding_survival, kendall_taus, member_interval, ranking_stability,
)  # fmt: skip
from foundation.errors import InputError


def test_member_interval_is_the_t_interval_over_members():
    result = member_interval(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    sd = math.sqrt(((1.5**2) * 2 + (0.5**2) * 2) / 3)  # sample standard deviation, by hand
    t_975_3 = 3.182446305284263  # Student's t, 3 degrees of freedom, 97.5 % (statistical tables)
    assert result["mean"] == 2.5 and result["n"] == 4
    assert result["ci95"] == pytest.approx(t_975_3 * sd / 2, rel=1e-12)


def test_kendall_taus_equal_scipy_with_ties_and_a_member_without_a_ranking():
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 4, (6, 7), generator=g).double()  # many ties
    scores[2] = torch.randn(7, generator=g, dtype=torch.float64)
    scores[5] = 1.0  # every row tied: no ranking
    taus = kendall_taus(scores)
    for a in range(6):
        for b in range(6):
            expected = kendalltau(scores[a].numpy(), scores[b].numpy()).statistic
            if math.isnan(expected):
                assert math.isnan(taus[a, b]), (a, b)
            else:
                assert taus[a, b].item() == pytest.approx(expected, abs=1e-12), (a, b)
    assert not math.isnan(taus[0, 1])


def test_ranking_stability_by_hand():
    scores = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    # pairs (0, 1), (0, 2), (1, 2): τ = 1, -1, -1; best (higher): rows 2, 2, 0 -> one pair of three agrees
    up = ranking_stability(scores, higher_is_better=True)
    assert up["kendall_tau"] == pytest.approx(-1 / 3, abs=1e-12)
    assert up["kendall_tau_min"] == pytest.approx(-1.0, abs=1e-12)
    assert up["best_agreement"] == pytest.approx(1 / 3) and up["best"] == [[2], [2], [0]] and up["n_pairs"] == 3
    down = ranking_stability(torch.tensor([[1.0, 2.0, 3.0], [1.0, 5.0, 3.0], [2.0, 1.0, 3.0]]), False)
    assert down["best"] == [[0], [0], [1]] and down["best_agreement"] == pytest.approx(1 / 3)
    # signs of s[r] - s[q] over row pairs (0,1), (0,2), (1,2): (-,-,-), (-,-,+), (+,-,-);
    # τ = (agreeing - disagreeing) / 3: (0, 1) 1/3, (0, 2) 1/3, (1, 2) -1/3
    assert down["kendall_tau"] == pytest.approx((1 / 3 + 1 / 3 - 1 / 3) / 3, abs=1e-12)
    assert down["kendall_tau_min"] == pytest.approx(-1 / 3, abs=1e-12)


def test_a_tie_for_best_agrees_only_with_the_same_tie():
    mask = best_rows(torch.tensor([[1.0, 3.0, 3.0], [1.0, 3.0, 2.0]]), higher_is_better=True)
    assert mask.tolist() == [[False, True, True], [False, True, False]]
    assert ranking_stability(torch.tensor([[1.0, 3.0, 3.0], [1.0, 3.0, 3.0], [1.0, 3.0, 2.0]]),
                             True)["best_agreement"] == pytest.approx(1 / 3)  # fmt: skip


def test_finding_survival_counts_claims_and_named_rows():
    members = [{"ucb_best": True, "best": {"infidelity": "agg_faith"}, "worst": ["pi", "ci"], "gap": {"mean": 0.1}},
               {"ucb_best": False, "best": {"infidelity": "agg_faith"}, "worst": ["ci", "pi"], "gap": {"mean": 0.2}},
               {"ucb_best": True, "best": {"infidelity": "saliency"}, "worst": ["ci", "ei"], "gap": {"mean": 0.3}},
               {"ucb_best": True, "best": {"infidelity": "agg_faith"}, "worst": ["ei", "pi"], "gap": {"mean": 0.4}}]
    survival = finding_survival(members)
    assert survival == {"ucb_best": {"kind": "claim", "share": 0.75},
                        "best.infidelity": {"kind": "row", "mode": "agg_faith", "share": 0.75},
                        "worst": {"kind": "row", "mode": "ci, pi", "share": 0.5}}  # fmt: skip


@pytest.mark.parametrize("scores, message", [
    (torch.tensor([[1.0, float("nan")], [1.0, 2.0]]), "member 0, row 1 is nan"),
    (torch.tensor([[1.0, 2.0]]), "at least 2 members"),
])  # fmt: skip
def test_non_finite_scores_or_one_member_are_refused(scores, message):
    with pytest.raises(InputError, match=message):
        ranking_stability(scores, True, "table x")
