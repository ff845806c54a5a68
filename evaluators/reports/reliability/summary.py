"""The one-screen summary: per explainer, and per aggregate of the explainers' maps, agree /
sane / faithful with the number and its interval, and the recommendation, or "not settled
with K members".

* *agree*: SA@k's seed-level mean ± 95 % t-interval over members (``sections.agreement``), and
  beside it that of average ensembles of n members (``ensembles``; linear explainers, where
  the population has enough members);
* *sane*: the calibrated verdict, PASS or FAIL, with δ = s_seed − s_rand ± its interval
  (``verdict.calibrated_verdict``), and beside it the data-randomisation verdict
  (δ = s_seed − s_perm, ``permuted``) where a permuted-label population is given;
* *faithful*: the primary faithfulness metric (the first of ``faithfulness``), mean ± interval,
  and the rank by that mean among explainers and aggregates.

The recommendation is taken among the candidates (explainers and aggregates, ``aggregates``)
that pass every sanity verdict given: the best by the primary metric's seed-level mean,
*settled* when the bootstrap over members (``verdict.members_to_settle``, on those candidates
alone) names it in at least 95 % of resamples of K members; otherwise the summary says "not
settled with K members" and names the leader with its share. With no candidate passing,
nothing is recommended.
"""

from __future__ import annotations

import torch

from evaluators.reports.reliability.verdict import SETTLED, members_to_settle


def verdicts(sections: dict) -> dict[str, list[dict]]:
    """Per candidate (explainer, then aggregate) its sanity verdicts: the model randomisation's,
    then the data randomisation's where a permuted population is given."""
    data = sections["sanity"]["data_randomisation"]
    out = {name: [entry["verdict"]] + ([data["explainers"][name]] if data else [])
           for name, entry in sections["sanity"]["explainers"].items()}  # fmt: skip
    for name, entry in sections["faithfulness"]["aggregates"].get("aggregates", {}).items():
        out[name] = [entry["verdict"]] + ([entry["data_randomisation"]] if entry["data_randomisation"] else [])
    return out


def recommendation(units: dict[str, dict], sections: dict, n_bootstrap: int, seed: int) -> dict:
    """The recommended candidate among those that pass (the module docstring); ``units``: every
    candidate's, with its members' faithfulness scores."""
    faithful = sections["faithfulness"]
    metric = faithful["primary"]
    higher = faithful["by_metric"][metric]["higher_is_better"]
    sane = [n for n, checks in verdicts(sections).items() if all(v["passed"] for v in checks)]
    k = next(iter(units.values()))["maps"].shape[0]
    if not sane:
        return {"explainer": None, "settled": False, "metric": metric, "candidates": [], "n_members": k,
                "text": "none: no explainer or aggregate passes the calibrated sanity checks"}  # fmt: skip
    if len(sane) == 1:
        return {"explainer": sane[0], "settled": True, "metric": metric, "candidates": sane, "n_members": k,
                "text": f"{sane[0]} (the only candidate that passes the sanity checks)"}  # fmt: skip
    scores = torch.stack([units[n]["faithfulness"][metric] for n in sane], 1)
    settle = members_to_settle(scores, higher, n_bootstrap, seed)
    best = sane[settle["best"]]
    share = settle["settle_share"][k]
    if settle["members_needed"] is None:
        text = (f"not settled with {k} members: {best} leads on {metric} in {share:.0%} of bootstrap resamples "
                f"(settled needs {SETTLED:.0%})")
    else:
        text = (f"{best}: best on {metric} among the explainers and aggregates that pass, settled with "
                f"{settle['members_needed']} of {k} members ({share:.0%} of resamples of {k})")
    return {"explainer": best, "settled": settle["members_needed"] is not None, "metric": metric,
            "candidates": sane, "n_members": k, "settle": settle | {"best": best}, "text": text}  # fmt: skip


def _interval(entry: dict, digits: int = 3) -> str:
    return f"{entry['mean']:.{digits}f} ± {entry['ci95']:.{digits}f}"


def _verdict_cell(checks: list[dict]) -> str:
    return "; ".join(f"{'PASS' if v['passed'] else 'FAIL'} {_interval(v['delta'], 2)}" for v in checks)


def summary_rows(sections: dict) -> list[dict]:
    """Per candidate (explainers, then aggregates): its agree, sane and faithful cells (numbers
    and the text shown)."""
    metric = sections["faithfulness"]["primary"]
    faithful = sections["faithfulness"]["by_metric"][metric]
    means = {n: e["mean"] for n, e in faithful["explainers"].items()}
    order = sorted(means, key=means.get, reverse=faithful["higher_is_better"])
    ensembles = sections["agreement"]["ensembles"].get("explainers", {})
    agreements = dict(sections["agreement"]["explainers"])
    agreements |= {n: e["agreement"] for n, e in sections["faithfulness"]["aggregates"].get("aggregates", {}).items()}
    rows = []
    for name, checks in verdicts(sections).items():
        agree = _interval(agreements[name]["sa"], 2) + (f"; {_interval(ensembles[name]['sa'], 2)}"
                                                        if name in ensembles else "")  # fmt: skip
        rows.append({"explainer": name, "agree": agreements[name]["sa"],
                     "agree_ensembles": ensembles[name]["sa"] if name in ensembles else None,
                     "sane": checks[0]["delta"], "passed": checks[0]["passed"],
                     "data_sane": checks[1]["delta"] if len(checks) > 1 else None,
                     "data_passed": checks[1]["passed"] if len(checks) > 1 else None,
                     "faithful": faithful["explainers"][name], "rank": order.index(name) + 1,
                     "cells": [name, agree, _verdict_cell(checks),
                               f"{_interval(faithful['explainers'][name])} (#{order.index(name) + 1})"]})
    return rows


def summary_text(report: dict) -> str:
    """The one-screen summary as plain text (printed, and the top of the HTML page)."""
    info = report["population"]
    sections = report["sections"]
    metric = sections["faithfulness"]["primary"]
    arrow = "↑" if sections["faithfulness"]["by_metric"][metric]["higher_is_better"] else "↓"
    ensembles, data = sections["agreement"]["ensembles"], sections["sanity"]["data_randomisation"]
    head = ["explainer", f"agree: SA@{sections['agreement']['k']}" + ("; ensembles" if ensembles["available"] else ""),
            "sane: δ randomised" + ("; δ permuted" if data else ""), f"faithful: {metric} {arrow}"]  # fmt: skip
    rows = [r["cells"] for r in report["summary"]["rows"]]
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    reference = sections["sanity"]
    kept = len(reference["reference_members"])
    notes = [f"agree: members' SA; average ensembles of {ensembles['size']} members "
             f"({ensembles['n_ensembles']} disjoint)" if ensembles["available"]
             else f"agree: members' SA (no ensembles: {ensembles['why']})"]  # fmt: skip
    if data:
        notes.append(f"sane: δ = s_seed − s_randomised; δ = s_seed − s_permuted ({data['n_pairs']} members trained on "
                     f"permuted labels, test accuracy {data['accuracy_mean']:.3f})")  # fmt: skip
    else:
        notes.append("sane: δ = s_seed − s_randomised (no permuted-label population given)")
    truth = sections.get("truth", {"available": False})
    if truth["available"]:
        against, primary = truth["against_faithfulness"], truth["primary"]
        best = truth["by_metric"][primary]["candidates"][against["best_by_truth"]]
        notes.append(f"truth: closest by {primary}: {against['best_by_truth']} ({_interval(best)}); the "
                     f"{against['metric']} ranking agrees with it: Kendall τ {against['kendall_tau']:.2f}, same best: "
                     f"{'yes' if against['same_best'] else 'no'}")  # fmt: skip
    lines = [f"Can I trust these explanations? {info['dataset']}: {info['n_members']} members, {info['n_points']} "
             f"test {info['inputs']}, mean test accuracy {info['accuracy_mean']:.3f}",
             f"(95 % t-intervals over members; seed reference from {kept} equally good members"
             + ("" if reference["accuracy_filter_applied"] else ", all members: too few within the tolerance") + ")",
             *notes, "", line(head), line(["-" * w for w in widths]), *map(line, rows), "",
             f"Recommended: {report['summary']['recommendation']['text']}"]  # fmt: skip
    return "\n".join(lines) + "\n"
