"""evaluators/reports/reliability/sections.py: the agreement, sanity and faithfulness sections of a
synthetic report (tests/support/reliability.py), each number against a hand computation: SA@k by a loop
over the top-k features, the t-intervals by scipy, the ranking stability by scipy's Kendall τ_b."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from evaluators.reports.reliability.sections import agreement, faithfulness, per_member, sanity
from tests.evaluators.protocols.test_consistency import naive_sign_agreement
from tests.support.helpers import t_interval
from tests.support.reliability import INFIDELITY, MEASURE, MEMBERS, units


def test_per_member_is_the_mean_over_the_pairs_each_member_is_in():
    # pairs (0, 1), (0, 2), (1, 2) with values 1, 2, 4: member 0 in the first two, ...
    assert per_member(torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64), 3).tolist() == [1.5, 2.5, 3.0]


def test_agreement_is_each_members_mean_sa_over_its_pairs_by_hand():
    u = units()
    section = agreement(u, 2, False, 0)
    assert section["k"] == 2 and list(section["explainers"]) == ["a", "b"]
    for name, unit in u.items():
        maps = unit["maps"].numpy()
        pair = {(p, q): [naive_sign_agreement(maps[p, n], maps[q, n], 2) for n in range(maps.shape[1])]
                for p in range(MEMBERS) for q in range(p + 1, MEMBERS)}  # fmt: skip
        sa = [np.mean([np.mean(v) for (p, q), v in pair.items() if m in (p, q)]) for m in range(MEMBERS)]
        ssa = [np.mean([np.mean(np.equal(v, 1.0)) for (p, q), v in pair.items() if m in (p, q)])
               for m in range(MEMBERS)]  # fmt: skip
        entry = section["explainers"][name]
        assert entry["sa"]["per_member"] == pytest.approx(sa, abs=1e-12)
        assert entry["ssa"]["per_member"] == pytest.approx(ssa, abs=1e-12)
        assert (entry["sa"]["mean"], entry["sa"]["ci95"]) == pytest.approx(t_interval(sa), abs=1e-12)
        assert "watson_c" not in entry


def test_sanity_steps_and_random_logit_are_t_intervals_over_members():
    u = units()
    section = sanity(u, MEASURE, [0, 1, 2], False)
    assert (section["measure"], section["reference_members"], section["accuracy_filter_applied"]) == (
        MEASURE, [0, 1, 2], False)  # fmt: skip
    for name, unit in u.items():
        entry = section["explainers"][name]
        for j, (step, layer) in enumerate(zip(entry["cascade"], ["fc2", "fc1"])):
            assert step["layer"] == layer
            assert (step["mean"], step["ci95"]) == pytest.approx(t_interval(unit["cascade"][:, j]), abs=1e-12)
        logit = entry["random_logit"]
        assert (logit["mean"], logit["ci95"]) == pytest.approx(t_interval(unit["random_logit"]), abs=1e-12)
        assert entry["verdict"]["members"] == [0, 1, 2] and entry["verdict"]["measure"] == MEASURE


def test_faithfulness_intervals_ranking_and_best_by_hand():
    section = faithfulness(units(), ["infidelity"], 50, 0)
    assert section["primary"] == "infidelity"
    entry = section["by_metric"]["infidelity"]
    assert entry["higher_is_better"] is False  # infidelity: lower is better (Yeh et al.)
    for name, values in INFIDELITY.items():
        got = entry["explainers"][name]
        assert got["per_member"] == pytest.approx(values)
        assert (got["mean"], got["ci95"]) == pytest.approx(t_interval(values), abs=1e-12)
    # every member ranks a (lower) above b: τ = 1 for every pair, a best everywhere
    taus = [stats.kendalltau(*(np.array([INFIDELITY["a"][m], INFIDELITY["b"][m]]) for m in pair)).statistic
            for pair in [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]]  # fmt: skip
    ranking = entry["ranking"]
    assert ranking["kendall_tau"] == pytest.approx(np.mean(taus)) == 1.0
    assert (ranking["most_frequent_best"], ranking["best_share"], ranking["best_agreement"]) == ("a", 1.0, 1.0)
    assert ranking["best_per_member"] == ["a"] * MEMBERS
    assert entry["settle"]["best"] == "a" and entry["settle"]["members_needed"] == 2
