"""The one-screen summary: per explainer agree / sane / faithful with the number and its
interval, and the recommended explainer, or "not settled with K members".

* *agree*: SA@k's seed-level mean ± 95 % t-interval over members (``sections.agreement``);
* *sane*: the calibrated verdict, PASS or FAIL, with δ = s_seed − s_rand ± its interval
  (``verdict.calibrated_verdict``);
* *faithful*: the primary faithfulness metric (the first of ``faithfulness``), mean ± interval,
  and the explainer's rank by that mean.

The recommendation is taken among the explainers that pass the sanity verdict: the best by
the primary metric's seed-level mean, *settled* when the bootstrap over members
(``verdict.members_to_settle``, on those explainers alone) names it in at least 95 % of
resamples of K members; otherwise the summary says "not settled with K members" and names
the leader with its share. With no explainer passing, nothing is recommended.
"""

from __future__ import annotations

import torch

from evaluators.reports.reliability.verdict import SETTLED, members_to_settle


def recommendation(units: dict[str, dict], sections: dict, n_bootstrap: int, seed: int) -> dict:
    """The recommended explainer among those that pass (the module docstring)."""
    faithful = sections["faithfulness"]
    metric = faithful["primary"]
    higher = faithful["by_metric"][metric]["higher_is_better"]
    sane = [n for n, s in sections["sanity"]["explainers"].items() if s["verdict"]["passed"]]
    k = next(iter(units.values()))["maps"].shape[0]
    if not sane:
        return {"explainer": None, "settled": False, "metric": metric, "candidates": [], "n_members": k,
                "text": "none: no explainer passes the calibrated sanity check"}  # fmt: skip
    if len(sane) == 1:
        return {"explainer": sane[0], "settled": True, "metric": metric, "candidates": sane, "n_members": k,
                "text": f"{sane[0]} (the only explainer that passes the sanity check)"}  # fmt: skip
    scores = torch.stack([units[n]["faithfulness"][metric] for n in sane], 1)
    settle = members_to_settle(scores, higher, n_bootstrap, seed)
    best = sane[settle["best"]]
    share = settle["settle_share"][k]
    if settle["members_needed"] is None:
        text = (f"not settled with {k} members: {best} leads on {metric} in {share:.0%} of bootstrap resamples "
                f"(settled needs {SETTLED:.0%})")
    else:
        text = (f"{best}: best on {metric} among the explainers that pass, settled with {settle['members_needed']} "
                f"of {k} members ({share:.0%} of resamples of {k})")
    return {"explainer": best, "settled": settle["members_needed"] is not None, "metric": metric,
            "candidates": sane, "n_members": k, "settle": settle | {"best": best}, "text": text}  # fmt: skip


def _interval(entry: dict, digits: int = 3) -> str:
    return f"{entry['mean']:.{digits}f} ± {entry['ci95']:.{digits}f}"


def summary_rows(sections: dict) -> list[dict]:
    """Per explainer: its agree, sane and faithful cells (numbers and the text shown)."""
    k = sections["agreement"]["k"]
    metric = sections["faithfulness"]["primary"]
    faithful = sections["faithfulness"]["by_metric"][metric]
    means = {n: e["mean"] for n, e in faithful["explainers"].items()}
    order = sorted(means, key=means.get, reverse=faithful["higher_is_better"])
    rows = []
    for name, agreement in sections["agreement"]["explainers"].items():
        verdict = sections["sanity"]["explainers"][name]["verdict"]
        rows.append({"explainer": name, "agree": agreement["sa"], "sane": verdict["delta"],
                     "passed": verdict["passed"], "faithful": faithful["explainers"][name],
                     "rank": order.index(name) + 1,
                     "cells": [name, f"SA@{k} {_interval(agreement['sa'], 2)}",
                               f"{'PASS' if verdict['passed'] else 'FAIL'} δ {_interval(verdict['delta'], 2)}",
                               f"{_interval(faithful['explainers'][name])} (#{order.index(name) + 1})"]})
    return rows


def summary_text(report: dict) -> str:
    """The one-screen summary as plain text (printed, and the top of the HTML page)."""
    info = report["population"]
    sections = report["sections"]
    metric = sections["faithfulness"]["primary"]
    arrow = "↑" if sections["faithfulness"]["by_metric"][metric]["higher_is_better"] else "↓"
    head = ["explainer", "agree (across seeds)", "sane (seed − randomised)", f"faithful: {metric} {arrow}"]
    rows = [r["cells"] for r in report["summary"]["rows"]]
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    reference = sections["sanity"]
    kept = len(reference["reference_members"])
    lines = [f"Can I trust these explanations? {info['dataset']}: {info['n_members']} members, {info['n_points']} "
             f"test {info['inputs']}, mean test accuracy {info['accuracy_mean']:.3f}",
             f"(95 % t-intervals over members; seed reference from {kept} equally good members"
             + ("" if reference["accuracy_filter_applied"] else ", all members: too few within the tolerance") + ")",
             "", line(head), line(["-" * w for w in widths]), *map(line, rows), "",
             f"Recommended: {report['summary']['recommendation']['text']}"]  # fmt: skip
    return "\n".join(lines) + "\n"
