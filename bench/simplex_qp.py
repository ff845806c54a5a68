"""Decker et al.'s aggregation weights: thousands of small simplex QPs, batched vs one solver call each.

    python bench/simplex_qp.py

Problems: min ωᵀΓω over the simplex for B = 1, 100 and 2,000 matrices Γ at k = 7 and 12
explainers. Γ = AᵀA / (2k), A (2k × k) standard normal with its column j scaled by
2^(j / 2) (explainers of different spread); a quarter of the Γ have two identical
explainers (equal rows and columns), an eighth a zero map (zero row and column).

(batched)   ``solve_simplex_qp(gamma)``: Wolfe's minimum-norm-point active-set method,
            all inputs at once in torch (``evaluators.aggregators.simplex_qp``);
(enumerate) ``enumerate_supports(gamma)``: every one of the 2^k − 1 supports, batched;
(cvxpy)     ``solve_simplex_qp(gamma, "cvxpy")``: one cvxpy/Clarabel problem per input,
            as Decker et al.'s code does;
(proxsuite) only where ``proxsuite`` (0.8.0, not a dependency) imports: its dense ProxQP,
            the B problems set up in a ``BatchQP`` and solved by ``solve_in_parallel`` on
            ``torch.get_num_threads()`` threads, eps_abs = 1e-12.

Check (``check``): each method's objectives agree with the batched ones within 1e-6
relative plus 1e-12 max_i Γ_ii, per problem. Everything is float64 and the minimum is
unique in value, so the kernels' rounding (about 1e-16 relative) stays far below it on any
CPU; the 1e-6 leaves room for cvxpy's interior-point solver, which stops at a relative
duality gap of 1e-8 (Clarabel's default), and the 1e-12 max_i Γ_ii floor covers objectives
near 0. A wrong weight vector (another vertex, weights permuted) is off by far more.

Times: the best of three runs for the batched method, one run for the others. The last
line is one JSON object: ``ratio`` = cvxpy / batched seconds at k = 7, B = 2,000, and the
seconds of every method, k and B.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from evaluators.aggregators.simplex_qp import enumerate_supports, solve_simplex_qp  # noqa: E402
from foundation.files import json_text  # noqa: E402

K_VALUES, B_VALUES, REPEATS = (7, 12), (1, 100, 2000), 3
RELATIVE, ABSOLUTE = 1e-6, 1e-12


def problems(b: int, k: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(b, 2 * k, k, generator=gen, dtype=torch.float64) * 2 ** (torch.arange(k) / 2)
    gamma = a.transpose(1, 2) @ a / (2 * k)
    twins = torch.arange(b) % 4 == 1
    gamma[twins, :, 1] = gamma[twins, :, 0]
    gamma[twins, 1, :] = gamma[twins, 0, :]
    zero = torch.arange(b) % 8 == 2
    gamma[zero, k - 1, :] = 0
    gamma[zero, :, k - 1] = 0
    return gamma


def proxsuite_solver():
    """proxsuite's batched dense solve, or None where proxsuite is not installed."""
    try:
        from proxsuite import proxqp
    except ImportError:
        return None

    def solve(gamma: torch.Tensor) -> torch.Tensor:
        k = gamma.shape[-1]
        ones, identity, zeros, upper = np.ones((1, k)), np.eye(k), np.zeros(k), np.full(k, 1e20)
        batch = proxqp.dense.BatchQP()
        for matrix in gamma.numpy():
            qp = batch.init_qp_in_place(k, 1, k)
            qp.settings.eps_abs, qp.settings.eps_rel, qp.settings.max_iter = 1e-12, 0.0, 10_000
            qp.init(2 * matrix, zeros, ones, np.ones(1), identity, zeros, upper)
        proxqp.dense.solve_in_parallel(batch, torch.get_num_threads())
        w = torch.from_numpy(np.stack([batch.get(i).results.x for i in range(batch.size())])).clamp(min=0)
        return w / w.sum(1, keepdim=True)

    return solve


def objective(gamma: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.einsum("bi,bij,bj->b", w, gamma, w)


def check(gamma: torch.Tensor, w_batched: torch.Tensor, w_other: torch.Tensor, label: str) -> None:
    """The module docstring's check of another method's weights ``w_other`` against the batched
    ``w_batched`` on the problems ``gamma`` (B, k, k); AssertionError where it fails."""
    reference = objective(gamma, w_batched)
    gap = (objective(gamma, w_other) - reference).abs()
    floor = ABSOLUTE * gamma.diagonal(dim1=1, dim2=2).amax(1)
    if not (gap <= RELATIVE * reference.abs() + floor).all():
        raise AssertionError(f"{label}: objectives differ from the batched ones by up to {float(gap.max()):.3g}")


def timed(solve, gamma: torch.Tensor, repeats: int = 1) -> tuple[float, torch.Tensor]:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        w = solve(gamma)
        best = min(best, time.perf_counter() - start)
    return best, w


def main() -> None:
    torch.manual_seed(0)
    methods = {"enumerate": enumerate_supports, "cvxpy": lambda g: solve_simplex_qp(g, "cvxpy")}
    prox = proxsuite_solver()
    if prox is not None:
        methods["proxsuite"] = prox
    solve_simplex_qp(problems(2, 3), "cvxpy")  # cvxpy's first-call imports and set-up, outside the timings
    seconds = {}
    print(f"{'k':>3} {'B':>5} {'batched':>9} " + " ".join(f"{name:>10}" for name in methods) + "  (seconds)")
    for k in K_VALUES:
        for b in B_VALUES:
            gamma = problems(b, k)
            row = {}
            row["batched"], w = timed(solve_simplex_qp, gamma, REPEATS)
            for name, solve in methods.items():
                row[name], w_other = timed(solve, gamma)
                check(gamma, w, w_other, f"{name} at k={k}, B={b}")
            seconds[f"k{k}_B{b}"] = {name: round(t, 5) for name, t in row.items()}
            widths = [9] + [10] * len(methods)
            print(f"{k:>3} {b:>5} " + " ".join(f"{t:>{width}.4f}" for width, t in zip(widths, row.values())))
    k, b = K_VALUES[0], B_VALUES[-1]
    timing = seconds[f"k{k}_B{b}"]
    print(json_text({"ratio": round(timing["cvxpy"] / timing["batched"], 1), "ratio_at": f"k={k}, B={b}",
                     "seconds": seconds, "device": "cpu", "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
