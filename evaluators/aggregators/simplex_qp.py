"""Convex aggregation weights: many small quadratic programs over the probability simplex.

Decker et al. (2024), §4 and Appendix C.2: the weights ω of a convex combination of k
explanation maps that minimise a generalised L2 quality metric solve, for each input b,

    min_ω  ωᵀ Γ_b ω   subject to  ω ≥ 0,  Σ_i ω_i = 1                         (QP)

with Γ_b a k × k symmetric positive semidefinite matrix: their E[ΓᵀΓ] (§4, Γ the g × k
matrix of a metric's terms) for average sensitivity or infidelity, or the sum of both
after dividing each by its Frobenius norm (AGG_opt, App. C.2). ``solve_simplex_qp(gamma, method)`` solves a
batch gamma (B, k, k) and returns ω (B, k) in gamma's dtype and on its device; the
solvers (``SIMPLEX_QP_SOLVERS``) compute in float64 on Γ_b / max_i (Γ_b)_ii (the same
minimisers, better scaled; an all-zero Γ_b is left as is).

KKT conditions (Boyd & Vandenberghe 2004, §5.5.3), with g = Γω and f = ωᵀΓω: ω is a
minimiser iff it is feasible and g_i = f for every i in its support S = {i : ω_i > 0}
and g_j ≥ f for every j (the multiplier of Σω = 1 is 2f, those of ω ≥ 0 are
2(g_j − f) ≥ 0). For any feasible ω, convexity gives the certificate

    f(ω) − f*  ≤  2 (f − min_j g_j)                (gap; the Frank–Wolfe duality gap)

* ``batched`` (the default; torch, on gamma's device): Wolfe's (1976) minimum-norm-point
  algorithm, a primal active-set method, on the Gram matrix Γ. The QP asks for the point
  of smallest norm in the convex hull of the k columns p_i of Γ^{1/2} (p_iᵀp_j = Γ_ij, so
  Γ^{1/2} is never formed). A corral S of affinely independent points starts at the
  column of smallest Γ_ii. Each step solves, for every unfinished input at once, the
  equality-constrained QP on S, the bordered system ``[[Γ_SS, 1], [1ᵀ, 0]] [α_S; ν] = [0; 1]``
  (non-singular because S is affinely independent; padded to (k + 1) × (k + 1) with
  identity rows off S), and then either (major cycle) α_S > 0: ω = α, and ω is returned
  when (gap) ≤ 2 (10⁻¹⁰ f + 10⁻¹²) in normalised units, else the vertex
  j = argmin_{j ∉ S} g_j joins S; or (minor cycle) ω moves towards α to the first face,
  ω ← ω + θ (α − ω), θ = min_{i ∈ S, α_i ≤ 0} ω_i / (ω_i − α_i), and the points whose
  weight reaches 0 leave S (why it ends, and in how many steps:
  docs/optimised_aggregation.md). An input not certified after 10 k steps (round-off in a
  nearly degenerate Γ could make it cycle) or whose system turns singular is solved by
  ``enumerate_supports``, so every returned ω is a minimiser. Cost: one batched LU of
  (k + 1) × (k + 1) per step, O(steps · B k³) time, O(B k²) memory.
* ``cvxpy``: the reference, one cvxpy problem per input as in Decker et al.'s code,
  ``quad_form(ω, psd_wrap(Γ_b))``; where they take cvxpy's default solver and tolerances
  (App. C.2), it names Clarabel (interior point) with gap and feasibility tolerances
  10⁻¹² (normalised units), and raises unless the status is optimal. CPU only.

``enumerate_supports`` is the exhaustive exact method: for every support S ⊆ {1 … k}
(2^k − 1 of them, 4,095 at k = 12) it solves the bordered system above for all inputs
and supports at once (in chunks whose buffers stay within 64 MiB), projects each solution
onto the simplex (negative weights to 0, then divided by the sum; a singular system's
non-finite solution is skipped) and keeps, per input, the projected point of least
objective, which is f* (why: docs/optimised_aggregation.md). Cost O(B 2^k k³) time. k is
at most 16 (``MAX_EXPLAINERS``; Decker et al. combine 7). Why Wolfe's method, written by
hand (timings against enumeration, cvxpy and proxsuite): docs/optimised_aggregation.md.

Degenerate Γ: rank-deficient matrices, identical explainers (equal rows and columns) and
zero maps (a zero row and column: objective 0, e.g. all weight on that map) all have a
minimiser; when it is not unique, any one is returned (which one may differ between
methods; the objectives agree). Bad input (not a floating tensor (B, k, k) with
1 ≤ k ≤ 16, NaN or inf, asymmetric or indefinite beyond √ε_dtype · max_i Γ_ii, where
ε_dtype is the input dtype's machine epsilon) raises ``InputError``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from foundation.errors import InputError

GAP_RELATIVE = 1e-10
GAP_ABSOLUTE = 1e-12
STEPS_PER_DIMENSION = 10
MAX_EXPLAINERS = 16
ENUMERATION_BYTES = 64 * 2**20
CVXPY_TOLERANCE = 1e-12


def check_gamma(gamma) -> torch.Tensor:
    """gamma itself, or InputError unless it is a batch (B, k, k) of finite symmetric
    positive semidefinite matrices (to √ε of its dtype times the largest diagonal entry)."""
    if not isinstance(gamma, torch.Tensor) or not gamma.is_floating_point():
        raise InputError(f"option gamma of type {getattr(gamma, 'dtype', type(gamma))}; "
                         "expected a floating-point tensor (B, k, k)")
    if gamma.ndim != 3 or gamma.shape[1] != gamma.shape[2] or gamma.shape[1] == 0:
        raise InputError(f"option gamma of shape {tuple(gamma.shape)}; expected (B, k, k) with k >= 1")
    if gamma.shape[1] > MAX_EXPLAINERS:
        raise InputError(f"option gamma of shape {tuple(gamma.shape)}: k = {gamma.shape[1]} explainers; expected "
                         f"k <= {MAX_EXPLAINERS} (the exact fallback enumerates 2^k supports)")
    if not torch.isfinite(gamma).all():
        raise InputError("option gamma holds NaN or inf; expected finite matrices")
    if gamma.shape[0] == 0:
        return gamma
    g = gamma.double()
    tol = torch.finfo(gamma.dtype).eps ** 0.5 * g.diagonal(dim1=1, dim2=2).abs().amax(1)
    asymmetry = (g - g.transpose(1, 2)).abs().amax((1, 2))
    if (asymmetry > tol).any():
        b = int((asymmetry - tol).argmax())
        raise InputError(f"option gamma[{b}] is not symmetric (max |Γ − Γᵀ| = {float(asymmetry[b]):.3g}); "
                         "expected symmetric matrices")
    lowest = torch.linalg.eigvalsh((g + g.transpose(1, 2)) / 2)[:, 0]
    if (lowest < -tol).any():
        b = int((tol + lowest).argmin())
        raise InputError(f"option gamma[{b}] is not positive semidefinite (eigenvalue {float(lowest[b]):.3g}); "
                         "expected Gram matrices such as E[ΓᵀΓ]")
    return gamma


def _normalised(gamma: torch.Tensor) -> torch.Tensor:
    """Γ / max_i Γ_ii in float64, symmetrised; all-zero matrices unchanged."""
    g = gamma.double()
    g = (g + g.transpose(1, 2)) / 2
    scale = g.diagonal(dim1=1, dim2=2).amax(1)
    return g / torch.where(scale > 0, scale, torch.ones_like(scale))[:, None, None]


def _to_simplex(w: torch.Tensor) -> torch.Tensor:
    """Negative weights to 0, then divided by the sum (rows with a positive sum)."""
    w = w.clamp(min=0)
    return w / w.sum(-1, keepdim=True)


def _objective(g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.einsum("...i,...ij,...j->...", w, g, w)


def _affine_minimisers(g: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """α (..., k) minimising αᵀΓα over {Σα = 1, α_i = 0 off the support}: the bordered
    system, padded with identity rows off the support; non-finite where it is singular."""
    k = g.shape[-1]
    m = support.to(g.dtype)
    batch = torch.broadcast_shapes(g.shape[:-2], m.shape[:-1])
    system = g.new_zeros(*batch, k + 1, k + 1)
    system[..., :k, :k] = g * m[..., :, None] * m[..., None, :] + torch.diag_embed(1 - m)
    system[..., :k, k] = m
    system[..., k, :k] = m
    rhs = g.new_zeros(*batch, k + 1, 1)
    rhs[..., k, 0] = 1
    solution = torch.linalg.solve_ex(system, rhs)[0][..., :k, 0]
    return solution * m


def enumerate_supports(gamma: torch.Tensor, budget_bytes: int = ENUMERATION_BYTES) -> torch.Tensor:
    """ω (B, k) by exhaustive search over the 2^k − 1 supports (module docstring), in
    float64 on normalised Γ, in chunks whose buffers stay within about ``budget_bytes``."""
    g = _normalised(check_gamma(gamma))
    n, k = g.shape[:2]
    bits = torch.arange(1, 2**k, device=g.device)
    supports = (bits[:, None] >> torch.arange(k, device=g.device)) & 1 == 1
    per_chunk = max(1, budget_bytes // (8 * 8 * (k + 1) ** 2))  # about 8 float64 (k + 1)² buffers per system
    best = g.new_zeros(n, k)
    best_value = g.new_full((n,), float("inf"))
    inputs_per_chunk = max(1, per_chunk // len(supports))
    supports_per_chunk = min(len(supports), per_chunk)
    for lo in range(0, n, inputs_per_chunk):
        rows = g[lo:lo + inputs_per_chunk]
        for s in range(0, len(supports), supports_per_chunk):
            chunk = supports[s:s + supports_per_chunk]
            alpha = _affine_minimisers(rows[:, None], chunk[None].expand(len(rows), -1, -1))
            finite = torch.isfinite(alpha).all(-1)
            w = _to_simplex(torch.where(finite[..., None], alpha, 0.0))
            value = torch.where(finite & (w.sum(-1) > 0.5), _objective(rows[:, None], w), float("inf"))
            value, pick = value.min(1)
            better = value < best_value[lo:lo + len(rows)]
            chosen = w[torch.arange(len(rows), device=g.device), pick]
            best[lo:lo + len(rows)] = torch.where(better[:, None], chosen, best[lo:lo + len(rows)])
            best_value[lo:lo + len(rows)] = torch.where(better, value, best_value[lo:lo + len(rows)])
    return best.to(gamma.dtype)


def _wolfe(g: torch.Tensor, max_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Wolfe's minimum-norm-point steps on normalised Γ (n, k, k), all inputs at once:
    (ω (n, k), certified (n,) bool)."""
    n, k = g.shape[:2]
    start = g.diagonal(dim1=1, dim2=2).argmin(1)
    support = torch.nn.functional.one_hot(start, k).bool()
    w = support.to(g.dtype)
    certified = torch.zeros(n, dtype=torch.bool, device=g.device)
    todo = torch.arange(n, device=g.device)
    for _ in range(max_steps):
        if len(todo) == 0:
            break
        gt, st, wt = g[todo], support[todo], w[todo]
        alpha = _affine_minimisers(gt, st)
        singular = ~torch.isfinite(alpha).all(1)
        alpha = torch.where(singular[:, None], wt, alpha)
        interior = (alpha > 0).eq(st).all(1)
        # minor cycle: to the first face on the segment ω -> α, dropping the points that leave
        ratio = torch.where(st & (alpha <= 0), wt / (wt - alpha).clamp(min=torch.finfo(g.dtype).tiny), float("inf"))
        theta, leaving = ratio.min(1)
        moved = wt + theta.clamp(0, 1)[:, None] * (alpha - wt)
        moved[torch.arange(len(todo), device=g.device), leaving] = 0
        moved_support = st & (moved > 0)
        moved = _to_simplex(torch.where(moved_support, moved, 0.0))
        # major cycle: α is interior to its face; stop when certified, else add the best vertex
        grad = torch.einsum("nij,nj->ni", gt, alpha)
        value = (alpha * grad).sum(1)
        entering_grad, entering = torch.where(st, float("inf"), grad).min(1)
        done = interior & ~(entering_grad < value - (GAP_RELATIVE * value + GAP_ABSOLUTE))
        grown = st | (torch.nn.functional.one_hot(entering, k).bool() & (interior & ~done)[:, None])
        w[todo] = torch.where(interior[:, None], alpha, moved)
        support[todo] = torch.where(interior[:, None], grown, moved_support)
        certified[todo[done & ~singular]] = True
        todo = todo[~(done | singular)]
    return _to_simplex(w), certified


def _batched(gamma: torch.Tensor) -> torch.Tensor:
    g = _normalised(gamma)
    w, certified = _wolfe(g, STEPS_PER_DIMENSION * g.shape[-1])
    if not certified.all():
        w[~certified] = enumerate_supports(g[~certified])
    return w


def _cvxpy(gamma: torch.Tensor) -> torch.Tensor:
    import cvxpy as cp

    g = _normalised(gamma).cpu().numpy()
    weights = np.empty(g.shape[:2])
    for b, matrix in enumerate(g):
        w = cp.Variable(len(matrix))
        problem = cp.Problem(cp.Minimize(cp.quad_form(w, cp.psd_wrap(matrix))), [w >= 0, cp.sum(w) == 1])
        problem.solve(solver=cp.CLARABEL, tol_gap_abs=CVXPY_TOLERANCE, tol_gap_rel=CVXPY_TOLERANCE,
                      tol_feas=CVXPY_TOLERANCE, max_iter=500)
        if problem.status != cp.OPTIMAL:
            raise RuntimeError(f"cvxpy/Clarabel ended with status {problem.status!r} on gamma[{b}]")
        weights[b] = w.value
    return _to_simplex(torch.from_numpy(weights)).to(gamma.device)


SIMPLEX_QP_SOLVERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"batched": _batched, "cvxpy": _cvxpy}


def solve_simplex_qp(gamma: torch.Tensor, method: str = "batched") -> torch.Tensor:
    """ω (B, k) minimising ωᵀΓ_bω over the simplex for each of the B matrices gamma
    (B, k, k): see the module docstring for the methods (``SIMPLEX_QP_SOLVERS``)."""
    if method not in SIMPLEX_QP_SOLVERS:
        raise InputError(f"option method={method!r}; expected one of {sorted(SIMPLEX_QP_SOLVERS)}")
    check_gamma(gamma)
    if gamma.shape[0] == 0:
        return gamma.new_zeros(gamma.shape[:2])
    return SIMPLEX_QP_SOLVERS[method](gamma).to(gamma.dtype)
