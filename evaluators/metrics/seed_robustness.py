"""Whether a metric table's conclusion survives a change of seed: the same table (rows ×
metrics, each entry a mean over inputs) computed for each of K members of a population
(docs/seed_robustness.md).

For one metric, ``scores`` is a (K, R) float tensor: member k's mean score of row r.

* :func:`member_interval`: the seed-level mean of one row, ``mean_k s_k``, with the
  half-width of its 95 % t-interval over members, ``t_{0.975, K-1} · sd_k(s) / √K``
  (Student's t with K − 1 degrees of freedom: a population has few members, so the normal
  quantile would be too narrow).
* :func:`kendall_taus`: Kendall's τ_b between the rankings of the R rows by every pair of
  members, ``(P − Q) / √((P + Q + T_a)(P + Q + T_b))`` (P concordant, Q discordant row
  pairs, T_a ties in member a only, T_b in b only; ``scipy.stats.kendalltau``'s default).
  With ``d_k`` the vector of ``sign(s_k[r] − s_k[q])`` over row pairs r < q, τ_b(a, b) is
  the cosine of ``d_a`` and ``d_b``: one Gram matrix for all pairs. NaN where a member
  scores every row the same (no ranking).
* :func:`best_rows`: per member, the rows with its best score (several on an exact tie).
* :func:`ranking_stability`: τ_b averaged over the K(K − 1)/2 member pairs, and the share
  of member pairs whose best rows are the same.
* :func:`finding_survival`: of a protocol's findings per member (claims such as "UCB is
  best"), the share of members where each yes/no claim holds, and for a named row (the
  best on a metric …) the most frequent one and its share.
"""

from __future__ import annotations

import math
from collections import Counter

import torch
from scipy.stats import t as student_t

from foundation.errors import InputError


def check_scores(scores: torch.Tensor, what: str) -> torch.Tensor:
    """``scores`` as float64 (K, R); at least 2 members, every value finite (the error names
    the first member and row that is not)."""
    scores = torch.as_tensor(scores, dtype=torch.float64)
    if scores.dim() != 2 or scores.shape[0] < 2 or scores.shape[1] < 1:
        raise InputError(f"{what}: scores of shape {tuple(scores.shape)}; expected (members, rows) with at least "
                         "2 members and 1 row")  # fmt: skip
    bad = (~torch.isfinite(scores)).nonzero()
    if len(bad):
        k, r = bad[0].tolist()
        raise InputError(f"{what}: member {k}, row {r} is {scores[k, r].item()}; expected finite scores "
                         "(a metric undefined on every input of a member)")  # fmt: skip
    return scores


def member_interval(values: torch.Tensor, what: str = "member scores") -> dict[str, float]:
    """Mean over members of one row's scores (K,) and the half-width of its 95 % t-interval;
    ``what``: how an error names the row."""
    v = check_scores(torch.as_tensor(values, dtype=torch.float64).reshape(-1, 1), what)[:, 0]
    k = len(v)
    return {"mean": v.mean().item(), "ci95": student_t.ppf(0.975, k - 1) * v.std().item() / math.sqrt(k), "n": k}


def _pairs(k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.triu_indices(k, k, offset=1).unbind(0)


def kendall_taus(scores: torch.Tensor) -> torch.Tensor:
    """Kendall's τ_b between every pair of members' rankings of the rows: (K, K), the
    diagonal 1 (NaN for a member without a ranking)."""
    s = check_scores(scores, "kendall_taus")
    i, j = _pairs(s.shape[1])
    d = torch.sign(s[:, i] - s[:, j])  # (K, R(R - 1)/2)
    norms = d.square().sum(1).sqrt()
    return (d @ d.T) / (norms[:, None] * norms[None, :])  # 0/0 = NaN: a member with every row tied


def best_rows(scores: torch.Tensor, higher_is_better: bool) -> torch.Tensor:
    """(K, R) mask of each member's best rows (the largest score if ``higher_is_better``,
    else the smallest; every row attaining it)."""
    s = check_scores(scores, "best_rows")
    best = s.amax(1, keepdim=True) if higher_is_better else s.amin(1, keepdim=True)
    return s == best


def ranking_stability(scores: torch.Tensor, higher_is_better: bool, what: str = "ranking_stability") -> dict:
    """Over the K(K − 1)/2 member pairs: the mean Kendall τ_b of their rankings
    (``kendall_tau``; NaN pairs left out, NaN if all are), its smallest value, and the share
    of pairs with the same best rows (``best_agreement``); per member, its best rows' indices.
    ``what``: how an error names the table."""
    s = check_scores(scores, what)
    a, b = _pairs(s.shape[0])
    taus = kendall_taus(s)[a, b]
    defined = taus[~taus.isnan()]
    best = best_rows(s, higher_is_better)
    agree = (best[a] == best[b]).all(1).double()
    return {"kendall_tau": defined.mean().item() if len(defined) else math.nan,
            "kendall_tau_min": defined.min().item() if len(defined) else math.nan,
            "best_agreement": agree.mean().item(), "n_pairs": len(a),
            "best": [row.nonzero()[:, 0].tolist() for row in best]}  # fmt: skip


def finding_survival(per_member: list[dict]) -> dict[str, dict]:
    """Per finding (a key of every member's findings; nested mappings flattened as
    ``outer.inner``): a yes/no claim gives ``{"kind": "claim", "share": members where it
    holds / K}``; a named row (a string) or a set of rows (a list, order ignored) gives
    ``{"kind": "row", "mode": the most frequent, "share": its members / K}``. Numbers
    (gaps, intervals) are left out: the metric tables carry them."""
    flat = [_flatten(f) for f in per_member]
    out: dict[str, dict] = {}
    for key in flat[0]:
        values = [f.get(key) for f in flat]
        if all(isinstance(v, bool) for v in values):
            out[key] = {"kind": "claim", "share": sum(values) / len(values)}
        elif all(isinstance(v, (str, list)) for v in values):
            named = [v if isinstance(v, str) else ", ".join(sorted(map(str, v))) for v in values]
            mode, count = Counter(named).most_common(1)[0]
            out[key] = {"kind": "row", "mode": mode, "share": count / len(values)}
    return out


def _flatten(findings: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in findings.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
