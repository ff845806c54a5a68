"""The calibrated sanity verdict: by hand on small maps, and by simulation on tiny MLP
populations (an explainer that ignores the model must fail, gradients must pass, in at least
95 % of draws); how many members settle a ranking, by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr, t as student_t
from torch import nn

from evaluators.maps import explain
from evaluators.reports.reliability.maps import member_maps, randomisation
from evaluators.reports.reliability.verdict import calibrated_verdict, equally_good, members_to_settle

DRAWS, MEMBERS, ROWS, FEATURES = 40, 5, 40, 6


def test_verdict_by_hand_against_scipy():
    """s_rand, s_seed and δ recomputed with scipy's Spearman of |maps| and the t quantile."""
    g = torch.Generator().manual_seed(0)
    maps = torch.randn(4, 10, 5, generator=g, dtype=torch.float64)
    randomised = torch.randn(4, 10, 5, generator=g, dtype=torch.float64)
    out = calibrated_verdict(maps, randomised, "spearman_abs", [0, 1, 2, 3])

    def s(a, b):
        return np.mean([spearmanr(np.abs(a[i]), np.abs(b[i]))[0] for i in range(len(a))])

    m, r = maps.numpy(), randomised.numpy()
    s_rand = np.array([s(r[k], m[k]) for k in range(4)])
    s_seed = np.array([np.mean([s(m[k], m[b]) for b in range(4) if b != k]) for k in range(4)])
    delta = s_seed - s_rand
    assert out["per_member"]["delta"] == pytest.approx(delta.tolist(), abs=1e-12)
    half = student_t.ppf(0.975, 3) * delta.std(ddof=1) / 2
    assert out["delta"]["mean"] == pytest.approx(delta.mean()) and out["delta"]["ci95"] == pytest.approx(half)
    assert out["passed"] == bool(delta.mean() - half > 0)


def test_equally_good_keeps_members_near_the_median_or_all():
    assert equally_good(torch.tensor([0.90, 0.91, 0.92, 0.80]), 0.02) == ([0, 1, 2], True)
    assert equally_good(torch.tensor([0.5, 0.7, 0.9]), 0.01) == ([0, 1, 2], False)  # too few within: all


def test_members_to_settle():
    """One explainer best on every member: settled with 2; two explainers tied up to noise: not settled."""
    g = torch.Generator().manual_seed(1)
    clear = torch.stack([torch.full((8,), 0.2), torch.full((8,), 0.5)], 1) + 0.01 * torch.rand(8, 2, generator=g)
    out = members_to_settle(clear, False, 200, 0)
    assert out["best"] == 0 and out["members_needed"] == 2 and out["settle_share"][8] == 1.0
    tied = 0.5 + 0.1 * torch.randn(8, 2, generator=g)
    out = members_to_settle(tied, True, 200, 0)
    assert out["members_needed"] is None and out["settle_share"][8] < 0.95


def tiny_population(draw: int) -> tuple[torch.Tensor, list[nn.Module]]:
    """``MEMBERS`` MLPs differing only in their seed, trained (full batch, Adam) on a draw's
    synthetic table whose label depends on two features and their product."""
    g = torch.Generator().manual_seed(draw)
    x = torch.randn(200, FEATURES, generator=g)
    y = (x[:, 0] - x[:, 1] + 0.5 * x[:, 0] * x[:, 2] > 0).long()
    members = []
    for s in range(MEMBERS):
        torch.manual_seed(1000 * draw + s)
        net = nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, 2))
        optimiser = torch.optim.Adam(net.parameters(), lr=0.05)
        for _ in range(60):
            optimiser.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            optimiser.step()
        members.append(net.eval())
    return x[:ROWS], members


def the_input(model, x, method, target=None, seed=0, **options):
    """Ignores the model: the input itself."""
    return x.detach().clone()


def input_seeded_noise(model, x, method, target=None, seed=0, **options):
    """Ignores the model: noise drawn from each input's own seed (its values' hash)."""
    return torch.stack([torch.randn(x.shape[1], generator=torch.Generator().manual_seed(hash(tuple(row.tolist()))))
                        for row in x])  # fmt: skip


def verdict_of(x, members, explain_fn) -> bool:
    target = torch.ones(len(x), dtype=torch.long)
    maps = member_maps(members, x, target, "saliency", {}, 0, explain_fn)
    randomised = torch.stack([randomisation(m, maps[i], x, target, "saliency", {}, 0, "spearman_abs", explain_fn)[2]
                              for i, m in enumerate(members)])  # fmt: skip
    return calibrated_verdict(maps, randomised, "spearman_abs", list(range(len(members))))["passed"]


def test_simulation_model_ignoring_explainers_fail_and_gradients_pass():
    """Over ``DRAWS`` tiny populations: the input and input-seeded noise (both ignore the model)
    fail in every draw (δ is exactly 0), gradients (saliency) pass in at least 95 % of draws."""
    passed = {"saliency": 0, "input": 0, "noise": 0}
    for draw in range(DRAWS):
        x, members = tiny_population(draw)
        passed["saliency"] += verdict_of(x, members, explain)
        passed["input"] += verdict_of(x, members, the_input)
        passed["noise"] += verdict_of(x, members, input_seeded_noise)
    assert passed["input"] == passed["noise"] == 0
    assert passed["saliency"] >= 0.95 * DRAWS, passed
