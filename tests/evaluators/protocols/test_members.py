"""evaluators/protocols/members.py: a population's members evaluated once each (resumed from their
files, errors naming the member), the seed-level table against scipy's t-interval, the ranking
stability against scipy's Kendall τ_b, and the report files against hand-written rows."""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from evaluators.protocols.members import (evaluate_members, markdown, population_summary, robustness, seed_rows,
                                          write_population_report)
from foundation.errors import InputError
from tests.support.helpers import t_interval

# three members' means of metric m (higher is better) on rows r1..r3, and their standard errors over inputs
MEANS = {"a": [0.1, 0.5, 0.9], "b": [0.2, 0.4, 0.8], "c": [0.9, 0.3, 0.1]}
SE = {"a": 0.01, "b": 0.02, "c": 0.03}
ROWS = ["r1", "r2", "r3"]


def member_rows() -> dict[str, dict]:
    return {n: {r: {"m": {"mean": v, "se": SE[n]}} for r, v in zip(ROWS, means)} for n, means in MEANS.items()}


def test_seed_rows_are_the_t_interval_over_members_and_the_mean_spread_over_inputs():
    out = seed_rows(member_rows(), ["m"], "se")
    assert list(out) == ROWS
    for i, row in enumerate(ROWS):
        mean, ci95 = t_interval([MEANS[n][i] for n in MEANS])
        assert out[row]["m"] == pytest.approx({"mean": mean, "ci95": ci95, "inputs_se": 0.02}, abs=1e-12)


def test_a_member_mean_that_is_nan_is_refused_naming_row_and_metric():
    rows = {"a": {"agg/mean": {"fcor": {"mean": 0.5, "se": 0.1}}},
            "b": {"agg/mean": {"fcor": {"mean": float("nan"), "se": 0.1}}}}  # fmt: skip
    with pytest.raises(InputError, match=r"row agg/mean, metric fcor \(members \['a', 'b'\]\): member 1"):
        seed_rows(rows, ["fcor"], "se")


def test_robustness_against_scipy_kendall_and_the_members_best_rows():
    out = robustness(member_rows(), {"t": ROWS, "single": ["r1"]}, {"m": True})
    assert len(out) == 1  # a table of one row has no ranking
    pairs = [("a", "b"), ("a", "c"), ("b", "c")]
    taus = [stats.kendalltau(MEANS[p], MEANS[q]).statistic for p, q in pairs]  # 1, -1, -1
    r = out[0]
    assert (r["table"], r["metric"], r["n_pairs"], r["n_members"]) == ("t", "m", 3, 3)
    assert r["kendall_tau"] == pytest.approx(np.mean(taus)) and r["kendall_tau_min"] == pytest.approx(min(taus))
    # best rows: a r3, b r3, c r1 -> only the pair (a, b) agrees; r3 is named by 2 of 3 members
    assert r["best_per_member"] == {"a": "r3", "b": "r3", "c": "r1"}
    assert (r["best"], r["best_share"], r["best_agreement"]) == ("r3", pytest.approx(2 / 3), pytest.approx(1 / 3))
    lower = robustness(member_rows(), {"t": ROWS}, {"m": False})[0]  # lower is better: a r1, b r1, c r3
    assert (lower["best"], lower["best_share"]) == ("r1", pytest.approx(2 / 3))


def summary() -> dict:
    members = {n: {"rows": rows, "n_inputs": 5, "findings": {"best": rows_best, "holds": n != "c"}}
               for (n, rows), rows_best in zip(member_rows().items(), ["r3", "r3", "r1"])}  # fmt: skip
    return population_summary({"log_to": "none", "run": "pop.pt"}, members, {"m": True}, "se", {"t": ROWS},
                              lambda s: s["findings"])  # fmt: skip


def test_population_summary_counts_the_findings_over_members():
    s = summary()
    assert s["members"] == ["a", "b", "c"] and s["n_inputs"] == 5
    assert s["findings"] == {"best": {"kind": "row", "mode": "r3", "share": pytest.approx(2 / 3)},
                             "holds": {"kind": "claim", "share": pytest.approx(2 / 3)}}  # fmt: skip


def test_markdown_and_report_files_hold_the_hand_formatted_rows(tmp_path):
    s = summary()
    mean, ci95 = t_interval([0.1, 0.2, 0.9])
    text = markdown(s, {"m": "M"})
    assert f"| r1 | {mean:.4f} ± {ci95:.4f} (0.0200) |" in text
    assert "| t | M | -0.333 | -1.000 | 0.33 of 3 | r3 (0.67) |" in text
    assert "| holds | 0.67 | — |" in text and "| best | 0.67 | r3 |" in text
    write_population_report(s, tmp_path, "seeds", {"m": "M"})
    members = list(csv.reader((tmp_path / "members.csv").open()))
    assert members[0] == ["member", "row", "m", "m_se"] and members[1] == ["a", "r1", "0.1", "0.01"]
    assert len(members) == 1 + 9
    seed = list(csv.reader((tmp_path / "seed_table.csv").open()))
    assert seed[0] == ["row", "m", "m_ci95_members", "m_inputs_se"]
    assert [float(v) for v in seed[1][1:]] == pytest.approx([mean, ci95, 0.02])
    assert (tmp_path / "table.md").read_text() == text
    assert json.loads((tmp_path / "seeds.json").read_text())["members"] == ["a", "b", "c"]


def test_members_are_evaluated_once_and_resumed_from_their_files(tmp_path):
    calls = []

    def evaluate_one(model, data, folder):
        calls.append(model)
        return {"score": model * 10, "data": data}

    members = SimpleNamespace(names=["s0", "s1"], models=[1, 2], data="d")
    assert evaluate_members(tmp_path, members, evaluate_one) == {"s0": {"score": 10, "data": "d"},
                                                                 "s1": {"score": 20, "data": "d"}}  # fmt: skip
    (tmp_path / "members" / "s1" / "member.json").unlink()
    assert evaluate_members(tmp_path, members, evaluate_one)["s0"] == {"score": 10, "data": "d"}
    assert calls == [1, 2, 2]  # the second run evaluated only the member without its file


def test_a_population_protocol_names_the_member_whose_maps_are_refused(tmp_path):
    def evaluate_one(model, data, folder):
        if model == "nan":
            raise InputError("explainer 'saliency': map 0 has 3 NaN value(s) (1 of 2 maps not finite)")
        return {"ok": 1}

    members = SimpleNamespace(names=["seed0", "seed1"], models=["fine", "nan"], data=None)
    with pytest.raises(InputError, match=r"^population member 1 \(seed1\): explainer 'saliency': map 0 has 3 NaN"):
        evaluate_members(tmp_path, members, evaluate_one)
    assert json.loads((tmp_path / "members" / "seed0" / "member.json").read_text()) == {"ok": 1}
    assert not (tmp_path / "members" / "seed1").exists()
