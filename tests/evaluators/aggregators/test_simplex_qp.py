"""Simplex QPs min ωᵀΓω, ω ≥ 0, Σω = 1 (Decker et al. 2024, §4): the batched solver against
cvxpy/Clarabel, a hand-derived optimality certificate, closed forms and degenerate Γ.

Objectives agree when |f − f_ref| ≤ 1e-6 |f_ref| + 1e-12 max_i Γ_ii (the absolute floor
covers optima at 0, where Clarabel stops about 1e-13 max_i Γ_ii above). The certificate
is the Frank–Wolfe gap: for feasible ω, f(ω) − f* ≤ 2 (ωᵀΓω − min_j (Γω)_j).
"""

from __future__ import annotations

import pytest
import torch

from evaluators.aggregators import simplex_qp
from evaluators.aggregators.simplex_qp import MAX_EXPLAINERS, enumerate_supports, solve_simplex_qp
from foundation.errors import InputError

RELATIVE, ABSOLUTE = 1e-6, 1e-12


def objective(gamma: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.einsum("bi,bij,bj->b", w.double(), gamma.double(), w.double())


def scale(gamma: torch.Tensor) -> torch.Tensor:
    return gamma.double().diagonal(dim1=1, dim2=2).amax(1)


def assert_feasible(w: torch.Tensor) -> None:
    """ω ≥ −1e-12 and |Σω − 1| < 1e-9 (in float32, 8 units of its rounding)."""
    assert w.min() >= -1e-12
    assert (w.double().sum(1) - 1).abs().max() < (1e-9 if w.dtype == torch.float64 else 8 * torch.finfo(w.dtype).eps)


def assert_same_objective(gamma: torch.Tensor, w: torch.Tensor, w_ref: torch.Tensor) -> None:
    f, f_ref = objective(gamma, w), objective(gamma, w_ref)
    assert ((f - f_ref).abs() <= RELATIVE * f_ref.abs() + ABSOLUTE * scale(gamma)).all(), (f - f_ref).abs().max()


def assert_certified(gamma: torch.Tensor, w: torch.Tensor) -> None:
    g = gamma.double()
    f = objective(g, w)
    gap = 2 * (f - torch.einsum("bij,bj->bi", g, w.double()).amin(1))
    assert (gap <= 1e-9 * f.abs() + 1e-11 * scale(g)).all(), gap.max()


def random_psd(k: int, ranks: list[int], seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    factors = [torch.randn(k, r, generator=gen, dtype=torch.float64) * 10 ** (4 * torch.rand(1, generator=gen) - 2)
               for r in ranks]
    return torch.stack([a @ a.T for a in factors])


@pytest.fixture
def no_fallback(monkeypatch):
    """Fail if the batched method hands any input to the enumeration."""
    def refuse(gamma):
        raise AssertionError(f"{len(gamma)} inputs were not certified by the active-set steps")

    monkeypatch.setattr(simplex_qp, "enumerate_supports", refuse)


def degenerate_batch() -> torch.Tensor:
    """k = 7: two identical explainers, a zero map, rank 1, rank 2, all explainers identical."""
    gamma = random_psd(7, [7, 7, 1, 2, 7], seed=3)
    gamma[0, :, 4] = gamma[0, :, 2]
    gamma[0, 4, :] = gamma[0, 2, :]
    gamma[1, 5, :] = 0
    gamma[1, :, 5] = 0
    gamma[4] = 3.0
    return gamma


@pytest.mark.parametrize("k", range(1, 13))
def test_batched_matches_cvxpy_on_random_psd_problems(k, no_fallback):
    ranks = torch.randint(1, k + 1, (5,), generator=torch.Generator().manual_seed(k)).tolist()
    gamma = random_psd(k, ranks, seed=k)
    w = solve_simplex_qp(gamma)
    assert_feasible(w)
    assert_certified(gamma, w)
    assert_same_objective(gamma, w, solve_simplex_qp(gamma, "cvxpy"))


def test_degenerate_problems_match_cvxpy(no_fallback):
    gamma = degenerate_batch()
    w = solve_simplex_qp(gamma)
    assert_feasible(w)
    assert_certified(gamma, w)
    assert_same_objective(gamma, w, solve_simplex_qp(gamma, "cvxpy"))
    assert objective(gamma[1:2], w[1:2]).abs() <= ABSOLUTE * scale(gamma[1:2])  # the zero map: objective 0
    assert objective(gamma[4:5], w[4:5]).item() == pytest.approx(3.0, rel=1e-12)  # any ω: ωᵀ(3·11ᵀ)ω = 3


def test_enumeration_fallback_matches_cvxpy(monkeypatch):
    """With no active-set steps every input goes to ``enumerate_supports``."""
    monkeypatch.setattr(simplex_qp, "STEPS_PER_DIMENSION", 0)
    gamma = torch.cat([degenerate_batch(), random_psd(7, [3, 6, 7], seed=11)])
    w = solve_simplex_qp(gamma)
    assert torch.equal(w, enumerate_supports(gamma))
    assert_feasible(w)
    assert_certified(gamma, w)
    assert_same_objective(gamma, w, solve_simplex_qp(gamma, "cvxpy"))


def test_zero_map_takes_objective_zero(no_fallback):
    gamma = random_psd(5, [5, 5], seed=5)
    gamma[:, 2, :] = 0
    gamma[:, :, 2] = 0
    w = solve_simplex_qp(gamma)
    assert_feasible(w)
    assert (objective(gamma, w).abs() <= ABSOLUTE * scale(gamma)).all()


def test_one_explainer_gets_all_the_weight():
    gamma = torch.tensor([[[2.0]], [[0.0]]])
    assert torch.equal(solve_simplex_qp(gamma), torch.ones(2, 1))
    assert torch.equal(solve_simplex_qp(gamma, "cvxpy"), torch.ones(2, 1))


def test_diagonal_gamma_has_inverse_variance_weights(no_fallback):
    """Γ = diag(d): ω_i = (1 / d_i) / Σ_j (1 / d_j) and f* = 1 / Σ_j (1 / d_j); by hand
    for d = (1, 2, 4): ω = (4, 2, 1) / 7, f* = 4 / 7."""
    w = solve_simplex_qp(torch.diag(torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64))[None])
    torch.testing.assert_close(w[0], torch.tensor([4, 2, 1], dtype=torch.float64) / 7, rtol=0, atol=1e-15)
    d = torch.rand(6, 12, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 0.01
    w = solve_simplex_qp(torch.diag_embed(d))
    torch.testing.assert_close(w, (1 / d) / (1 / d).sum(1, keepdim=True), rtol=1e-12, atol=0)


def test_realistic_gammas_with_two_nearly_identical_explainers(no_fallback):
    """Γ as Decker et al. build them from k = 7 maps of d = 1,024 pixels, one map nearly a
    copy of another: Γ_robust = mean_s (E − E_s)ᵀ(E − E_s) over 20 perturbed copies E_s,
    Γ_faith = mean_s (I_sᵀE − Δf_s 1ᵀ)ᵀ(I_sᵀE − Δf_s 1ᵀ) over 20 random masks I_s, and their
    sum after dividing each by its Frobenius norm (AGG_opt); in float32 and float64."""
    gen = torch.Generator().manual_seed(1)
    b, d, k, s = 4, 1024, 7, 20
    maps = torch.rand(b, d, k, generator=gen, dtype=torch.float64)
    maps[..., 1] = maps[..., 0] + 1e-6 * torch.randn(b, d, generator=gen, dtype=torch.float64)
    shifts = 0.05 * torch.randn(s, b, d, k, generator=gen, dtype=torch.float64) * torch.linspace(0.5, 2, k)
    shifts[..., 1] = shifts[..., 0] + 1e-6 * torch.randn(s, b, d, generator=gen, dtype=torch.float64)
    robust = torch.einsum("sbdi,sbdj->bij", shifts, shifts) / s
    masks = (torch.rand(s, b, d, generator=gen) < 0.2).double()
    drops = torch.einsum("sbd,bd->sb", masks, maps.mean(-1)) + torch.randn(s, b, generator=gen, dtype=torch.float64)
    rows = torch.einsum("sbd,bdi->sbi", masks, maps) - drops[..., None]
    faith = torch.einsum("sbi,sbj->bij", rows, rows) / s
    frobenius = torch.linalg.matrix_norm
    combined = robust / frobenius(robust)[:, None, None] + faith / frobenius(faith)[:, None, None]
    for gamma in (robust, faith, combined, combined.float()):
        w = solve_simplex_qp(gamma)
        assert w.dtype == gamma.dtype
        assert_feasible(w)
        assert_same_objective(gamma, w, solve_simplex_qp(gamma, "cvxpy"))


def test_weights_do_not_depend_on_the_scale_of_gamma(no_fallback):
    gamma = random_psd(7, [7, 4, 2], seed=9)
    w = solve_simplex_qp(gamma)
    for factor in (1e-30, 1e30):
        torch.testing.assert_close(solve_simplex_qp(gamma * factor), w, rtol=0, atol=1e-12)


def test_empty_batch_and_tolerated_asymmetry():
    assert solve_simplex_qp(torch.zeros(0, 5, 5)).shape == (0, 5)
    gamma = random_psd(4, [4], seed=2)
    nudged = gamma.clone()
    nudged[0, 0, 1] += 1e-12 * scale(gamma)[0]
    assert_same_objective(gamma, solve_simplex_qp(nudged), solve_simplex_qp(gamma))


def not_positive_semidefinite() -> torch.Tensor:
    return torch.diag(torch.tensor([1.0, -0.5]))[None]


def asymmetric() -> torch.Tensor:
    return torch.tensor([[[1.0, 0.5], [0.0, 1.0]]])


@pytest.mark.parametrize("gamma, message", [
    ([[[1.0]]], "option gamma of type"),
    (torch.ones(2, 3, 3, dtype=torch.long), "option gamma of type"),
    (torch.eye(3), "option gamma of shape (3, 3)"),
    (torch.ones(2, 3, 4), "option gamma of shape (2, 3, 4)"),
    (torch.ones(2, 0, 0), "option gamma of shape (2, 0, 0)"),
    (torch.eye(MAX_EXPLAINERS + 1)[None], f"k = {MAX_EXPLAINERS + 1} explainers"),
    (torch.tensor([[[1.0, float("nan")], [float("nan"), 1.0]]]), "option gamma holds NaN"),
    (torch.eye(2)[None] * float("inf"), "option gamma holds NaN or inf"),
    (asymmetric(), "option gamma[0] is not symmetric"),
    (not_positive_semidefinite(), "option gamma[0] is not positive semidefinite"),
])
def test_bad_gamma_raises_input_error(gamma, message):
    for method in ("batched", "cvxpy"):
        with pytest.raises(InputError) as err:
            solve_simplex_qp(gamma, method)
        assert message in str(err.value)


def test_unknown_method_raises_input_error():
    with pytest.raises(InputError, match=r"option method='quadprog'; expected one of \['batched', 'cvxpy'\]"):
        solve_simplex_qp(torch.eye(2)[None], "quadprog")
