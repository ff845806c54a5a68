"""Agreement between explanations: pure functions, vectorised over model pairs and individuals.

Input: explanations E of shape (M, N, d) — M models (or ensembles), N individuals,
d features. Every metric returns a tensor of shape (P, N) with one value per
unordered pair of models (i < j, in ``itertools.combinations`` order) and
individual. Top-k sets rank features by absolute attribution, largest first; ties
go to the lower feature index (a stable sort), so results are deterministic.
sign(0) = 0, and two zeros have the same sign.

Ley et al. (2023), §4:
* SA@k, top-k sign agreement: |{f ∈ T_k(a) ∩ T_k(b) : sign a_f = sign b_f}| / k;
* SSA@k, signed-set agreement: 1 if T_k(a) = T_k(b) and the signs agree on it, else 0
  (so SSA = 1 exactly when SA = 1);
* CDC@k, consistent direction of contribution (the paper's reading: docs/table1.md):
  1 if sign a_f = sign b_f for every f in T_k(a) ∩ T_k(b), else 0; with no common
  feature it is 1. CDC@d compares every feature (T_d is all of them), the Table 1 column.
  ``cdc_union`` compares every f in T_k(a) ∪ T_k(b): not the paper's reading (on
  correlated random explanations 0.46-0.74 where the paper's gives about 1).
Krishna et al. (2022): feature agreement |T_k(a) ∩ T_k(b)| / k; rank agreement, the
share of the k ranks holding the same feature; signed-rank agreement, the same with
equal signs too. Their rank correlation and pairwise rank agreement (``RANK_AGREEMENTS``,
no k: over all d features, as OpenXAI's ``rankcorr`` and ``pairwise_comp``), with r_a the
ranks of |a| (ties: the mean of the ranks they span, as ``scipy.stats.rankdata``'s default)
and s_a(f, g) = sign(|a_f| − |a_g|):
* RC = the Pearson correlation of r_a and r_b (Spearman's ρ of |a| and |b|); NaN where |a|
  or |b| is constant (an all-zero map has no ranking). OpenXAI ranks ties densely, which
  gives the same ρ where neither map has ties;
* PRA = |{f < g : s_a(f, g) = s_b(f, g)}| / (d (d − 1) / 2): the share of feature pairs
  ordered alike, a tie agreeing only with a tie ((1 + Kendall's τ) / 2 without ties).
  OpenXAI compares [r_a(f) < r_a(g)], so a tie there agrees with g above f but not with f
  above g; the two agree where neither map has ties. PRA compares d(d − 1)/2 pairs per map:
  at most ``PRA_MAX_PAIRS`` (d = 5,793; pool larger maps first).
Angular difference: arccos of the cosine similarity (radians); an
all-zero map has no direction, and its angle to any map is reported as π/2 (its unit
vector is taken as zero, so the cosine is 0).
Every function refuses explanations with NaN or ±inf: one ``InputError`` naming the metric,
the model and the map (``SA@k: explanations[1]: map 4 has 2 NaN value(s) …``), never a score
(a NaN map would otherwise rank as a map and agree perfectly with itself).
"""

from __future__ import annotations

import numpy as np
import torch

from foundation.finite import check_finite
from foundation.errors import InputError

PRA_MAX_PAIRS = 2**24  # feature pairs per map: exact counts in float32, and bounded memory
PRA_CHUNK = 2**24  # models x individuals x pairs per Gram product of PRA


def pairs(m: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Index vectors (i, j) of all unordered pairs i < j of m models."""
    i, j = torch.triu_indices(m, m, offset=1, device=device)
    return i, j


def top_k_indices(e: torch.Tensor, k: int) -> torch.Tensor:
    """(M, N, k) feature indices ranked by |attribution|; ties to the lower index."""
    _check_explanations(e, "top-k indices")
    return _top_k_indices(e, k)


def _top_k_indices(e: torch.Tensor, k: int) -> torch.Tensor:
    if not 1 <= k <= e.shape[-1]:
        raise ValueError(f"k={k}; expected 1 <= k <= d={e.shape[-1]}")
    return torch.sort(-e.abs(), dim=-1, stable=True).indices[..., :k]


def _top_k_mask(e: torch.Tensor, k: int) -> torch.Tensor:
    mask = torch.zeros_like(e, dtype=torch.bool)
    return mask.scatter_(-1, _top_k_indices(e, k), True)


def _sign_one_hot(e: torch.Tensor) -> torch.Tensor:
    """(M, N, d, 3): indicator of sign -1, 0, +1."""
    return torch.nn.functional.one_hot(torch.sign(e).long() + 1, 3).to(e.dtype)


def _pair_sum(a: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """Σ over the trailing feature dims of a_i * b_j for every pair i < j: (P, N).

    One batched Gram matrix per individual, (N, M, F) @ (N, F, M), rather than the
    (P, N, F) elementwise product: P·N·F memory would reach gigabytes at M = 50."""
    b = a if b is None else b
    m = a.shape[0]
    flat_a, flat_b = a.flatten(2).transpose(0, 1), b.flatten(2).transpose(0, 1)  # (N, M, F)
    gram = torch.bmm(flat_a, flat_b.transpose(1, 2))  # (N, M, M)
    i, j = pairs(m, a.device)
    return gram[:, i, j].T


def _sign_terms(e: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One-hot signs (M, N, d, 3), the top-k mask (M, N, d) and the signs on it."""
    signs = _sign_one_hot(e)
    mask = _top_k_mask(e, k).to(e.dtype)
    return signs, mask, signs * mask.unsqueeze(-1)


def same_sign_in_top_k(e: torch.Tensor, k: int) -> torch.Tensor:
    """Number of features in both top-k sets with equal signs, (P, N)."""
    _check_explanations(e, "same signs in the top k")
    return _pair_sum(_sign_terms(e, k)[2])


def sign_agreement(e: torch.Tensor, k: int) -> torch.Tensor:
    """SA@k, (P, N)."""
    _check_explanations(e, "SA@k")
    return _pair_sum(_sign_terms(e, k)[2]) / k


def signed_set_agreement(e: torch.Tensor, k: int) -> torch.Tensor:
    """SSA@k, (P, N)."""
    _check_explanations(e, "SSA@k")
    return (_pair_sum(_sign_terms(e, k)[2]) == k).to(e.dtype)


def _differ_in_union(k: int, signs, mask, masked, same_in_both) -> torch.Tensor:
    """Features of T_k(a) ∪ T_k(b) whose signs differ, as Gram terms:
    Σ_f (m_a + m_b - m_a m_b)(1 - same_f) with same_f = Σ_s S_afs S_bfs."""
    return 2 * k - _pair_sum(masked, signs) - _pair_sum(signs, masked) - _pair_sum(mask) + same_in_both


def consistent_direction(e: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """CDC@k as Ley et al. define it (equal signs on T_k(a) ∩ T_k(b)); CDC@d (equal signs
    on every feature) when k is None."""
    _check_explanations(e, "CDC@k")
    if k is None:
        return (_pair_sum(_sign_one_hot(e)) == e.shape[-1]).to(e.dtype)
    _, mask, masked = _sign_terms(e, k)
    return ((_pair_sum(mask) - _pair_sum(masked)).round() == 0).to(e.dtype)  # all of ∩ same-signed


def consistent_direction_union(e: torch.Tensor, k: int) -> torch.Tensor:
    """CDC@k read over T_k(a) ∪ T_k(b): not the paper's definition (see the module's
    docstring); kept to compare with code that reads it so."""
    _check_explanations(e, "CDC@k (union)")
    signs, mask, masked = _sign_terms(e, k)
    return (_differ_in_union(k, signs, mask, masked, _pair_sum(masked)).round() == 0).to(e.dtype)


def ley_agreements(e: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
    """SA@k, SSA@k, CDC@k (both readings) and CDC@d at once, ranking and sign-encoding
    each model once and sharing the pairwise Gram products between the scores."""
    _check_explanations(e, "SA/SSA/CDC@k")
    signs, mask, masked = _sign_terms(e, k)
    same_in_both = _pair_sum(masked)
    return {
        "sa": same_in_both / k,
        "ssa": (same_in_both == k).to(e.dtype),
        "cdc_k": ((_pair_sum(mask) - same_in_both).round() == 0).to(e.dtype),
        "cdc_k_union": (_differ_in_union(k, signs, mask, masked, same_in_both).round() == 0).to(e.dtype),
        "cdc_d": (_pair_sum(signs) == e.shape[-1]).to(e.dtype),
    }


def feature_agreement(e: torch.Tensor, k: int) -> torch.Tensor:
    """Krishna et al.'s feature agreement, (P, N)."""
    _check_explanations(e, "feature agreement")
    return _pair_sum(_top_k_mask(e, k).to(e.dtype)) / k


def rank_agreement(e: torch.Tensor, k: int) -> torch.Tensor:
    """Krishna et al.'s rank agreement, (P, N)."""
    _check_explanations(e, "rank agreement")
    idx = _top_k_indices(e, k)
    i, j = pairs(e.shape[0], e.device)
    return (idx[i] == idx[j]).to(e.dtype).mean(-1)


def signed_rank_agreement(e: torch.Tensor, k: int) -> torch.Tensor:
    """Krishna et al.'s signed-rank agreement, (P, N)."""
    _check_explanations(e, "signed-rank agreement")
    idx = _top_k_indices(e, k)
    signs = torch.sign(torch.gather(e, -1, idx))
    i, j = pairs(e.shape[0], e.device)
    return ((idx[i] == idx[j]) & (signs[i] == signs[j])).to(e.dtype).mean(-1)


def angular_difference(e: torch.Tensor) -> torch.Tensor:
    """arccos of the cosine similarity, in radians; 0 for identical directions, π/2 when
    either map is all zero (no direction; see the module's docstring)."""
    _check_explanations(e, "angular difference")
    unit = torch.nn.functional.normalize(e, dim=-1)
    return torch.arccos(_pair_sum(unit).clamp(-1.0, 1.0))


def _check_explanations(e: torch.Tensor, name: str) -> None:
    """InputError unless ``e`` is float explanations (M, N, d), every value finite (the error
    names the metric, the model and the map: ``name: explanations[model]: map n``)."""
    if not isinstance(e, torch.Tensor) or e.dim() != 3 or not e.is_floating_point():
        raise InputError(f"{name}: explanations of shape {tuple(getattr(e, 'shape', ()))}; expected float (M, N, d)")
    check_finite(e, f"{name}: explanations", "map", unit_dims=1, stacked=True)  # explanations[model]: map n


def average_ranks(v: torch.Tensor) -> torch.Tensor:
    """Ranks 1..d of v along the last dim, ties given the mean of the ranks they span."""
    d = v.shape[-1]
    values, order = v.sort(dim=-1, stable=True)
    position = torch.arange(d, device=v.device).expand_as(values)
    new = torch.ones_like(values, dtype=torch.bool)
    new[..., 1:] = values[..., 1:] != values[..., :-1]  # a tie group starts here
    last = torch.ones_like(new)
    last[..., :-1] = new[..., 1:]  # a tie group ends here
    first = torch.where(new, position, 0).cummax(-1).values
    end = torch.where(last, position, d).flip(-1).cummin(-1).values.flip(-1)
    mean_rank = (first + end).to(v.dtype) / 2 + 1
    return torch.empty_like(mean_rank).scatter_(-1, order, mean_rank)


def rank_correlation(e: torch.Tensor) -> torch.Tensor:
    """Krishna et al.'s RC: Spearman's ρ of |a| and |b| over all features, (P, N); NaN
    where either map's |attribution| is constant."""
    _check_explanations(e, "rank correlation")
    ranks = average_ranks(e.abs())
    centred = ranks - ranks.mean(-1, keepdim=True)
    norm = centred.norm(dim=-1, keepdim=True)
    unit = torch.where(norm > 0, centred / norm, torch.nan)  # a constant map: NaN, carried into its pairs
    return _pair_sum(unit).clamp(-1.0, 1.0)


def pairwise_rank_agreement(e: torch.Tensor) -> torch.Tensor:
    """Krishna et al.'s PRA over all d(d − 1)/2 feature pairs, (P, N) (ties: the module's
    docstring). With s = s_a, t = s_b ∈ {−1, 0, 1}, [s = t] = 1 − s² − t² + (3/2) s²t² + st/2,
    so the count is a sum of Gram products of s and s² over the pairs (``_pair_sum``),
    taken ``PRA_CHUNK`` values at a time over individuals."""
    _check_explanations(e, "pairwise rank agreement")
    m, n, d = e.shape
    n_pairs = d * (d - 1) // 2
    if not 1 <= n_pairs <= PRA_MAX_PAIRS:
        raise InputError(f"pairwise rank agreement: maps of d={d} features compare {n_pairs} feature pairs; "
                         f"expected d >= 2 and at most {PRA_MAX_PAIRS} pairs (d <= 5793): pool the maps first")
    f, g = torch.triu_indices(d, d, offset=1, device=e.device)
    i, j = pairs(m, e.device)
    parts = []
    for part in e.abs().split(max(1, PRA_CHUNK // (m * n_pairs)), dim=1):
        s = torch.sign(part[..., f] - part[..., g])  # (M, n, pairs)
        untied = s * s
        count = untied.sum(-1)  # (M, n): Σ s² per map
        same = n_pairs - count[i] - count[j] + 1.5 * _pair_sum(untied) + 0.5 * _pair_sum(s)
        parts.append(same / n_pairs)
    return torch.cat(parts, dim=1)


AGREEMENTS = {
    "sa": sign_agreement,
    "ssa": signed_set_agreement,
    "cdc": consistent_direction,
    "cdc_union": consistent_direction_union,
    "feature": feature_agreement,
    "rank": rank_agreement,
    "signed_rank": signed_rank_agreement,
}
RANK_AGREEMENTS = {"rc": rank_correlation, "pra": pairwise_rank_agreement}  # over all features: no k


def separability(
    a: torch.Tensor, b: torch.Tensor, seed: int = 0, test_fraction: float = 0.5, classifier: dict | None = None
) -> float:
    """Watson et al.: held-out accuracy M(a, b) of a logistic regression that tells model
    a's explanations from model b's; 0.5 means indistinguishable.

    Row i of a and of b explain the same individual x_i, so the split into training and
    held-out rows is by individual (both of x_i's rows on one side, a random
    ``test_fraction`` of the individuals held out, from ``seed``; why: docs/image_consistency.md).
    ``classifier``: options of scikit-learn's ``LogisticRegression`` (default
    ``max_iter=1000``, otherwise its own defaults: L2, C = 1). Maps with NaN or ±inf are refused."""
    for maps, side in ((a, "a"), (b, "b")):
        check_finite(maps, f"Watson's separability: explanations {side}", "map")
    return _separability(a, b, seed, test_fraction, classifier)


def _separability(a, b, seed: int, test_fraction: float, classifier: dict | None) -> float:
    """``separability`` of explanations already checked to be finite."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupShuffleSplit

    if a.shape != b.shape:
        raise ValueError(f"explanations of shapes {tuple(a.shape)} and {tuple(b.shape)}; expected the same "
                         "individuals (rows) and features from both models")  # fmt: skip
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction={test_fraction}; expected a fraction strictly between 0 and 1")
    x = torch.cat([a, b]).double().cpu().numpy()
    y = np.repeat([0, 1], len(a))
    individual = np.tile(np.arange(len(a)), 2)
    split = GroupShuffleSplit(n_splits=1, test_size=test_fraction, random_state=seed)
    train, test = next(split.split(x, y, groups=individual))
    model = LogisticRegression(**{"max_iter": 1000, **(classifier or {})}).fit(x[train], y[train])
    return float(model.score(x[test], y[test]))


def watson_consistency(
    e: torch.Tensor, seed: int = 0, test_fraction: float = 0.5, classifier: dict | None = None
) -> float:
    """C = 1 - Σ_{pairs} S(a, b) / α with S(a, b) = 2 |M(a, b) - 0.5| and α the number of
    pairs: 1 when no pair's explanations can be told apart, 0 when every pair's can.
    M is ``separability`` (split by individual) with these options."""
    scores = pair_separations(e, seed, test_fraction, classifier)
    return 1.0 - sum(scores) / len(scores)


def pair_separations(
    e: torch.Tensor, seed: int = 0, test_fraction: float = 0.5, classifier: dict | None = None
) -> list[float]:
    """S(a, b) = 2 |M(a, b) - 0.5| for every pair of models a < b (``pairs`` order) of
    explanations (M, N, d); NaN or ±inf in them is refused."""
    _check_explanations(e, "Watson's C")
    i, j = pairs(e.shape[0])
    return [2 * abs(_separability(e[a], e[b], seed, test_fraction, classifier) - 0.5)
            for a, b in zip(i.tolist(), j.tolist())]  # fmt: skip
