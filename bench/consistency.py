"""SA, SSA and CDC over all pairs of 50 models (1,225 pairs) x 1,000 individuals x 23
features: the vectorised functional core against a per-pair Python loop.

    python bench/consistency.py

The loop follows public reference code for these metrics: for each pair of models
it ranks both explanation matrices (numpy argsort, vectorised over individuals) and
then compares each individual's top-k sets and signs with Python sets. The
vectorised core ranks each model once and turns every pairwise count into one
batched Gram-matrix product over all pairs and individuals.

Check (``check``): both must give identical scores, to 1e-6. This holds on any CPU and GPU:
both rank the same float32 values, and comparisons of equal numbers do not depend on the
kernel (random normal explanations have no ties to break differently); every score is a
count of agreeing features over k or over individuals, and the core's counts are sums of
0/1 products, exact in float32 up to 2^24. The 1e-6 only absorbs the float32 and float64
representations of those k-ths; any real difference is at least 1/k of one individual's
score. The last line is one JSON object.
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from evaluators.metrics.agreement_functional import ley_agreements  # noqa: E402
from foundation.files import json_text  # noqa: E402

M, N, D, K = 50, 1000, 23, 5


def per_pair_loop(e: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """Per pair of models: rank both matrices with numpy, then compare each individual's
    top-k sets and signs with Python sets, as public reference implementations do."""
    out = {"sa": [], "ssa": [], "cdc_k": [], "cdc_k_union": [], "cdc_d": []}
    for i, j in itertools.combinations(range(e.shape[0]), 2):
        a, b = e[i], e[j]
        top_a = np.argsort(-np.abs(a), axis=1, kind="stable")[:, :k]
        top_b = np.argsort(-np.abs(b), axis=1, kind="stable")[:, :k]
        sign_a, sign_b = np.sign(a), np.sign(b)
        sa, ssa, cdc_k, cdc_k_union, cdc_d = (np.zeros(e.shape[1]) for _ in range(5))
        for n in range(e.shape[1]):
            set_a, set_b = set(top_a[n].tolist()), set(top_b[n].tolist())
            agree = sum(1 for f in set_a & set_b if sign_a[n, f] == sign_b[n, f])
            sa[n] = agree / k
            ssa[n] = float(agree == k)
            cdc_k[n] = float(all(sign_a[n, f] == sign_b[n, f] for f in set_a & set_b))
            cdc_k_union[n] = float(all(sign_a[n, f] == sign_b[n, f] for f in set_a | set_b))
            cdc_d[n] = float((sign_a[n] == sign_b[n]).all())
        for name, values in zip(out, (sa, ssa, cdc_k, cdc_k_union, cdc_d)):
            out[name].append(values)
    return {name: np.stack(v) for name, v in out.items()}


def check(fast: dict[str, torch.Tensor], slow: dict[str, np.ndarray]) -> None:
    """The module docstring's check: every score of the core ``fast`` equals the loop's ``slow``
    within 1e-6 (AssertionError otherwise), the same metrics on both sides."""
    if set(fast) != set(slow):
        raise AssertionError(f"the core gives {sorted(fast)}, the loop {sorted(slow)}")
    for name in fast:
        np.testing.assert_allclose(fast[name].numpy(), slow[name], rtol=0, atol=1e-6, err_msg=f"score {name}")


def main() -> None:
    torch.manual_seed(0)
    shared = torch.randn(1, N, D)
    e = (shared + 0.7 * torch.randn(M, N, D)).float()  # correlated explanations, as from near-equal models
    ley_agreements(e[:3, :10], K)  # warm-up
    start = time.perf_counter()
    fast = ley_agreements(e, K)
    fast_s = time.perf_counter() - start
    start = time.perf_counter()
    slow = per_pair_loop(e.numpy(), K)
    loop_s = time.perf_counter() - start
    check(fast, slow)
    means = {name: float(v.mean()) for name, v in fast.items()}
    print(f"{M * (M - 1) // 2} pairs x {N} individuals x {D} features, k={K}: vectorised {fast_s:.3f} s, "
          f"per-pair loop {loop_s:.2f} s, ratio {loop_s / fast_s:.0f}; identical scores; means {means}")  # fmt: skip
    print(json_text({"ratio": loop_s / fast_s, "vectorised_s": fast_s, "loop_s": loop_s, "pairs": M * (M - 1) // 2,
                     "individuals": N, "features": D, "k": K}))  # fmt: skip


if __name__ == "__main__":
    main()
