"""Ley et al.'s Table 1 across datasets, from the reports of ``evaluate.py consistency``.

    python tools/table1.py runs/table1/*/consistency.json             # full table and verdicts
    python tools/table1.py --summary runs/table1/*/consistency.json   # SA (SSA), a row per explainer

One row per dataset and strategy (a dataset's reports merged, say one per
explainer), SA and SSA (mean ± std over individuals) per explainer, and per
dataset whether the paper's ordering holds for SA and SSA of each explainer:
single < average (vanilla) < {perturb, connect} <= combine.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ORDER = ["single", "average", "majority", "perturb", "connect", "combine"]


def ordering_holds(value: dict[str, float]) -> bool:
    """single < vanilla < {perturb, connect} <= combine, on the means."""
    return (
        value["single"] < value["average"] < min(value["perturb"], value["connect"])
        and max(value["perturb"], value["connect"]) <= value["combine"]
    )


def holds(rows: dict, method: str, metric: str, strategies: list[str]) -> bool:
    """The paper's ordering on the means of one explainer's metric in a dataset's merged rows."""
    return ordering_holds({s: rows[(s, method, metric)]["mean"] for s in strategies})


def merge_reports(paths: list[str]) -> list[dict]:
    """One entry per dataset holding the rows of all its reports, e.g. Saliency and
    SmoothGrad from one run and DeepSHAP from another. Reports are merged only when
    they come from the same protocol: the same number of sets and, strategy by
    strategy, the same ensembles' test accuracy; no row may appear twice."""
    merged: dict[str, dict] = {}
    for path in paths:
        summary = json.loads(Path(path).read_text())
        name, n_sets = summary["dataset"], summary["config"]["n_sets"]
        entry = merged.setdefault(name, {"dataset": name, "n_sets": n_sets, "rows": {}, "source": {}, "accuracy": {}})
        if n_sets != entry["n_sets"]:
            raise SystemExit(f"{path}: {n_sets} sets, but an earlier {name} report has {entry['n_sets']}; "
                             "expected reports of one protocol")  # fmt: skip
        for row in summary["rows"]:
            key = (row["strategy"], row["method"], row["metric"])
            if key in entry["rows"]:
                raise SystemExit(f"{path}: {name} {row['method']} {row['strategy']} is also in {entry['source'][key]}; "
                                 "expected each explainer of a dataset in one report")  # fmt: skip
            first = entry["accuracy"].setdefault(row["strategy"], (row["test_acc"], path))
            if row["test_acc"] != first[0]:
                raise SystemExit(f"{path}: {name} {row['strategy']} ensembles have test accuracy {row['test_acc']}, "
                                 f"{first[0]} in {first[1]}; expected the same population and ensembles")  # fmt: skip
            entry["rows"][key], entry["source"][key] = row, path
    return list(merged.values())


def main(paths: list[str]) -> str:
    datasets = merge_reports(paths)
    methods = list(dict.fromkeys(m for d in datasets for (_, m, _) in d["rows"]))
    lines = [
        "| dataset | strategy | " + " | ".join(f"{m} SA | {m} SSA" for m in methods) + " | test acc |",
        "|---|---|" + "---|" * (2 * len(methods) + 1),
    ]
    verdicts = []
    for dataset in datasets:
        rows = dataset["rows"]
        strategies = [s for s in ORDER if any(key[0] == s for key in rows)]
        for strategy in strategies:
            cells = [
                f"{rows[(strategy, m, metric)]['mean']:.2f} ± {rows[(strategy, m, metric)]['std']:.2f}"
                if (strategy, m, metric) in rows
                else "—"  # an explainer no report of this dataset ran
                for m in methods
                for metric in ("sa", "ssa")
            ]
            acc = 100 * next(r["test_acc"] for key, r in rows.items() if key[0] == strategy)
            lines.append(f"| {dataset['dataset']} | {strategy} | " + " | ".join(cells) + f" | {acc:.1f} % |")
        checks = []
        for m in (m for m in methods if all((s, m, "sa") in rows for s in strategies)):
            for metric in ("sa", "ssa"):
                checks.append(f"{m} {metric.upper()}: {'yes' if holds(rows, m, metric, strategies) else 'no'}")
        verdicts.append(f"- {dataset['dataset']} (n_sets {dataset['n_sets']}): " + ", ".join(checks))
    return "\n".join(lines) + "\n\nPaper's ordering single < vanilla < {perturb, connect} ≤ combine:\n\n" + "\n".join(
        verdicts
    ) + "\n"


def summary(paths: list[str]) -> str:
    """SA@k (SSA@k) means, a row per dataset and explainer that ran every strategy, and
    whether the paper's ordering holds for SA and for SSA."""
    lines = [
        "| dataset | explainer | " + " | ".join(ORDER) + " | ordering (SA, SSA) |",
        "|---|---|" + "---|" * (len(ORDER) + 1),
    ]
    for dataset in merge_reports(paths):
        rows = dataset["rows"]
        for m in dict.fromkeys(method for (_, method, _) in rows):
            if not all((s, m, metric) in rows for s in ORDER for metric in ("sa", "ssa")):
                continue
            cells = [f"{rows[(s, m, 'sa')]['mean']:.2f} ({rows[(s, m, 'ssa')]['mean']:.2f})" for s in ORDER]
            verdict = ", ".join("yes" if holds(rows, m, metric, ORDER) else "no" for metric in ("sa", "ssa"))
            lines.append(f"| {dataset['dataset']} | {m} | " + " | ".join(cells) + f" | {verdict} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    args = sys.argv[1:]
    print(summary(args[1:]) if args[:1] == ["--summary"] else main(args), end="")
