"""The report's three sections, from the maps each explainer's unit holds (``maps.explainer_unit``).

* ``agreement``: per explainer (an image's map as a vector of its pixels), Ley et al.'s SA@k,
  SSA@k and CDC@k between every pair of members (``agreement_functional.ley_agreements``, each
  pair's mean over inputs), per member the mean over the pairs it is in, and their seed-level
  mean with its 95 % t-interval
  (``seed_robustness.member_interval``); Watson et al.'s C (1 − the mean over pairs of
  S(a, b) = 2 |M(a, b) − 0.5|, ``agreement_functional.pair_separations``), per member
  1 − the mean S of its pairs.
* ``sanity``: per explainer the calibrated verdict (``verdict.calibrated_verdict``), the
  cascading curve (mean over members of each step's similarity, with its interval) and the
  random-logit similarity (seed-level mean ± interval).
* ``faithfulness``: per metric (its direction from the metric registry) and explainer the
  seed-level mean ± t-interval over members; the stability of the members' rankings of the
  explainers (``seed_robustness.ranking_stability``: mean Kendall τ_b over member pairs, the
  share of pairs agreeing on the best) with the most frequent best and its share of members;
  and how many members settle the ranking (``verdict.members_to_settle``).
"""

from __future__ import annotations

from collections import Counter

import torch

from evaluators.metrics.agreement_functional import ley_agreements, pair_separations, pairs
from evaluators.metrics.registry import METRICS
from evaluators.metrics.seed_robustness import member_interval, ranking_stability
from evaluators.reports.reliability.verdict import calibrated_verdict, members_to_settle

AGREEMENTS = ("sa", "ssa", "cdc_k")


def per_member(pair_values: torch.Tensor, m: int) -> torch.Tensor:
    """(M,) mean of the pair values (P,) (``pairs(m)`` order) over the pairs each member is in."""
    i, j = pairs(m)
    total = torch.zeros(m, dtype=torch.float64).index_add_(0, i, pair_values).index_add_(0, j, pair_values)
    return total / (m - 1)


def agreement(units: dict[str, dict], k: int, watson: bool, seed: int) -> dict:
    """The agreement section (the module docstring)."""
    out = {}
    for name, unit in units.items():
        maps = unit["maps"].flatten(2)  # (M, N, d): an image's map as a vector of its pixels
        m = maps.shape[0]
        scores = ley_agreements(maps, k)
        entry = {}
        for metric in AGREEMENTS:
            members = per_member(scores[metric].double().mean(1), m)
            interval = member_interval(members, f"explainer {name!r}: {metric}")
            entry[metric] = {**interval, "per_member": members.tolist()}
        if watson:
            separations = torch.tensor(pair_separations(maps.float(), seed), dtype=torch.float64)
            members = 1 - per_member(separations, m)
            entry["watson_c"] = {**member_interval(members, f"explainer {name!r}: watson_c"),
                                 "population": 1 - separations.mean().item(), "per_member": members.tolist()}
        out[name] = entry
    return {"k": k, "explainers": out}


def sanity(units: dict[str, dict], measure: str, kept: list[int], filtered: bool) -> dict:
    """The sanity section (the module docstring)."""
    out = {}
    for name, unit in units.items():
        cascade = unit["cascade"]
        steps = [member_interval(cascade[:, j], f"explainer {name!r}: layer {layer}") | {"layer": layer}
                 for j, layer in enumerate(unit["layers"])]  # fmt: skip
        verdict = calibrated_verdict(unit["maps"], unit["randomised"], measure, kept, f"explainer {name!r}")
        out[name] = {"verdict": verdict,
                     "cascade": steps,
                     "random_logit": member_interval(unit["random_logit"], f"explainer {name!r}: random logit")}
    return {"measure": measure, "reference_members": kept, "accuracy_filter_applied": filtered, "explainers": out}


def faithfulness(units: dict[str, dict], metrics: list[str], n_bootstrap: int, seed: int) -> dict:
    """The faithfulness section (the module docstring)."""
    names = list(units)
    out = {}
    for metric in metrics:
        higher = METRICS[metric].higher_is_better
        scores = torch.stack([units[n]["faithfulness"][metric] for n in names], 1)  # (K, E)
        table = {n: member_interval(scores[:, e], f"explainer {n!r}: {metric}") | {"per_member": scores[:, e].tolist()}
                 for e, n in enumerate(names)}  # fmt: skip
        entry = {"higher_is_better": higher, "explainers": table}
        if len(names) > 1:
            stability = ranking_stability(scores, higher, f"metric {metric}")
            best = [", ".join(names[i] for i in b) for b in stability.pop("best")]
            mode, count = Counter(best).most_common(1)[0]
            settle = members_to_settle(scores, higher, n_bootstrap, seed)
            entry |= {"ranking": stability | {"most_frequent_best": mode, "best_share": count / len(best),
                                              "best_per_member": best},
                      "settle": settle | {"best": names[settle["best"]]}}  # fmt: skip
        out[metric] = entry
    return {"metrics": metrics, "primary": metrics[0], "by_metric": out}
