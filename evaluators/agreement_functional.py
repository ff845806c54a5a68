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
* CDC, consistent direction of contribution: 1 if sign a_f = sign b_f for every f in
  T_k(a) ∪ T_k(b) (CDC@k) or for every feature (CDC@d), else 0.
Krishna et al. (2022): feature agreement |T_k(a) ∩ T_k(b)| / k; rank agreement, the
share of the k ranks holding the same feature; signed-rank agreement, the same with
equal signs too. Angular difference: arccos of the cosine similarity (radians).
"""

from __future__ import annotations

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


def same_sign_in_top_k(e: torch.Tensor, k: int) -> torch.Tensor:
    """Number of features in both top-k sets with equal signs, (P, N)."""
    masked = _sign_one_hot(e) * _top_k_mask(e, k).unsqueeze(-1).to(e.dtype)
    return _pair_sum(masked)


def sign_agreement(e: torch.Tensor, k: int) -> torch.Tensor:
    return same_sign_in_top_k(e, k) / k


def signed_set_agreement(e: torch.Tensor, k: int) -> torch.Tensor:
    return (same_sign_in_top_k(e, k) == k).to(e.dtype)


def consistent_direction(e: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """CDC@k over T_k(a) ∪ T_k(b); CDC@d (all features) when k is None."""
    signs = _sign_one_hot(e)  # (M, N, d, 3)
    if k is None:
        same = _pair_sum(signs)  # features with equal signs
        return (same == e.shape[-1]).to(e.dtype)
    # Features of the union whose signs differ, expanded into Gram terms:
    # Σ_f (m_i + m_j - m_i m_j)(1 - same_f) with same_f = Σ_s S_ifs S_jfs.
    mask = _top_k_mask(e, k).to(e.dtype)
    masked = signs * mask.unsqueeze(-1)
    differ_in_union = (
        2 * k - _pair_sum(masked, signs) - _pair_sum(signs, masked) - _pair_sum(mask) + _pair_sum(masked)
    )
    return (differ_in_union.round() == 0).to(e.dtype)


def ley_agreements(e: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
    """SA@k, SSA@k, CDC@k and CDC@d at once, ranking and sign-encoding each model once
    and sharing the pairwise Gram products between the four scores."""
    signs = _sign_one_hot(e)
    mask = _top_k_mask(e, k).to(e.dtype)
    masked = signs * mask.unsqueeze(-1)
    same_in_both = _pair_sum(masked)
    differ_in_union = 2 * k - _pair_sum(masked, signs) - _pair_sum(signs, masked) - _pair_sum(mask) + same_in_both
    return {
        "sa": same_in_both / k,
        "ssa": (same_in_both == k).to(e.dtype),
        "cdc_k": (differ_in_union.round() == 0).to(e.dtype),
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
    """arccos of the cosine similarity, in radians; 0 for identical directions."""
    unit = torch.nn.functional.normalize(e, dim=-1)
    return torch.arccos(_pair_sum(unit).clamp(-1.0, 1.0))


AGREEMENTS = {
    "sa": sign_agreement,
    "ssa": signed_set_agreement,
    "cdc": consistent_direction,
    "feature": feature_agreement,
    "rank": rank_agreement,
    "signed_rank": signed_rank_agreement,
}


def separability(a: torch.Tensor, b: torch.Tensor, seed: int = 0, test_fraction: float = 0.5) -> float:
    """Watson et al.: held-out accuracy M(a, b) of a logistic regression that tells model
    a's explanations (N, d) from model b's; 0.5 means indistinguishable."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split

    x = torch.cat([a, b]).double().numpy()
    y = [0] * len(a) + [1] * len(b)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=test_fraction, random_state=seed, stratify=y
    )
    classifier = LogisticRegression(max_iter=1000).fit(x_train, y_train)
    return float(classifier.score(x_test, y_test))


def watson_consistency(e: torch.Tensor, seed: int = 0) -> float:
    """C = 1 - Σ_{pairs} S(a, b) / α with S(a, b) = 2 |M(a, b) - 0.5| and α the number of
    pairs: 1 when no pair's explanations can be told apart, 0 when every pair's can."""
    i, j = pairs(e.shape[0])
    scores = [2 * abs(separability(e[a], e[b], seed) - 0.5) for a, b in zip(i.tolist(), j.tolist())]
    return 1.0 - sum(scores) / len(scores)
