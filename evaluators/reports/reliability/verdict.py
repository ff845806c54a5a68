"""The calibrated sanity verdict and the number of members that settle a ranking.

**Calibrated verdict.** A sanity check reads "the maps changed when the model was randomised"
off a similarity; how much change is a lot? The population gives the reference: two members
that differ only in their training seed and are equally good are two models the user would
accept alike, so the change a seed makes is the change that carries no information about the
model. For explainer e, with maps φ_m (N, d) of member m, φ̃_m those of member m with every
layer randomised (``maps.randomisation``) and S the mean over inputs of a similarity measure:

* s_rand(m) = S(φ̃_m, φ_m): how alike a member's maps stay under randomisation;
* s_seed(m) = mean over the other equally good members b of S(φ_m, φ_b): how alike they stay
  under a change of seed;
* δ_m = s_seed(m) − s_rand(m), and its seed-level mean with the 95 % t-interval over members
  (``seed_robustness.member_interval``).

The explainer **passes** when the interval of δ lies above 0 (randomising the model moves its
maps further than a change of seed does), else it **fails**: an explainer whose maps ignore
the model has s_rand = s_seed, δ = 0, and cannot pass. The δ_m share members (each s_seed
averages pairs), so the interval is a working approximation; the error rates that matter are
measured by simulation (tests/evaluators/reports/reliability/test_verdict.py: a model-ignoring
explainer fails and gradients pass in at least 95 % of draws of tiny populations).
"Equally good": test accuracy within ``tolerance`` of the population's median
(``equally_good``); with fewer than 3 such members all members are used, and the report says so.

**Members that settle a ranking** (``members_to_settle``): for n = 2 … K, ``n_bootstrap``
resamples of n members drawn with replacement; the share of resamples whose seed-level best
explainer (mean over the resample's members) is the population's best. The ranking is settled
with n members where that share is at least ``SETTLED`` (0.95) for n and every larger count up
to K; "not settled with K members" where even n = K falls short. A bootstrap of K members cannot
see beyond them: "settled with n" says the K members agree, not that a new population would.
"""

from __future__ import annotations

import numpy as np
import torch

from evaluators.metrics.seed_robustness import member_interval
from evaluators.metrics.similarity import similarity

SETTLED = 0.95
MIN_EQUAL = 3  # the fewest equally good members the seed reference is taken from


def equally_good(accuracies: torch.Tensor, tolerance: float) -> tuple[list[int], bool]:
    """Indices of members within ``tolerance`` of the median test accuracy, and whether that
    filter was applied (False: fewer than ``MIN_EQUAL`` qualified, so every member is kept)."""
    values = np.asarray(accuracies.tolist(), dtype=np.float64)
    median = float(np.median(values))  # of an even count: the mean of the two middle values
    kept = [i for i, a in enumerate(values) if abs(a - median) <= tolerance + 1e-9]
    if len(kept) < MIN_EQUAL:
        return list(range(len(accuracies))), False
    return kept, True


def pair_similarities(maps: torch.Tensor, measure: str) -> torch.Tensor:
    """(M, M) mean over inputs of S(φ_a, φ_b) (undefined inputs left out), the diagonal NaN."""
    m = maps.shape[0]
    out = torch.full((m, m), float("nan"), dtype=torch.float64)
    for a in range(m):
        for b in range(a + 1, m):
            values = similarity(maps[a], maps[b], measure, (f"member {a}", f"member {b}"))
            defined = values[~values.isnan()]
            out[a, b] = out[b, a] = defined.mean() if len(defined) else float("nan")
    return out


def calibrated_verdict(maps: torch.Tensor, randomised: torch.Tensor, measure: str, kept: list[int],
                       what: str = "explainer") -> dict:  # fmt: skip
    """The verdict of the module docstring for maps and fully randomised maps (M, N, d), the
    reference over members ``kept`` (at least 2): per member s_rand, s_seed and δ, their
    seed-level means with 95 % t-intervals, and ``passed``."""
    maps, randomised = maps[kept], randomised[kept]
    s_rand = torch.stack([similarity(r, m, measure, (f"{what} randomised", what)).nanmean()
                          for r, m in zip(randomised, maps)])  # fmt: skip
    s_seed = pair_similarities(maps, measure).nanmean(1)
    delta = s_seed - s_rand
    intervals = {name: member_interval(v, f"{what}: {name}")
                 for name, v in (("randomised", s_rand), ("seed", s_seed), ("delta", delta))}  # fmt: skip
    d = intervals["delta"]
    return {"passed": bool(d["mean"] - d["ci95"] > 0), "measure": measure, "members": kept,
            "similarity_randomised": intervals["randomised"], "similarity_seed": intervals["seed"], "delta": d,
            "per_member": {"randomised": s_rand.tolist(), "seed": s_seed.tolist(), "delta": delta.tolist()}}


def members_to_settle(scores: torch.Tensor, higher_is_better: bool, n_bootstrap: int, seed: int) -> dict:
    """(K, E) member scores of E explainers: the population's best explainer, per n = 2 … K the
    share of bootstrap resamples of n members that name it best (``settle_share``), and the
    least n from which on every share is at least ``SETTLED`` (None: not settled with K members)."""
    s = scores.double().numpy()
    k = s.shape[0]
    pick = np.argmax if higher_is_better else np.argmin
    best = int(pick(s.mean(0)))
    rng = np.random.default_rng(seed)
    shares = {}
    for n in range(2, k + 1):
        draws = rng.integers(0, k, size=(n_bootstrap, n))
        shares[n] = float((pick(s[draws].mean(1), axis=1) == best).mean())
    short = [n for n, share in shares.items() if share < SETTLED]
    settled = (max(short) + 1 if short else 2) if shares.get(k, 0.0) >= SETTLED else None
    return {"best": best, "settle_share": shares, "members_needed": settled, "n_members": k}
