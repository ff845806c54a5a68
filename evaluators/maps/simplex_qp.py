"""Convex weights on the probability simplex: min_ω ωᵀΓω subject to ω ≥ 0, Σ_i ω_i = 1.

Temporary stand-in (cvxpy only, one problem per input) for the batched exact solver
that replaces this module: same signature, ``solve_simplex_qp(gamma, method)``.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import torch

from datamodules.errors import InputError

METHODS = ("cvxpy",)


def solve_simplex_qp(gamma: torch.Tensor, method: str = "cvxpy") -> torch.Tensor:
    """(B, k) minimisers of ωᵀΓ_bω over the simplex for Γ (B, k, k) symmetric PSD, in Γ's
    dtype and on its device; cvxpy's default solver, negative rounding clipped to 0 and
    the weights rescaled to sum to 1."""
    if method not in METHODS:
        raise InputError(f"option method={method!r}; expected one of {list(METHODS)}")
    if not isinstance(gamma, torch.Tensor) or gamma.dim() != 3 or gamma.shape[1] != gamma.shape[2]:
        raise InputError(f"gamma of shape {tuple(getattr(gamma, 'shape', ()))}; expected (B, k, k)")
    matrices = gamma.detach().to("cpu", torch.float64).numpy()
    weights = []
    for matrix in matrices:
        w = cp.Variable(len(matrix))
        cp.Problem(cp.Minimize(cp.quad_form(w, cp.psd_wrap((matrix + matrix.T) / 2))), [w >= 0, cp.sum(w) == 1]).solve()
        clipped = np.maximum(w.value, 0)
        weights.append(clipped / clipped.sum())
    return torch.from_numpy(np.stack(weights)).to(gamma.device, gamma.dtype)
