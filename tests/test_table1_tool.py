"""tools/table1.py: the cross-dataset Table 1 and its ordering verdicts."""

from __future__ import annotations

import json

import pytest

from tools.table1 import main, ordering_holds, summary


def write_report(path, dataset, methods, values, n_sets=2, test_acc=0.7, std=0.0):
    """A report of ``evaluate.py consistency`` with the same mean for SA and SSA."""
    rows = [
        {"strategy": s, "method": method, "metric": m, "mean": v, "std": std, "test_acc": test_acc}
        for method in methods
        for s, v in values.items()
        for m in ("sa", "ssa")
    ]
    path.write_text(json.dumps({"dataset": dataset, "config": {"n_sets": n_sets}, "rows": rows}))
    return str(path)


def test_ordering_by_hand():
    means = {"single": 0.5, "average": 0.6, "majority": 0.1, "perturb": 0.7, "connect": 0.65, "combine": 0.7}
    assert ordering_holds(means)  # combine may tie the better of perturb and connect
    assert not ordering_holds({**means, "connect": 0.6})  # connect must beat vanilla
    assert not ordering_holds({**means, "combine": 0.69})  # combine below perturb


def test_table_lists_every_strategy_and_its_verdict(tmp_path):
    values = {"single": 0.5, "average": 0.6, "majority": 0.6, "perturb": 0.55, "connect": 0.7, "combine": 0.8}
    text = main([write_report(tmp_path / "consistency.json", "toy", ["saliency"], values, n_sets=3, std=0.1)])
    assert text.count("| toy |") == 6
    assert "| toy | perturb | 0.55 ± 0.10 | 0.55 ± 0.10 | 70.0 % |" in text
    assert "- toy (n_sets 3): saliency SA: no, saliency SSA: no" in text  # perturb is under vanilla


def test_an_explainer_one_report_did_not_run_is_a_dash_without_verdict(tmp_path):
    values = {"single": 0.5, "average": 0.6, "majority": 0.6, "perturb": 0.7, "connect": 0.7, "combine": 0.8}
    paths = [
        write_report(tmp_path / f"{dataset}.json", dataset, methods, values)
        for dataset, methods in (("one", ["saliency", "deepshap"]), ("two", ["saliency"]))
    ]
    text = main(paths)
    assert "| two | combine | 0.80 ± 0.00 | 0.80 ± 0.00 | — | — | 70.0 % |" in text
    assert "- one (n_sets 2): saliency SA: yes, saliency SSA: yes, deepshap SA: yes, deepshap SSA: yes" in text
    assert "- two (n_sets 2): saliency SA: yes, saliency SSA: yes\n" in text


def test_reports_of_one_dataset_merge_into_its_rows(tmp_path):
    good = {"single": 0.5, "average": 0.6, "majority": 0.6, "perturb": 0.7, "connect": 0.7, "combine": 0.8}
    flat = dict.fromkeys(good, 0.9)
    paths = [
        write_report(tmp_path / "a.json", "toy", ["saliency", "smoothgrad"], good),
        write_report(tmp_path / "b.json", "toy", ["deepshap"], flat),
    ]
    text = main(paths)
    assert text.count("| toy |") == 6  # one row per strategy, not per report
    single = "| toy | single |" + " 0.50 ± 0.00 |" * 4 + " 0.90 ± 0.00 |" * 2 + " 70.0 % |"
    assert single in text
    verdict = "saliency SA: yes, saliency SSA: yes, smoothgrad SA: yes, smoothgrad SSA: yes, deepshap SA: no"
    assert f"- toy (n_sets 2): {verdict}, deepshap SSA: no" in text


@pytest.mark.parametrize(
    "second, message",
    [
        ({"methods": ["saliency"]}, "is also in"),  # the same explainer twice
        ({"methods": ["deepshap"], "n_sets": 3}, "3 sets, but an earlier toy report has 2"),
        ({"methods": ["deepshap"], "test_acc": 0.6}, "expected the same population and ensembles"),
    ],
)
def test_reports_that_do_not_belong_together_are_refused(tmp_path, second, message):
    values = dict.fromkeys(["single", "average", "majority", "perturb", "connect", "combine"], 0.5)
    first = write_report(tmp_path / "a.json", "toy", ["saliency"], values)
    other = write_report(tmp_path / "b.json", "toy", values=values, **second)
    with pytest.raises(SystemExit, match=message):
        main([first, other])


def test_summary_is_a_row_per_explainer_that_ran_every_strategy(tmp_path):
    good = {"single": 0.5, "average": 0.6, "majority": 0.6, "perturb": 0.7, "connect": 0.75, "combine": 0.8}
    partial = {s: v for s, v in good.items() if s != "combine"}
    paths = [
        write_report(tmp_path / "a.json", "toy", ["saliency"], good),
        write_report(tmp_path / "b.json", "toy", ["deepshap"], partial),
    ]
    text = summary(paths)
    cells = " | ".join(f"{v:.2f} ({v:.2f})" for v in good.values())
    row = f"| toy | saliency | {cells} | yes, yes |"
    assert row in text.splitlines()
    assert "deepshap" not in text
