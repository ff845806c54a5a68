"""Agreement between average ensembles: the ensembles' maps and SA/SSA@k by hand on tiny
float64 maps, the ensemble size, and when there are none."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import t as student_t

from lightning_modules.ensembles import disjoint_sets
from evaluators.reports.reliability.ensembles import default_size, ensemble_agreement
from tests.evaluators.reports.reliability.test_protocol import top_k_sign_agreement


def units(n_members: int, names=("saliency", "deeplift")) -> dict[str, dict]:
    g = torch.Generator().manual_seed(3)
    return {n: {"maps": torch.randn(n_members, 4, 5, generator=g, dtype=torch.float64)} for n in names}


@pytest.mark.parametrize("members, size", [(4, 2), (6, 2), (9, 3), (10, 3), (30, 10)])
def test_default_size(members, size):
    assert default_size(members) == size


def test_ensembles_by_hand():
    """6 members, ensembles of 2: each ensemble's map the mean of its two members' maps; SA@2
    and SSA@2 per ensemble the mean over its pairs and inputs; DeepLift (not linear) left out."""
    given = units(6)
    out = ensemble_agreement(given, 2, 2, seed=5)
    assert out["available"] and out["n_ensembles"] == 3 and out["left_out"] == ["deeplift"]
    assert out["sets"] == disjoint_sets(6, 2, 3, 5)
    maps = given["saliency"]["maps"].numpy()
    ens = [maps[s].mean(0) for s in out["sets"]]
    sa = [np.mean([top_k_sign_agreement(ens[a][i], ens[b][i], 2) for b in range(3) if b != a for i in range(4)])
          for a in range(3)]  # fmt: skip
    ssa = [np.mean([top_k_sign_agreement(ens[a][i], ens[b][i], 2) == 1 for b in range(3) if b != a
                    for i in range(4)]) for a in range(3)]  # fmt: skip
    got = out["explainers"]["saliency"]
    assert got["sa"]["per_member"] == pytest.approx(sa) and got["ssa"]["per_member"] == pytest.approx(ssa)
    half = student_t.ppf(0.975, 2) * np.std(sa, ddof=1) / np.sqrt(3)
    assert got["sa"]["mean"] == pytest.approx(np.mean(sa)) and got["sa"]["ci95"] == pytest.approx(half)


def test_no_ensembles_when_too_few_members_or_no_linear_explainer():
    out = ensemble_agreement(units(5), 2, None, 0)
    assert not out["available"] and out["why"] == "5 members: 3 disjoint ensembles of 2 need 6"
    out = ensemble_agreement(units(6, ("deeplift",)), 2, None, 0)
    assert not out["available"] and "linear" in out["why"]
