"""Ley et al.'s Table 1 across datasets, from the reports of ``evaluate.py consistency``.

    python tools/table1.py runs/table1/*/consistency.json             # full table and verdicts
    python tools/table1.py --summary runs/table1/*/consistency.json   # SA (SSA), a row per explainer
    python tools/table1.py --paper runs/table1/*/consistency.json     # beside the paper's Table 1

One row per dataset and strategy (a dataset's reports merged, say one per
explainer), SA and SSA (mean ± std over individuals) per explainer, and per
dataset whether the paper's ordering holds for SA and SSA of each explainer:
single < average (vanilla) < {perturb, connect} <= combine. ``--paper`` sets every
cell of the paper's Table 1 (SmoothGrad and DeepSHAP; top-5 SA, top-5 SSA, top-d
CDC) beside ours, with Δ = ours - paper, marks |Δ| > 0.10, and names the settings in
which each report departs from the paper's protocol (its options; how its population was
trained, e.g. `--model.loss_on probabilities`, is the population file's and not named).
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from the checkout
from foundation.errors import InputError, run_entry_point  # noqa: E402

ORDER = ["single", "average", "majority", "perturb", "connect", "combine"]
PAPER_VALUES = Path(__file__).resolve().parent.parent / "docs" / "paper_values" / "ley2023_table1.csv"
PAPER_STRATEGIES = ["single", "average", "perturb", "connect", "combine"]  # the paper's Vanilla is `average`
PAPER_METRICS = {"sa": "SA@5", "ssa": "SSA@5", "cdc_d": "CDC@d"}
TOLERANCE = 0.10
# The paper's protocol (§4, Appendices C and D) as the Table 1 configs run it: curves with
# fixed (trained-member) end points, see docs/table1.md.
PAPER_SETTINGS = {"n_models": [4], "n_sets": 50, "k": 5, "n_points_smoothgrad": 1000, "n_points_deepshap": 100,
                  "n_background": 100, "curve_mode": "fixed", "curve_kind": "bezier", "t_sampling": "uniform",
                  "explain_output": None, "smoothgrad_sigma": 0.1, "smoothgrad_samples": 50,
                  "deepshap_softmax_rule": "gradient"}  # fmt: skip
# what reports made before these options used
BEFORE_OPTIONS = {"curve_mode": "fixed", "curve_kind": "bezier", "t_sampling": "even", "explain_output": None,
                  "smoothgrad_sigma": 0.1, "smoothgrad_samples": 50, "deepshap_softmax_rule": "gradient"}  # fmt: skip


def ordering_holds(value: dict[str, float]) -> bool:
    """single < vanilla < {perturb, connect} <= combine, on the means."""
    return (
        value["single"] < value["average"] < min(value["perturb"], value["connect"])
        and max(value["perturb"], value["connect"]) <= value["combine"]
    )


def holds(rows: dict, method: str, metric: str, strategies: list[str]) -> bool:
    """The paper's ordering on the means of one explainer's metric in a dataset's merged rows."""
    return ordering_holds({s: rows[(s, method, metric)]["mean"] for s in strategies})


def read_report(path: str) -> dict:
    """A report of ``evaluate.py consistency``; a missing or foreign file names itself."""
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise InputError(f"{path}: cannot be read as a consistency.json report ({err})") from None
    if not isinstance(report, dict) or not {"dataset", "config", "rows"} <= set(report):
        raise InputError(f"{path}: not a consistency.json report (expected the keys dataset, config, rows)")
    return report


def merge_reports(paths: list[str]) -> list[dict]:
    """One entry per dataset holding the rows of all its reports, e.g. Saliency and
    SmoothGrad from one run and DeepSHAP from another. Reports are merged only when
    they come from the same protocol: the same number of sets and, strategy by
    strategy, the same ensembles' test accuracy; no row may appear twice."""
    merged: dict[str, dict] = {}
    for path in paths:
        summary = read_report(path)
        name, n_sets = summary["dataset"], summary["config"]["n_sets"]
        entry = merged.setdefault(name, {"dataset": name, "n_sets": n_sets, "rows": {}, "source": {}, "accuracy": {},
                                         "configs": {}})  # fmt: skip
        entry["configs"][path] = summary["config"]
        if n_sets != entry["n_sets"]:
            raise InputError(f"{path}: {n_sets} sets, but an earlier {name} report has {entry['n_sets']}; "
                             "expected reports of one protocol")  # fmt: skip
        for row in summary["rows"]:
            key = (row["strategy"], row["method"], row["metric"])
            if key in entry["rows"]:
                raise InputError(f"{path}: {name} {row['method']} {row['strategy']} is also in {entry['source'][key]}; "
                                 "expected each explainer of a dataset in one report")  # fmt: skip
            first = entry["accuracy"].setdefault(row["strategy"], (row["test_acc"], path))
            if row["test_acc"] != first[0]:
                raise InputError(f"{path}: {name} {row['strategy']} ensembles have test accuracy {row['test_acc']}, "
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


def read_paper_values(path: Path = PAPER_VALUES) -> dict[tuple[str, str, str, str], dict]:
    """(dataset, strategy, method, metric) -> {mean, std, line} from the typed-in table."""
    with open(path, newline="") as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {(r["dataset"], r["strategy"], r["method"], r["metric"]): {"mean": float(r["mean"]),
                "std": float(r["std"]), "line": int(r["line"])} for r in rows}  # fmt: skip


def departures(config: dict, method: str) -> list[str]:
    """The options in which a report departs from the paper's protocol, for one explainer."""
    relevant = {"smoothgrad": ["n_points_smoothgrad", "smoothgrad_sigma", "smoothgrad_samples"],
                "deepshap": ["n_points_deepshap", "n_background", "deepshap_softmax_rule"]}[method]  # fmt: skip
    values = {**BEFORE_OPTIONS, **config}
    keys = ["n_models", "n_sets", "k", "curve_mode", "curve_kind", "t_sampling", "explain_output", *relevant]
    return [f"{key} {values[key]} (paper {PAPER_SETTINGS[key]})" for key in keys if values[key] != PAPER_SETTINGS[key]]


def beside_paper(paths: list[str], paper_path: Path = PAPER_VALUES) -> str:
    """Every cell of the paper's Table 1 beside ours: paper mean ± std, ours, Δ; |Δ| >
    0.10 in bold. Cells no report ran are dashes; the closing lines count the SA/SSA
    cells within 0.10 and list each report's departures from the paper's settings."""
    paper = read_paper_values(paper_path)
    datasets = {entry["dataset"]: entry for entry in merge_reports(paths)}  # one report per cell, same ensembles
    head = "| dataset | explainer | strategy | " + " | ".join(
        f"{label} paper | {label} ours | Δ" for label in PAPER_METRICS.values()) + " |"  # fmt: skip
    lines = [head, "|---|---|---|" + "---|" * (3 * len(PAPER_METRICS))]
    within, compared = 0, 0
    for dataset in (d for d in dict.fromkeys(key[0] for key in paper) if d in datasets):
        for method in ("smoothgrad", "deepshap"):
            for strategy in PAPER_STRATEGIES:
                cells = []
                for metric in PAPER_METRICS:
                    theirs = paper[(dataset, strategy, method, metric)]
                    mine = datasets[dataset]["rows"].get((strategy, method, metric))
                    cells.append(f"{theirs['mean']:.2f} ± {theirs['std']:.2f}")
                    if mine is None:
                        cells += ["—", "—"]
                        continue
                    delta = mine["mean"] - theirs["mean"]
                    far = abs(delta) > TOLERANCE
                    shown = f"**{delta:+.2f}**" if far else f"{delta:+.2f}"
                    cells += [f"{mine['mean']:.2f} ± {mine['std']:.2f}", shown]
                    if metric != "cdc_d":
                        compared, within = compared + 1, within + (not far)
                lines.append(f"| {dataset} | {method} | {strategy} | " + " | ".join(cells) + " |")
    sa_ssa = sum(1 for key in paper if key[3] != "cdc_d")
    lines += ["", f"SA/SSA cells within {TOLERANCE:.2f} of the paper: {within} of {compared} compared "
              f"({sa_ssa} in the paper's table).", ""]  # fmt: skip
    for entry in datasets.values():
        for path, config in entry["configs"].items():
            for method in (m for m in ("smoothgrad", "deepshap") if m in config["methods"]):
                departs = departures(config, method)
                lines.append(f"- {entry['dataset']} {method}, {', '.join(config['strategies'])} ({path}): "
                             + ("the paper's settings" if not departs else "departs from the paper in "
                                + ", ".join(departs)))  # fmt: skip
    return "\n".join(lines) + "\n"


def run(args: list[str]) -> None:
    modes = {"--summary": summary, "--paper": beside_paper}
    mode, paths = (modes[args[0]], args[1:]) if args[:1] and args[0] in modes else (main, args)
    if not paths:
        raise InputError("expected consistency.json reports, e.g. python tools/table1.py --paper runs/consistency/*/"
                         "consistency.json")  # fmt: skip
    print(mode(paths), end="")


if __name__ == "__main__":
    run_entry_point(run)
