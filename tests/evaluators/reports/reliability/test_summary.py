"""evaluators/reports/reliability/summary.py: the candidates' verdicts, the recommendation (none, the
only one that passes, settled, not settled) and the summary's rows and text, on hand-written sections
and the synthetic report of tests/support/reliability.py, against hand-formatted cells."""

from __future__ import annotations

import torch

from evaluators.reports.reliability.summary import recommendation, summary_rows, verdicts
from tests.support.reliability import INFIDELITY, MEMBERS, report, units


def verdict(passed: bool, mean: float) -> dict:
    return {"passed": passed, "delta": {"mean": mean, "ci95": 0.1}}


def sections(passed: dict[str, bool], permuted: dict[str, dict] | None = None) -> dict:
    """Hand-written sections of explainers a, b (infidelity means 0.2 and 0.1: b ranks first)."""
    faithful = {"a": {"mean": 0.2, "ci95": 0.01}, "b": {"mean": 0.1, "ci95": 0.02}}
    return {"sanity": {"data_randomisation": {"explainers": permuted} if permuted else None,
                       "explainers": {n: {"verdict": verdict(p, 0.5 if p else -0.25)} for n, p in passed.items()}},
            "faithfulness": {"primary": "infidelity", "aggregates": {"available": False},
                             "by_metric": {"infidelity": {"higher_is_better": False, "explainers": faithful}}},
            "agreement": {"k": 2, "ensembles": {"available": False},
                          "explainers": {"a": {"sa": {"mean": 0.7, "ci95": 0.05}},
                                         "b": {"sa": {"mean": 0.4, "ci95": 0.125}}}}}  # fmt: skip


def test_verdicts_add_the_permuted_labels_verdict_where_given():
    assert verdicts(sections({"a": True, "b": False})) == {"a": [verdict(True, 0.5)], "b": [verdict(False, -0.25)]}
    permuted = {"a": verdict(False, -0.5), "b": verdict(True, 0.25)}
    assert verdicts(sections({"a": True, "b": True}, permuted))["a"] == [verdict(True, 0.5), verdict(False, -0.5)]


def test_the_recommendation_among_the_candidates_that_pass():
    u = units()
    none = recommendation(u, sections({"a": False, "b": False}), 50, 0)
    assert none["explainer"] is None and none["text"].startswith("none: no explainer or aggregate passes")
    only = recommendation(u, sections({"a": False, "b": True}), 50, 0)
    assert (only["explainer"], only["settled"], only["text"]) == (
        "b", True, "b (the only candidate that passes the sanity checks)")  # fmt: skip
    both = recommendation(u, sections({"a": True, "b": True}), 50, 0)  # a has the lower infidelity on every member
    assert (both["explainer"], both["settled"], both["candidates"], both["n_members"]) == ("a", True, ["a", "b"], 4)
    assert both["text"] == ("a: best on infidelity among the explainers and aggregates that pass, settled with 2 of 4 "
                            "members (100% of resamples of 4)")  # fmt: skip


def test_a_tie_is_not_settled():
    u = units()
    u["a"]["faithfulness"]["infidelity"] = torch.tensor([0.1, 0.9, 0.1, 0.9], dtype=torch.float64)
    u["b"]["faithfulness"]["infidelity"] = torch.tensor([0.9, 0.1, 0.9, 0.1], dtype=torch.float64)
    tie = recommendation(u, sections({"a": True, "b": True}), 200, 0)
    assert not tie["settled"] and tie["text"].startswith(f"not settled with {MEMBERS} members: a leads on infidelity")
    assert tie["settle"]["settle_share"][MEMBERS] < 0.95


def test_rows_rank_by_the_primary_metric_and_format_the_cells():
    rows = summary_rows(sections({"a": True, "b": False}))
    assert [r["cells"] for r in rows] == [["a", "0.70 ± 0.05", "PASS 0.50 ± 0.10", "0.200 ± 0.010 (#2)"],
                                          ["b", "0.40 ± 0.12", "FAIL -0.25 ± 0.10", "0.100 ± 0.020 (#1)"]]
    assert [(r["rank"], r["passed"], r["data_sane"]) for r in rows] == [(2, True, None), (1, False, None)]


def test_the_text_names_the_population_columns_and_recommendation():
    text = report("loans")["summary"]["text"].splitlines()
    assert text[0] == "Can I trust these explanations? loans: 4 members, 5 test rows, mean test accuracy 0.800"
    assert text[1] == "(95 % t-intervals over members; seed reference from 4 equally good members)"
    assert "agree: members' SA (no ensembles: too few members)" in text
    assert "sane: δ = s_seed − s_randomised (no permuted-label population given)" in text
    head = next(line for line in text if line.startswith("explainer"))
    assert head.split() == ["explainer", "agree:", "SA@2", "sane:", "δ", "randomised", "faithful:", "infidelity", "↓"]
    rows = [line for line in text if line.startswith(("a ", "b "))]
    assert [r.split()[0] for r in rows] == list(INFIDELITY) and rows[0].endswith("(#1)")
    assert text[-1].startswith("Recommended: ")
