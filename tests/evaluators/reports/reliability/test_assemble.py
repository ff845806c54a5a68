"""The report's additions end to end (``assemble.report_sections`` through ``evaluate.py
report``): a population of 6 MLPs of a CSV table and a population of the same table trained on
permuted labels. The data-randomisation verdict against a recomputation from the kept maps
(scipy's Spearman of |maps|, the t quantile); the ensembles' SA@k against Ley et al.'s SA@k by
hand on the ensembles built by the ensemble registry (``build_ensemble(..., "average", ...)``)
and explained again; the aggregates' deletion scores against the metric run on the aggregate
maps merged by hand; the summary, the page and ``report.json`` holding all three."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr, t as student_t

import evaluate
import train
from evaluators.maps import explain
from evaluators.metrics.registry import score
from foundation.errors import InputError
from lightning_modules import load_population
from lightning_modules.ensembles import build_ensemble
from lightning_modules.population_io import population_datamodule
from tests.entry_points.test_own_table import data_args, write_table
from tests.evaluators.reports.reliability.test_protocol import strict_json, top_k_sign_agreement

N = 20
OPTIONS = ["--set", f"n_points={N}", "--set", "explainers=[saliency, input_x_gradient]", "--set", "n_bootstrap=50",
           "--set", "infidelity_samples=5", "--set", "device=cpu", "--set", "log_to=none",
           "--set", "aggregators={mean: {}, ucb: {}}", "--set", "ensemble_size=2"]  # fmt: skip


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[dict, Path, str]:
    out = tmp_path_factory.mktemp("assemble")
    path = write_table(out / "loans.csv", 2, n=150)
    common = ["--config", "configs/population.yaml", *data_args(path), "--model.size", "6", "--model.hidden", "[8]",
              "--model.lr", "0.01", "--trainer.max_epochs", "2", "--log_to", "none",
              "--trainer.enable_progress_bar", "false"]  # fmt: skip
    real = train.main([*common, "--output_dir", str(out / "real")])["population"]
    permuted = train.main([*common, "--data.permute_labels", "1", "--output_dir", str(out / "permuted")])["population"]
    summary = evaluate.main(["report", "--population", real, "--output_dir", str(out / "reports"), *OPTIONS,
                             "--set", f"permuted_population={permuted}"])  # fmt: skip
    (run_dir,) = (out / "reports").iterdir()
    return summary, run_dir, real


def spearman_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean([spearmanr(np.abs(a[i]), np.abs(b[i]))[0] for i in range(len(a))]))


def test_data_randomisation_verdict_by_hand(report):
    summary, run_dir, _ = report
    section = summary["sections"]["sanity"]["data_randomisation"]
    assert section["n_pairs"] == 6 and len(section["accuracy"]) == 6
    maps = torch.load(run_dir / "maps" / "saliency.pt", weights_only=True)["maps"].numpy()
    permuted = torch.load(run_dir / "maps" / "permuted" / "saliency.pt", weights_only=True)["maps"].numpy()
    verdict = section["explainers"]["saliency"]
    kept = verdict["members"]
    s_perm = np.array([spearman_abs(permuted[m], maps[m]) for m in kept])
    s_seed = np.array([np.mean([spearman_abs(maps[m], maps[b]) for b in kept if b != m]) for m in kept])
    delta = s_seed - s_perm
    half = student_t.ppf(0.975, len(kept) - 1) * delta.std(ddof=1) / np.sqrt(len(kept))
    assert verdict["per_member"]["permuted"] == pytest.approx(s_perm.tolist(), abs=1e-9)
    assert verdict["delta"]["mean"] == pytest.approx(delta.mean(), abs=1e-9)
    assert verdict["delta"]["ci95"] == pytest.approx(half, abs=1e-9)
    assert verdict["passed"] == bool(delta.mean() - half > 0)


def test_ensembles_agreement_against_explained_ensembles(report):
    """Each ensemble's map, the average ensemble of the registry explained again (saliency of
    its mean logit), then SA@k by hand per ensemble over the pairs it is in."""
    summary, run_dir, real = report
    section = summary["sections"]["agreement"]["ensembles"]
    assert section["available"] and section["size"] == 2 and section["n_ensembles"] == 3
    assert sorted(sum(section["sets"], [])) == list(range(6))
    population, payload = load_population(real)
    data = population_datamodule(payload)
    data.setup("test")
    x = data.test_tensors[0][:N]
    unit = torch.load(run_dir / "maps" / "saliency.pt", weights_only=True)
    target = torch.ones(N, dtype=torch.long)  # a binary table's positive class
    maps = [explain(build_ensemble(population, "average", s).eval(), x, "saliency", target=target).double().numpy()
            for s in section["sets"]]  # fmt: skip
    assert np.allclose(maps[0], unit["maps"][section["sets"][0]].mean(0).numpy(), atol=1e-6)
    k = summary["sections"]["agreement"]["k"]
    per_ensemble = [np.mean([top_k_sign_agreement(maps[a][i], maps[b][i], k) for b in range(3) if b != a
                             for i in range(N)]) for a in range(3)]  # fmt: skip
    sa = section["explainers"]["saliency"]["sa"]
    assert sa["per_member"] == pytest.approx(per_ensemble)
    half = student_t.ppf(0.975, 2) * np.std(per_ensemble, ddof=1) / np.sqrt(3)
    assert sa["mean"] == pytest.approx(np.mean(per_ensemble)) and sa["ci95"] == pytest.approx(half)


def test_aggregates_scored_like_explainers(report):
    """Member 0's ``aggregate:mean``: the mean of the two explainers' z-scored maps (by hand),
    scored by deletion towards the zero vector; the aggregate ranks beside the explainers."""
    summary, run_dir, real = report
    population, payload = load_population(real)
    data = population_datamodule(payload)
    data.setup("test")
    x = data.test_tensors[0][:N]
    z = []
    for name in ("saliency", "input_x_gradient"):
        m = torch.load(run_dir / "maps" / f"{name}.pt", weights_only=True)["maps"][0].numpy()
        sd = m.std(1, keepdims=True)
        z.append(np.where(sd > 0, (m - m.mean(1, keepdims=True)) / np.where(sd > 0, sd, 1), 0))
    merged = torch.tensor(np.mean(z, 0), dtype=torch.float32)
    target = torch.ones(N, dtype=torch.long)
    expected = score("deletion", population.member(0).eval(), x, merged, target, baseline="zero", seed=0)
    faithful = summary["sections"]["faithfulness"]["by_metric"]["deletion"]
    assert set(faithful["explainers"]) == {"saliency", "input_x_gradient", "aggregate:mean", "aggregate:ucb"}
    assert faithful["explainers"]["aggregate:mean"]["per_member"][0] == pytest.approx(
        expected.double().nanmean().item(), abs=1e-6)
    aggregates = summary["sections"]["faithfulness"]["aggregates"]
    assert aggregates["normalisation"] == "z" and aggregates["of"] == ["saliency", "input_x_gradient"]
    assert set(aggregates["aggregates"]["aggregate:mean"]) == {"agreement", "verdict", "data_randomisation"}


def test_summary_page_and_json_hold_the_additions(report):
    summary, run_dir, _ = report
    text = summary["summary"]["text"]
    assert "average ensembles of 2 members (3 disjoint)" in text and "trained on permuted labels" in text
    assert "aggregate:mean" in text and "δ permuted" in text
    row = next(r for r in summary["summary"]["rows"] if r["explainer"] == "saliency")
    assert row["agree_ensembles"]["mean"] == summary["sections"]["agreement"]["ensembles"]["explainers"][
        "saliency"]["sa"]["mean"]
    assert row["data_passed"] == summary["sections"]["sanity"]["data_randomisation"]["explainers"]["saliency"]["passed"]
    candidates = summary["summary"]["recommendation"]["candidates"]
    for name in candidates:
        assert row["passed"] if name == "saliency" else True
    written = strict_json(run_dir / "report.json")
    assert written["sections"]["faithfulness"]["aggregates"]["available"]
    html = (run_dir / "report.html").read_text()
    assert "Data randomisation" in html and "ensembles of 2" in html and "aggregate:ucb" in html


@pytest.mark.parametrize("setting, message", [
    ("aggregators={nonesuch: {}}", "option aggregators={'nonesuch': {}}; expected a mapping of pixel aggregators"),
    ("aggregators={ucb: {q: 3}}", "option aggregators: ucb: {'q': 3}; expected a mapping of some of ['eps']"),
    ("normalisation=max", "option normalisation='max'; expected one of"),
    ("ensemble_size=1", "option ensemble_size=1; expected an integer of at least 2"),
    ("permuted_population=nowhere.pt", "option permuted_population='nowhere.pt': no such file or folder"),
])  # fmt: skip
def test_bad_options_are_refused(report, tmp_path, setting, message):
    _, _, real = report
    with pytest.raises(InputError, match=re.escape(message)):
        evaluate.main(["report", "--population", real, "--output_dir", str(tmp_path / "r"), *OPTIONS, "--set", setting])
    assert not (tmp_path / "r").exists()
