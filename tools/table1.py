"""Ley et al.'s Table 1 across datasets, from the reports of ``evaluate.py consistency``.

    python tools/table1.py runs/table1/*/consistency.json > docs/table1.md

One row per dataset and strategy, SA and SSA (mean ± std over individuals) per
explainer, and per dataset whether the paper's ordering holds for SA and SSA of each
explainer: single < average (vanilla) < {perturb, connect} <= combine.
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


def main(paths: list[str]) -> str:
    summaries = [json.loads(Path(p).read_text()) for p in paths]
    methods = list(dict.fromkeys(r["method"] for s in summaries for r in s["rows"]))
    lines = [
        "| dataset | strategy | " + " | ".join(f"{m} SA | {m} SSA" for m in methods) + " | test acc |",
        "|---|---|" + "---|" * (2 * len(methods) + 1),
    ]
    verdicts = []
    for summary in summaries:
        rows = {(r["strategy"], r["method"], r["metric"]): r for r in summary["rows"]}
        strategies = [s for s in ORDER if (s, methods[0], "sa") in rows]
        for strategy in strategies:
            cells = [
                f"{rows[(strategy, m, metric)]['mean']:.2f} ± {rows[(strategy, m, metric)]['std']:.2f}"
                if (strategy, m, metric) in rows
                else "—"  # an explainer this report did not run
                for m in methods
                for metric in ("sa", "ssa")
            ]
            acc = 100 * rows[(strategy, methods[0], "sa")]["test_acc"]
            lines.append(f"| {summary['dataset']} | {strategy} | " + " | ".join(cells) + f" | {acc:.1f} % |")
        checks = []
        for m in (m for m in methods if all((s, m, "sa") in rows for s in strategies)):
            for metric in ("sa", "ssa"):
                means = {s: rows[(s, m, metric)]["mean"] for s in strategies}
                checks.append(f"{m} {metric.upper()}: {'yes' if ordering_holds(means) else 'no'}")
        verdicts.append(f"- {summary['dataset']} (n_sets {summary['config']['n_sets']}): " + ", ".join(checks))
    return "\n".join(lines) + "\n\nPaper's ordering single < vanilla < {perturb, connect} ≤ combine:\n\n" + "\n".join(
        verdicts
    ) + "\n"


if __name__ == "__main__":
    print(main(sys.argv[1:]), end="")
