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
equal signs too. Angular difference: arccos of the cosine similarity (radians); an
all-zero map has no direction, and its angle to any map is reported as π/2 (its unit
vector is taken as zero, so the cosine is 0).
"""

from __future__ import annotations

import numpy as np
import torch


def pairs(m: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Index vectors (i, j) of all unordered pairs i < j of m models."""
    i, j = torch.triu_indices(m, m, offset=1, device=device)
    return i, j


def top_k_indices(e: torch.Tensor, k: int) -> torch.Tensor:
    """(M, N, k) feature indices ranked by |attribution|; ties to the lower index."""
    if not 1 <= k <= e.shape[-1]:
        raise ValueError(f"k={k}; expected 1 <= k <= d={e.shape[-1]}")
    return torch.sort(-e.abs(), dim=-1, stable=True).indices[..., :k]


def _top_k_mask(e: torch.Tensor, k: int) -> torch.Tensor:
    mask = torch.zeros_like(e, dtype=torch.bool)
    return mask.scatter_(-1, top_k_indices(e, k), True)


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
    return _pair_sum(_sign_terms(e, k)[2])


def sign_agreement(e: torch.Tensor, k: int) -> torch.Tensor:
    return same_sign_in_top_k(e, k) / k


def signed_set_agreement(e: torch.Tensor, k: int) -> torch.Tensor:
    return (same_sign_in_top_k(e, k) == k).to(e.dtype)


def _differ_in_union(k: int, signs, mask, masked, same_in_both) -> torch.Tensor:
    """Features of T_k(a) ∪ T_k(b) whose signs differ, as Gram terms:
    Σ_f (m_a + m_b - m_a m_b)(1 - same_f) with same_f = Σ_s S_afs S_bfs."""
    return 2 * k - _pair_sum(masked, signs) - _pair_sum(signs, masked) - _pair_sum(mask) + same_in_both


def consistent_direction(e: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """CDC@k as Ley et al. define it (equal signs on T_k(a) ∩ T_k(b)); CDC@d (equal signs
    on every feature) when k is None."""
    if k is None:
        return (_pair_sum(_sign_one_hot(e)) == e.shape[-1]).to(e.dtype)
    _, mask, masked = _sign_terms(e, k)
    return ((_pair_sum(mask) - _pair_sum(masked)).round() == 0).to(e.dtype)  # all of ∩ same-signed


def consistent_direction_union(e: torch.Tensor, k: int) -> torch.Tensor:
    """CDC@k read over T_k(a) ∪ T_k(b): not the paper's definition (see the module's
    docstring); kept to compare with code that reads it so."""
    signs, mask, masked = _sign_terms(e, k)
    return (_differ_in_union(k, signs, mask, masked, _pair_sum(masked)).round() == 0).to(e.dtype)


def ley_agreements(e: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
    """SA@k, SSA@k, CDC@k (both readings) and CDC@d at once, ranking and sign-encoding
    each model once and sharing the pairwise Gram products between the scores."""
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
    return _pair_sum(_top_k_mask(e, k).to(e.dtype)) / k


def rank_agreement(e: torch.Tensor, k: int) -> torch.Tensor:
    idx = top_k_indices(e, k)
    i, j = pairs(e.shape[0], e.device)
    return (idx[i] == idx[j]).to(e.dtype).mean(-1)


def signed_rank_agreement(e: torch.Tensor, k: int) -> torch.Tensor:
    idx = top_k_indices(e, k)
    signs = torch.sign(torch.gather(e, -1, idx))
    i, j = pairs(e.shape[0], e.device)
    return ((idx[i] == idx[j]) & (signs[i] == signs[j])).to(e.dtype).mean(-1)


def angular_difference(e: torch.Tensor) -> torch.Tensor:
    """arccos of the cosine similarity, in radians; 0 for identical directions, π/2 when
    either map is all zero (no direction; see the module's docstring)."""
    unit = torch.nn.functional.normalize(e, dim=-1)
    return torch.arccos(_pair_sum(unit).clamp(-1.0, 1.0))


AGREEMENTS = {
    "sa": sign_agreement,
    "ssa": signed_set_agreement,
    "cdc": consistent_direction,
    "cdc_union": consistent_direction_union,
    "feature": feature_agreement,
    "rank": rank_agreement,
    "signed_rank": signed_rank_agreement,
}


def separability(
    a: torch.Tensor, b: torch.Tensor, seed: int = 0, test_fraction: float = 0.5, classifier: dict | None = None
) -> float:
    """Watson et al.: held-out accuracy M(a, b) of a logistic regression that tells model
    a's explanations from model b's; 0.5 means indistinguishable.

    Row i of a and of b explain the same individual x_i, so the split into training and
    held-out rows is by individual (both of x_i's rows on one side, a random
    ``test_fraction`` of the individuals held out, from ``seed``; why: docs/image_consistency.md).
    ``classifier``: options of scikit-learn's ``LogisticRegression`` (default
    ``max_iter=1000``, otherwise its own defaults: L2, C = 1)."""
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
    """S(a, b) = 2 |M(a, b) - 0.5| for every pair of models a < b (``pairs`` order)."""
    i, j = pairs(e.shape[0])
    return [
        2 * abs(separability(e[a], e[b], seed, test_fraction, classifier) - 0.5) for a, b in zip(i.tolist(), j.tolist())
    ]
