"""The data-randomisation verdict by hand (scipy's Spearman of |maps|, the t quantile): member
m paired with permuted member m, the seed reference over the equally good members among the
pairs; a permuted population serving other inputs is refused."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr, t as student_t

from evaluators.reports.reliability import permuted as permuted_module
from evaluators.reports.reliability.inputs import ReportInputs
from evaluators.reports.reliability.permuted import data_verdict, permuted_inputs
from foundation.errors import InputError


def s(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean([spearmanr(np.abs(a[i]), np.abs(b[i]))[0] for i in range(len(a))]))


@pytest.mark.parametrize("kept, reference", [([0, 1, 3], [0, 1]), ([0, 3], [0, 1, 2])])
def test_data_verdict_by_hand(kept, reference):
    """4 real members, 3 permuted: 3 pairs; member 3 has no partner, so the reference is the
    kept members among the first 3, or all 3 where fewer than 2 of them are kept."""
    g = torch.Generator().manual_seed(2)
    maps = torch.randn(4, 8, 5, generator=g, dtype=torch.float64)
    perm = torch.randn(3, 8, 5, generator=g, dtype=torch.float64)
    out = data_verdict(maps, perm, "spearman_abs", kept, "explainer 'x'")
    m, p = maps.numpy(), perm.numpy()
    s_perm = np.array([s(p[k], m[k]) for k in reference])
    s_seed = np.array([np.mean([s(m[k], m[b]) for b in reference if b != k]) for k in reference])
    delta = s_seed - s_perm
    half = student_t.ppf(0.975, len(reference) - 1) * delta.std(ddof=1) / np.sqrt(len(reference))
    assert out["members"] == reference
    assert out["per_member"]["permuted"] == pytest.approx(s_perm.tolist(), abs=1e-12)
    assert out["similarity_permuted"]["mean"] == pytest.approx(s_perm.mean(), abs=1e-12)
    assert out["delta"]["mean"] == pytest.approx(delta.mean()) and out["delta"]["ci95"] == pytest.approx(half)
    assert out["passed"] == bool(delta.mean() - half > 0)


@dataclass
class Options:
    population: str = "real.pt"
    permuted_population: str | None = "permuted.pt"
    permute_labels: int | None = None


def inputs(x: torch.Tensor) -> ReportInputs:
    return ReportInputs([], [], torch.zeros(3), x, torch.zeros(len(x), dtype=torch.long), 2, False, {})


def test_other_inputs_are_refused(monkeypatch):
    given = inputs(torch.zeros(4, 3))
    monkeypatch.setattr(permuted_module, "report_inputs", lambda cfg: inputs(torch.ones(4, 3)))
    with pytest.raises(InputError, match="permuted-label population 'permuted.pt' serves other test inputs"):
        permuted_inputs(Options(), "permuted.pt", given)
    monkeypatch.setattr(permuted_module, "report_inputs", lambda cfg: inputs(torch.zeros(4, 3)))
    assert permuted_inputs(Options(), "permuted.pt", given).x.shape == (4, 3)
