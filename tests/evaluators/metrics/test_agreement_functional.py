"""Krishna et al.'s rank correlation and pairwise rank agreement (agreement_functional):
against scipy's spearmanr, rankdata and kendalltau, a brute-force loop over feature pairs
and OpenXAI's dense-rank reading where the two agree; undefined and bad inputs; the Metric
and the consistency protocol."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.stats import kendalltau, pearsonr, rankdata, spearmanr

from evaluators.metrics import agreement_functional
from evaluators.metrics.agreement import PairwiseAgreement
from evaluators.metrics.agreement_functional import average_ranks, pairwise_rank_agreement, rank_correlation
from foundation.errors import InputError


def tied(seed: int, m: int = 4, n: int = 25, d: int = 8) -> torch.Tensor:
    """(M, N, d) float64 explanations with zeros and equal |values| (ties)."""
    e = torch.randn(m, n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    e[e.abs() < 0.4] = 0.0
    e[:, ::3, 1] = -e[:, ::3, -1]
    return e


def brute_force_pra(a: np.ndarray, b: np.ndarray) -> float:
    """Share of feature pairs f < g ordered alike by |a| and |b| (a tie agrees with a tie)."""
    a, b = np.abs(a), np.abs(b)
    pairs = list(itertools.combinations(range(len(a)), 2))
    return sum(np.sign(a[f] - a[g]) == np.sign(b[f] - b[g]) for f, g in pairs) / len(pairs)


def test_average_ranks_are_scipy_s():
    v = tied(0)[0].abs()
    np.testing.assert_array_equal(average_ranks(v).numpy(), rankdata(v.numpy(), axis=1))


def test_rank_correlation_is_spearman_of_the_absolute_maps_ties_included():
    e = tied(1)
    e[2, 4] = 0.0  # an all-zero map: no ranking, so its pairs are undefined
    got = rank_correlation(e)
    for p, (i, j) in enumerate(itertools.combinations(range(4), 2)):
        for n in range(25):
            if n == 4 and 2 in (i, j):
                assert got[p, n].isnan()
                continue
            expected = spearmanr(e[i, n].abs().numpy(), e[j, n].abs().numpy()).statistic
            assert got[p, n].item() == pytest.approx(expected, abs=1e-12), (i, j, n)
    assert got.isnan().sum() == 3


def test_pairwise_rank_agreement_is_the_share_of_pairs_ordered_alike():
    e = tied(2)
    got = pairwise_rank_agreement(e)
    for p, (i, j) in enumerate(itertools.combinations(range(4), 2)):
        for n in range(25):
            assert got[p, n].item() == pytest.approx(brute_force_pra(e[i, n].numpy(), e[j, n].numpy()), abs=1e-12)


def test_without_ties_pra_is_one_plus_kendall_s_tau_over_two_and_both_are_openxai_s():
    """OpenXAI (``rankcorr``, ``pairwise_comp``): dense ranks of −|a|, the Pearson correlation of
    the ranks, and [r_a(f) < r_a(g)] compared; without ties both are ours."""
    e = torch.randn(3, 10, 9, generator=torch.Generator().manual_seed(3))
    rc, pra = rank_correlation(e), pairwise_rank_agreement(e)
    for p, (i, j) in enumerate(itertools.combinations(range(3), 2)):
        for n in range(10):
            a, b = e[i, n].abs().double().numpy(), e[j, n].abs().double().numpy()
            ra, rb = rankdata(-a, method="dense"), rankdata(-b, method="dense")
            assert rc[p, n].item() == pytest.approx(pearsonr(ra, rb).statistic, abs=1e-6)
            assert pra[p, n].item() == pytest.approx((1 + kendalltau(a, b).statistic) / 2, abs=1e-6)
            openxai = np.mean([(ra[f] < ra[g]) == (rb[f] < rb[g]) for f, g in itertools.combinations(range(9), 2)])
            assert pra[p, n].item() == pytest.approx(openxai, abs=1e-6)


def test_where_openxai_departs_with_ties():
    # a ties features 0 and 1; b puts 0 above 1, c puts 1 above 0. OpenXAI's [r(f) < r(g)] calls
    # the tie "0 not above 1": it agrees with c and not b. Ours: a tie agrees with neither.
    e = torch.tensor([[1.0, 1.0, 0.0], [2.0, 1.0, 0.0], [1.0, 2.0, 0.0]], dtype=torch.float64).unsqueeze(1)
    assert pairwise_rank_agreement(e)[:2, 0].tolist() == pytest.approx([2 / 3, 2 / 3])
    # three tied features: dense ranks 1, 1, 1, 2, 3 are no affine map of the average ranks 2, 2, 2, 4, 5
    a, b = [1.0, 1.0, 1.0, 0.5, 0.0], [3.0, 1.0, 2.0, 0.0, 0.5]
    e = torch.tensor([a, b], dtype=torch.float64).unsqueeze(1)
    openxai = pearsonr(rankdata(-np.array(a), method="dense"), rankdata(-np.array(b), method="dense")).statistic
    assert rank_correlation(e).item() == pytest.approx(spearmanr(a, b).statistic, abs=1e-12)
    assert abs(rank_correlation(e).item() - openxai) > 0.01


def test_pra_in_chunks_equals_one_pass(monkeypatch):
    e = tied(4, m=3, n=9, d=6)
    whole = pairwise_rank_agreement(e)
    monkeypatch.setattr(agreement_functional, "PRA_CHUNK", 3 * 2 * 15)  # two individuals per Gram product
    torch.testing.assert_close(pairwise_rank_agreement(e), whole, rtol=0, atol=0)


def test_bad_explanations_are_refused():
    e = tied(5, m=2, n=3, d=4)
    e[1, 2, 0] = float("nan")
    for function in (rank_correlation, pairwise_rank_agreement):
        with pytest.raises(InputError, match=r"explanations\[1\]: map 2 has 1 NaN value"):
            function(e)
    with pytest.raises(InputError, match=r"d=1 features compare 0 feature pairs"):
        pairwise_rank_agreement(torch.rand(2, 3, 1))
    with pytest.raises(InputError, match=r"expected float \(M, N, d\)"):
        rank_correlation(torch.rand(2, 3))


def test_the_metric_leaves_undefined_pairs_out_and_refuses_nan():
    e = tied(6, m=3, n=10, d=7)
    e[0, 3] = 0.0
    metric = PairwiseAgreement("rc")
    metric.update(e[:, :5])
    metric.update(e[:, 5:])
    values = rank_correlation(e).double()
    defined = values[~values.isnan()]
    assert (metric.count.item(), metric.left_out.item()) == (28, 2)
    assert metric.compute()["mean"].item() == pytest.approx(defined.mean().item(), rel=1e-12)
    assert metric.compute()["std"].item() == pytest.approx(defined.std(unbiased=False).item(), rel=1e-9)
    pra = PairwiseAgreement("pra", k=None)
    pra.update(e)
    assert pra.compute()["mean"].item() == pytest.approx(pairwise_rank_agreement(e).double().mean().item())
    e[1, 0, 0] = float("inf")
    with pytest.raises(InputError, match=r"explanations\[1\]: map 0 has 1 infinite value"):
        PairwiseAgreement("pra").update(e)


def test_consistency_protocol_reports_them_when_asked(small_population, tmp_path):
    import evaluate
    from datamodules import FinancialDataModule
    from evaluators.maps import explain
    from evaluators.protocols.population_sets import disjoint_sets
    from lightning_modules import load_population
    from lightning_modules.ensembles import ENSEMBLES

    config = tmp_path / "consistency.yaml"
    config.write_text(f"population: {small_population}\nmethods: [saliency]\nn_models: [2]\nn_sets: 3\n"
                      f"n_points: 30\nstrategies: [single, average]\nwatson_c: false\nrank_agreements: [rc, pra]\n"
                      f"output_dir: {tmp_path / 'c'}\ndevice: cpu\n")  # fmt: skip
    summary = evaluate.main(["consistency", "--config", str(config)])
    by = {(r["strategy"], r["metric"]): r for r in summary["rows"]}
    population, _ = load_population(small_population)
    x = FinancialDataModule(dataset="german").test_tensors[0][:30]
    sets = disjoint_sets(population.size, 2, 3, 0)
    e = torch.stack([explain(ENSEMBLES["average"](population, s), x, "saliency") for s in sets])
    for name, function in (("rc", rank_correlation), ("pra", pairwise_rank_agreement)):
        assert by[("average", name)]["mean"] == pytest.approx(function(e).mean(0).mean().item(), abs=1e-6)
    (report,) = list((tmp_path / "c").iterdir())
    assert "saliency RC | saliency PRA" in (report / "table1.md").read_text()
    with pytest.raises(InputError, match=r"option rank_agreements: unknown metric\(s\) \['kendall'\]"):
        evaluate.main(["consistency", "--config", str(config), "--set", "rank_agreements=[kendall]"])


def test_summarise_leaves_out_and_counts_undefined_individuals():
    from evaluators.protocols.consistency import summarise

    assert summarise(torch.tensor([0.5, float("nan"), 0.7])) == pytest.approx(
        {"mean": 0.6, "std": 0.1, "median": 0.6, "q45": 0.59, "q55": 0.61, "undefined": 1})
    assert "undefined" not in summarise(torch.tensor([0.5, 0.7]))
