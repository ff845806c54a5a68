"""Agreement metrics against a hand-worked example and an independent per-pair,
per-individual Python loop; properties; the torchmetrics wrapper."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from evaluators.metrics.agreement import PairwiseAgreement, default_k
from evaluators.metrics.agreement_functional import (
    AGREEMENTS,
    angular_difference,
    consistent_direction,
    consistent_direction_union,
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

    if name in ("cdc", "cdc_union"):
        if k is None:
            feats = range(len(a))
        else:
            feats = set(top(a)) & set(top(b)) if name == "cdc" else set(top(a)) | set(top(b))
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
    # CDC@2 (the paper's, over the intersection): ab {0,1}: 1 differs; ac {1}: same; bc {1}: differs
    assert consistent_direction(e, 2).flatten().tolist() == [0.0, 1.0, 0.0]
    # over the union: ab {0,1}: sign of 1 differs; ac {0,1,3}: 0 differs; bc {0,1,3}: 1 differs
    assert consistent_direction_union(e, 2).flatten().tolist() == [0.0, 0.0, 0.0]
    assert consistent_direction_union(e[[0, 2]][:, :, [1, 3]], 1).flatten().tolist() == [1.0]
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
    if name in ("cdc", "cdc_union"):
        got_d = consistent_direction(e, None)
        for p, (i, j) in enumerate(itertools.combinations(range(5), 2)):
            for n in range(40):
                assert got_d[p, n].item() == naive(e[i, n].tolist(), e[j, n].tolist(), "cdc", None)


def test_cdc_paper_example_intersection_not_union():
    # Issue 13's example: top-2 of a is {0, 1}, of b {0, 3}; they share feature 0 (same sign),
    # while the union {0, 1, 3} holds feature 1 with opposite signs.
    e = torch.tensor([[3.0, 2.0, 1.0, 0.5], [3.0, -0.1, 0.2, 2.0]]).unsqueeze(1)
    assert consistent_direction(e, 2).item() == 1.0
    assert consistent_direction_union(e, 2).item() == 0.0
    assert AGREEMENTS["cdc"] is consistent_direction


def test_cdc_at_top_k_is_the_least_strict_on_correlated_explanations():
    # Ley et al.: top-5 CDC "typically returned 1" and is "the least strict of the three metrics"
    torch.manual_seed(3)
    e = torch.randn(1, 500, 23) + 0.7 * torch.randn(6, 500, 23)
    paper, union = consistent_direction(e, 5).mean().item(), consistent_direction_union(e, 5).mean().item()
    assert paper > 0.95 > 0.8 > union
    assert paper >= sign_agreement(e, 5).mean().item() >= signed_set_agreement(e, 5).mean().item()


def test_angular_difference_of_an_all_zero_map_is_a_right_angle():
    e = torch.stack([torch.zeros(4), torch.tensor([1.0, -2.0, 0.0, 3.0])]).unsqueeze(1)
    assert angular_difference(e).item() == pytest.approx(math.pi / 2)


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


def test_watson_separability_splits_by_individual():
    from evaluators.metrics.agreement_functional import separability, watson_consistency

    torch.manual_seed(0)
    a = torch.randn(200, 23)
    # Identical sets: both rows of an individual fall on one side of the split, so the
    # classifier can do no better than chance (split by row it scored about 0.40, C 0.65-0.90).
    assert separability(a, a.clone()) == 0.5
    assert watson_consistency(torch.stack([a, a, a])) >= 0.97
    for seed, fraction in ((1, 0.3), (2, 0.7)):
        assert separability(a, a.clone(), seed=seed, test_fraction=fraction) == 0.5
    big = torch.randn(3, 1000, 23)  # independent draws from one distribution
    assert watson_consistency(big) >= 0.9
    shifted = torch.stack([big[0], big[1] + torch.tensor([5.0] + [0.0] * 22)])  # Bayes accuracy Phi(2.5) = 0.994
    assert watson_consistency(shifted) <= 0.05
    assert separability(shifted[0], shifted[1], classifier={"C": 0.01}) > 0.97


def test_watson_separability_options_reach_the_classifier():
    from evaluators.metrics.agreement_functional import separability

    torch.manual_seed(4)
    a, b = torch.randn(300, 5), torch.randn(300, 5) + 0.4
    assert separability(a, b) > 0.7
    with pytest.raises(ValueError, match="'C' parameter"):  # scikit-learn's own check of the option
        separability(a, b, classifier={"C": -1.0})
    with pytest.raises(ValueError, match="test_fraction"):
        separability(a, b, test_fraction=1.0)
    with pytest.raises(ValueError, match="same individuals"):
        separability(a, b[:10])


def test_ley_agreements_at_once_equal_the_single_functions():
    from evaluators.metrics.agreement_functional import ley_agreements

    torch.manual_seed(2)
    e = torch.randn(6, 50, 9)
    e[e.abs() < 0.2] = 0.0
    together = ley_agreements(e, 3)
    assert torch.equal(together["sa"], sign_agreement(e, 3))
    assert torch.equal(together["ssa"], signed_set_agreement(e, 3))
    assert torch.equal(together["cdc_k"], consistent_direction(e, 3))
    assert torch.equal(together["cdc_k_union"], consistent_direction_union(e, 3))
    assert torch.equal(together["cdc_d"], consistent_direction(e, None))


@pytest.mark.parametrize("features, k", [(1, 1), (2, 1), (6, 2), (13, 3), (40, 10), (400, 10)])
def test_default_k(features, k):
    assert default_k(features) == k
