"""Figures of docs/image_consistency.md from consistency reports (``consistency.json``).

    python tools/consistency_figures.py watson OUT.png LABEL=REPORT_DIR ...   # Watson's C per method
    python tools/consistency_figures.py models OUT.png REPORT_DIR ...         # Figure 6: SA against n

``watson``: one group of bars per method, a bar per report (e.g. ``cnn=runs/.../watson_cnn/<run>``):
Watson et al.'s C = 1 - mean over pairs of S(a, b), with the std of 1 - S over pairs.
``models``: the rows of several reports of one population merged (e.g. vanilla ensembles of
n = 1..6 members and the strategies at n = 4; a strategy and n already in an earlier report are
taken from that one) and drawn by ``plot_agreement`` (SA@k against the
number of pre-trained models, a line per strategy).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from evaluators.protocols.consistency import plot_agreement
from foundation.files import pyplot, save_figure


def read(report: str) -> dict:
    return json.loads((Path(report) / "consistency.json").read_text())


def watson_figure(out: Path, labelled: list[str]) -> None:
    reports = [(item.split("=", 1)[0], read(item.split("=", 1)[1])) for item in labelled]
    methods = list(dict.fromkeys(r["method"] for _, s in reports for r in s["rows"] if r["metric"] == "watson_c"))
    width = 0.8 / len(reports)
    fig, ax = pyplot().subplots(figsize=(6, 3.5), dpi=110)
    for k, (label, summary) in enumerate(reports):
        rows = {r["method"]: r for r in summary["rows"] if r["metric"] == "watson_c"}
        ax.bar(np.arange(len(methods)) + (k - (len(reports) - 1) / 2) * width, [rows[m]["mean"] for m in methods],
               width, yerr=[rows[m]["std"] for m in methods], capsize=3, label=label)  # fmt: skip
    ax.set_xticks(range(len(methods)), methods)
    ax.set(ylabel="Watson's C (1: inseparable)", ylim=(0, 1), title="Fashion-MNIST: members differing only in seed")
    ax.legend()
    save_figure(fig, out)


def models_figure(out: Path, reports: list[str]) -> None:
    summaries, rows, seen = [read(r) for r in reports], [], set()
    for summary in summaries:  # a (strategy, n) already drawn from an earlier report is not drawn again
        new = [r for r in summary["rows"] if (r["strategy"], r["n_models"]) not in seen and r["metric"] != "watson_c"]
        seen |= {(r["strategy"], r["n_models"]) for r in new}
        rows += new
    merged = {**summaries[0], "rows": rows}
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(plot_agreement(merged, Path(tmp)), out)


if __name__ == "__main__":
    kind, target, *sources = sys.argv[1:]
    {"watson": watson_figure, "models": models_figure}[kind](Path(target), sources)
