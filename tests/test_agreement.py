"""Agreement metrics against a hand-worked example and an independent per-pair,
per-individual Python loop; properties; the torchmetrics wrapper."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from evaluators.agreement import PairwiseAgreement
from evaluators.agreement_functional import (
    AGREEMENTS,
    angular_difference,
    consistent_direction,
    feature_agreement,
    rank_agreement,
    sign_agreement,
    signed_rank_agreement,
    signed_set_agreement,
)


def naive(a: list[float], b: list[float], name: str, k: int | None) -> float:
    """One pair, one individual, in plain Python (ties: lower index first)."""
    def top(v):
        return sorted(range(len(v)), key=lambda f: (-abs(v[f]), f))[:k]

    def sgn(x):
        return (x > 0) - (x < 0)

    if name == "cdc":
        feats = range(len(a)) if k is None else set(top(a)) | set(top(b))
        return float(all(sgn(a[f]) == sgn(b[f]) for f in feats))
    ta, tb = top(a), top(b)
    if name == "sa":
        return sum(1 for f in set(ta) & set(tb) if sgn(a[f]) == sgn(b[f])) / k
    if name == "ssa":
        return float(set(ta) == set(tb) and all(sgn(a[f]) == sgn(b[f]) for f in ta))
    if name == "feature":
        return len(set(ta) & set(tb)) / k
    if name == "rank":
        return sum(x == y for x, y in zip(ta, tb)) / k
    if name == "signed_rank":
        return sum(x == y and sgn(a[x]) == sgn(b[y]) for x, y in zip(ta, tb)) / k
    raise ValueError(name)


def test_hand_worked_example():
    # features:        0     1     2     3
    a = torch.tensor([0.9, -0.5, 0.1, 0.3])  # top-2: {0, 1}, signs +, -
    b = torch.tensor([0.8, 0.6, -0.2, 0.0])  # top-2: {0, 1}, signs +, +
    c = torch.tensor([-0.1, -0.7, 0.05, 0.4])  # top-2: {1, 3}, signs -, +
    e = torch.stack([a, b, c]).unsqueeze(1)  # (3 models, 1 individual, 4 features); pairs ab, ac, bc
    assert sign_agreement(e, 2).flatten().tolist() == [0.5, 0.5, 0.0]
    assert signed_set_agreement(e, 2).flatten().tolist() == [0.0, 0.0, 0.0]
    assert feature_agreement(e, 2).flatten().tolist() == [1.0, 0.5, 0.5]
    assert rank_agreement(e, 2).flatten().tolist() == [1.0, 0.0, 0.0]  # ab: 0 then 1 in both
    assert signed_rank_agreement(e, 2).flatten().tolist() == [0.5, 0.0, 0.0]
    # CDC@2 over the union: ab {0,1}: sign of 1 differs; ac {0,1,3}: 0 differs; bc {0,1,3}: 1 differs
    assert consistent_direction(e, 2).flatten().tolist() == [0.0, 0.0, 0.0]
    assert consistent_direction(e[[0, 2]][:, :, [1, 3]], 1).flatten().tolist() == [1.0]
    cos_ab = float(a @ b / (a.norm() * b.norm()))
    assert angular_difference(e)[0, 0].item() == pytest.approx(math.acos(cos_ab), abs=1e-6)


@pytest.mark.parametrize("name", sorted(AGREEMENTS))
@pytest.mark.parametrize("k", [1, 3, 6])
def test_vectorised_equals_naive_loop(name, k):
    torch.manual_seed(k)
    e = torch.randn(5, 40, 6)
    e[e.abs() < 0.3] = 0.0  # zeros and ties in |value|
    e[:, ::7, 2] = e[:, ::7, 4].abs()
    got = AGREEMENTS[name](e, k)
    for p, (i, j) in enumerate(itertools.combinations(range(5), 2)):
        for n in range(40):
            assert got[p, n].item() == pytest.approx(naive(e[i, n].tolist(), e[j, n].tolist(), name, k)), (i, j, n)
    if name == "cdc":
        got_d = consistent_direction(e, None)
        for p, (i, j) in enumerate(itertools.combinations(range(5), 2)):
            for n in range(40):
                assert got_d[p, n].item() == naive(e[i, n].tolist(), e[j, n].tolist(), "cdc", None)


def test_properties_on_random_data():
    torch.manual_seed(0)
    e = torch.randn(6, 200, 10)
    for k in (1, 4, 10):
        sa, ssa = sign_agreement(e, k), signed_set_agreement(e, k)
        assert ((sa >= 0) & (sa <= 1)).all()
        assert torch.equal(ssa == 1, sa == 1)
    same = e[:1].repeat(3, 1, 1)
    for name, fn in AGREEMENTS.items():
        assert (fn(same, 3) == 1).all(), name
    assert (consistent_direction(same, None) == 1).all()
    assert angular_difference(same).abs().max() < 1e-3


def test_metric_accumulates_over_batches():
    torch.manual_seed(1)
    e = torch.randn(4, 30, 8)
    metric = PairwiseAgreement("sa", k=3)
    metric.update(e[:, :10])
    metric.update(e[:, 10:])
    result = metric.compute()
    reference = sign_agreement(e, 3).double()
    assert result["mean"].item() == pytest.approx(reference.mean().item())
    assert result["std"].item() == pytest.approx(reference.std(unbiased=False).item())


def test_watson_separability_and_consistency():
    from evaluators.agreement_functional import separability, watson_consistency

    torch.manual_seed(0)
    a = torch.randn(400, 5)
    same = a[torch.randperm(400)]  # the same set of explanations, shuffled
    assert abs(separability(a, same) - 0.5) < 0.08
    shifted = a + torch.tensor([5.0, 0, 0, 0, 0])  # Bayes accuracy Phi(2.5) = 0.994
    assert separability(a, shifted) > 0.97
    e = torch.stack([a, a[torch.randperm(400)], a[torch.randperm(400)]])
    assert watson_consistency(e) > 0.85
    assert watson_consistency(torch.stack([a, shifted])) < 0.1


def test_ley_agreements_at_once_equal_the_single_functions():
    from evaluators.agreement_functional import ley_agreements

    torch.manual_seed(2)
    e = torch.randn(6, 50, 9)
    e[e.abs() < 0.2] = 0.0
    together = ley_agreements(e, 3)
    assert torch.equal(together["sa"], sign_agreement(e, 3))
    assert torch.equal(together["ssa"], signed_set_agreement(e, 3))
    assert torch.equal(together["cdc_k"], consistent_direction(e, 3))
    assert torch.equal(together["cdc_d"], consistent_direction(e, None))
