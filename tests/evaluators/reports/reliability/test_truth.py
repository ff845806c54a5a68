"""The report's ground-truth section (``evaluators.reports.reliability.truth``): member means
of the localisation metrics by hand, the seed-level interval, the comparison with the
faithfulness ranking, and no section without a truth."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import kendalltau, t as student_t

from evaluators.reports.reliability.truth import truth_section
from foundation.modality import ROWS


def test_member_means_interval_and_agreement_with_faithfulness_by_hand():
    g = torch.Generator().manual_seed(0)
    m, n, d = 4, 6, 5
    mask = torch.zeros(n, d, dtype=torch.bool)
    mask[:, :2] = True
    attributions = torch.randn(n, d, generator=g, dtype=torch.float64)
    attributions[:, :2] *= 5  # the relevant features mostly on top of the truth's ranking
    truth = {"mask": mask, "attributions": attributions}
    good = torch.randn(m, n, d, generator=g) * 0.1
    good[..., :2] += 3.0  # the relevant features on top: rank accuracy 1
    bad = torch.randn(m, n, d, generator=g) * 0.1
    bad[..., 2:4] += 3.0  # two irrelevant features on top: rank accuracy 0
    candidates = {"good": {"maps": good}, "bad": {"maps": bad}}
    faithfulness = {"primary": "deletion", "by_metric": {"deletion": {"explainers": {
        "good": {"mean": 0.2}, "bad": {"mean": 0.6}}}}}  # deletion: lower is better, so "good" is best
    got = truth_section(candidates, truth, ROWS, 2, faithfulness)
    assert got["metrics"] == list(ROWS.truth_metrics) and got["primary"] == "ground_truth_agreement"
    rank = got["by_metric"]["relevance_rank_accuracy"]["candidates"]
    assert rank["good"]["mean"] == 1.0 and rank["bad"]["mean"] == 0.0
    # ground-truth agreement by hand: top-2 of |map| against top-2 of |truth|, per member then mean
    top_truth = truth["attributions"].abs().topk(2, 1).indices

    def agreement(maps):
        top = maps.abs().topk(2, 1).indices
        return torch.tensor([len(set(a.tolist()) & set(b.tolist())) / 2 for a, b in zip(top, top_truth)],
                            dtype=torch.float64).mean()

    per_member = torch.stack([agreement(good[i]) for i in range(m)]).double()
    entry = got["by_metric"]["ground_truth_agreement"]["candidates"]["good"]
    assert entry["mean"] == pytest.approx(per_member.mean().item(), abs=1e-12)
    half = student_t.ppf(0.975, m - 1) * per_member.std().item() / math.sqrt(m)
    assert entry["ci95"] == pytest.approx(half, abs=1e-12)
    against = got["against_faithfulness"]
    means = [got["by_metric"]["ground_truth_agreement"]["candidates"][c]["mean"] for c in ("good", "bad")]
    assert means[0] > means[1] and against["kendall_tau"] == pytest.approx(kendalltau(means, [-0.2, -0.6]).statistic)
    assert against["best_by_faithfulness"] == "good"
    assert against["same_best"] == (against["best_by_truth"] == "good")


def test_no_truth_no_section():
    assert truth_section({"a": {"maps": torch.zeros(3, 2, 4)}}, None, ROWS, 2, {})["available"] is False


def test_a_report_on_a_synthetic_table_scores_the_truth(tmp_path):
    """End to end: a 4-member population of the synthetic table; the truth section's member
    means equal the localisation metric recomputed on the report's kept maps."""
    import evaluate
    import train
    from evaluators.metrics.localisation import relevance_rank_accuracy

    trained = train.main(["--config", "configs/population.yaml", "--data", "SyntheticTableDataModule",
                          "--data.n_rows", "400", "--model.size", "4", "--model.hidden", "[8]", "--model.lr", "0.01",
                          "--trainer.max_epochs", "2", "--log_to", "none", "--trainer.enable_progress_bar", "false",
                          "--output_dir", str(tmp_path / "runs")])  # fmt: skip
    out = tmp_path / "reports"
    report = evaluate.main(["report", "--population", trained["population"], "--output_dir", str(out), "--set",
                            "n_points=20", "--set", "explainers=[saliency, input_x_gradient]", "--set",
                            "n_bootstrap=50", "--set", "infidelity_samples=5", "--set", "device=cpu", "--set",
                            "log_to=none"])  # fmt: skip
    truth = report["sections"]["truth"]
    assert truth["available"] and truth["metrics"] == list(ROWS.truth_metrics)
    (run_dir,) = out.iterdir()
    kept = torch.load(run_dir / "maps" / "saliency.pt", weights_only=True)["maps"]  # (M, N, d)
    mask = torch.zeros(kept.shape[1:], dtype=torch.bool)
    mask[:, :6] = True  # the default table's six relevant features
    by_hand = torch.stack([relevance_rank_accuracy(m.abs(), mask).double().mean() for m in kept])
    got = truth["by_metric"]["relevance_rank_accuracy"]["candidates"]["saliency"]["mean"]
    assert got == pytest.approx(by_hand.mean().item(), abs=1e-12)
    assert "truth: closest by ground_truth_agreement" in report["summary"]["text"]
    assert "Against the ground truth" in (run_dir / "report.html").read_text()
