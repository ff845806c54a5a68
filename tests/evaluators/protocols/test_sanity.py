"""``evaluate.py sanity`` (Adebayo et al.'s model randomisation and the random-logit test) end to
end on a tiny small-CNN run and a tiny German Credit MLP made here: the report's numbers against
scipy and scikit-image on maps recomputed by hand, resuming, and bad input."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from skimage.metrics import structural_similarity

import evaluate
import train
from evaluators.inputs.runs import load_run
from evaluators.maps import explain
from foundation.modality import reduce_map
from evaluators.protocols import sanity
from evaluators.sanity import other_classes, randomised_models
from foundation.errors import InputError
from lightning_modules.interface import default_classes
from tests.datamodules.test_images import make_folder
from tests.support.wandb_runs import assert_logged

QUIET = ["--log_to", "none", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--trainer.max_epochs", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory) -> Path:
    """A train.py run of the small CNN on a folder of 3 classes of 32x32 PNGs (12 test images), 2 steps."""
    tmp = tmp_path_factory.mktemp("sanity_cnn")
    make_folder(tmp / "tiny", size=32)
    train.main(["--config", "configs/images/cifar10_resnet8.yaml", "--model.arch", "small_cnn", "--data.root",
                str(tmp / "tiny"), "--data.cache_dir", str(tmp / "cache"), "--data.batch_size", "4",
                "--trainer.accelerator", "cpu", "--trainer.limit_train_batches", "2", *QUIET,
                "--output_dir", str(tmp / "runs"), "--run_name", "cnn"])  # fmt: skip
    return tmp / "runs" / "tiny" / "cnn"


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory) -> Path:
    """A train.py run of German Credit's MLP, one epoch."""
    tmp = tmp_path_factory.mktemp("sanity_mlp")
    train.main([*QUIET, "--output_dir", str(tmp / "runs"), "--run_name", "g"])
    return tmp / "runs" / "german" / "g"


def config(tmp_path: Path, run: Path, **extra) -> Path:
    cfg = {"run": str(run), "n_inputs": 6, "explainers": {"saliency": {}, "gradcam": {}}, "mode": "both",
           "log_to": "none", "device": "cpu", "n_figure": 2, "output_dir": str(tmp_path / "out"), **extra}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "sanity.yaml"
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return path


def report_dir(tmp_path: Path) -> Path:
    (folder,) = (tmp_path / "out").iterdir()
    return folder


@pytest.fixture(scope="module")
def fresh(cnn_run, tmp_path_factory) -> tuple[dict, Path]:
    """An uninterrupted run of both modes, saliency and GradCAM, 6 inputs, seed 3: its summary and folder."""
    tmp = tmp_path_factory.mktemp("sanity_fresh")
    summary = evaluate.main(["sanity", "--config", str(config(tmp, cnn_run, seed=3, log_to="wandb_offline"))])
    return summary, report_dir(tmp)


def test_wandb_run_holds_the_similarity_table_scalars_and_figures(cnn_run, fresh):
    summary, folder = fresh
    last = summary["similarity"]["cascading"]["gradcam"]["ssim"][-1]
    scalars = {f"sanity/cascading/{last['stage']}/gradcam/ssim/mean": last["mean"]}
    assert_logged(folder, "sanity", cnn_run, scalars, ["sanity"], ["similarity_cascading", "maps_independent"])


def read_csv(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def hand_maps(model, x, target, name: str, **options) -> np.ndarray:
    """One explainer's maps (N, H, W) summed over channels, float64, explained as the protocol explains."""
    return reduce_map(explain(model, x, name, target=target, **options).detach(), "sum").double().numpy()


def test_report_equals_scipy_and_skimage_on_maps_recomputed_by_hand(cnn_run, fresh):
    summary, folder = fresh
    for name in ("sanity.json", "sanity.csv", "random_logit.csv", "table.md", "maps_cascading.png",
                 "maps_independent.png", "similarity_cascading.png", "similarity_independent.png"):
        assert (folder / name).is_file(), name
    model, data, _ = load_run(cnn_run)
    data.setup("test")
    x, _ = data.probe(6, "test")  # spread through the split as every protocol takes them
    target = default_classes(model, x)  # the original model's class, explained at every stage
    layers = [n for n, m in model.named_modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert summary["stages"]["cascading"] == ["original", *layers[::-1]]  # from the top layer down
    rows = {(r["mode"], r["stage"], r["explainer"], r["measure"]): r for r in read_csv(folder / "sanity.csv")}
    assert len(rows) == 2 * 4 * 2 * 4  # modes x stages x explainers x measures
    for mode, s in (("cascading", 2), ("independent", 2), ("cascading", 3)):
        stage, randomised = [(n, copy.deepcopy(m)) for n, m in randomised_models(model, mode, 3)][s - 1]
        original = hand_maps(model, x, target, "saliency", seed=3)
        after = hand_maps(randomised, x, target, "saliency", seed=3)
        rho = np.array([spearmanr(np.abs(a).ravel(), np.abs(b).ravel())[0] for a, b in zip(after, original)])
        ssim = np.array([structural_similarity(a, b, data_range=max(a.max(), b.max()) - min(a.min(), b.min()))
                         for a, b in zip(after, original)])  # fmt: skip
        for measure, values in (("spearman_abs", rho), ("ssim", ssim)):
            row = rows[mode, stage, "saliency", measure]
            assert float(row["mean"]) == pytest.approx(values.mean(), abs=1e-9), (mode, stage, measure)
            assert float(row["ci95"]) == pytest.approx(1.959964 * values.std(ddof=1) / np.sqrt(6), abs=1e-9)
            assert int(row["n"]) == 6
    entry = summary["similarity"]["cascading"]["saliency"]["spearman"][0]
    assert entry["stage"] == "original" and entry["mean"] == pytest.approx(1.0, abs=1e-12)
    assert json.loads((folder / "sanity.json").read_text())["similarity"] == summary["similarity"]


def test_random_logit_compares_a_random_other_class_with_the_explained_one(cnn_run, fresh):
    summary, folder = fresh
    model, data, _ = load_run(cnn_run)
    data.setup("test")
    x, _ = data.probe(6, "test")
    target = default_classes(model, x)
    other = other_classes(target, 3, 3)  # the random other class of each input, from the config's seed
    assert bool((other != target).all())
    own, others = hand_maps(model, x, target, "saliency", seed=3), hand_maps(model, x, other, "saliency", seed=3)
    rho = np.array([spearmanr(a.ravel(), b.ravel())[0] for a, b in zip(others, own)])
    row = {r["measure"]: r for r in read_csv(folder / "random_logit.csv") if r["explainer"] == "saliency"}
    assert float(row["spearman"]["mean"]) == pytest.approx(rho.mean(), abs=1e-9)
    assert summary["random_logit"]["saliency"]["spearman"]["n"] == 6


def test_an_interrupted_run_resumes_without_recomputing_finished_work(cnn_run, fresh, tmp_path, monkeypatch):
    stage_scores, calls = sanity.stage_scores, []

    def interrupted(*args, **kwargs):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(args[3:5])
        return stage_scores(*args, **kwargs)

    monkeypatch.setattr(sanity, "stage_scores", interrupted)
    with pytest.raises(SystemExit):
        evaluate.main(["sanity", "--config", str(config(tmp_path, cnn_run, seed=3))])
    folder = report_dir(tmp_path)
    assert len(list((folder / "similarities").iterdir())) == 3 and not (folder / "sanity.json").exists()
    again = []
    monkeypatch.setattr(sanity, "stage_scores", lambda *a, **k: again.append(a[3:5]) or stage_scores(*a, **k))
    resumed = evaluate.main(["sanity", "--resume", str(folder)])
    assert again == [("independent", "gradcam")]  # only the unfinished mode x explainer is computed again
    assert resumed["similarity"] == fresh[0]["similarity"] and resumed["random_logit"] == fresh[0]["random_logit"]


def test_a_tabular_run_takes_the_spearman_measures(mlp_run, tmp_path):
    summary = evaluate.main(["sanity", "--config", str(config(
        tmp_path, mlp_run, explainers={"saliency": {}, "integrated_gradients": {"baselines": "mean"}}))])
    assert summary["measures"] == ["spearman_abs", "spearman"]
    model, _, _ = load_run(mlp_run)
    layers = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    assert summary["stages"]["independent"] == ["original", *layers[::-1]]
    folder = report_dir(tmp_path)
    assert (folder / "similarity_cascading.png").is_file() and not (folder / "maps_cascading.png").exists()
    for entries in summary["similarity"]["cascading"]["saliency"].values():
        assert entries[0]["mean"] == pytest.approx(1.0) and all(-1 <= e["mean"] <= 1 for e in entries)


def test_smooth_and_efficient_mprt_beside_the_modes(mlp_run, tmp_path):
    """Options smooth_mprt and efficient_mprt: the pseudo-mode smooth_mprt (bottom up, denoised
    maps) and the efficient MPRT's numbers equal ``evaluators.sanity``'s on the same inputs."""
    from evaluators.sanity import efficient_mprt, model_randomisation

    summary = evaluate.main(["sanity", "--config", str(config(
        tmp_path, mlp_run, explainers={"saliency": {}}, mode="cascading", smooth_mprt=True, smooth_samples=3,
        smooth_noise=0.2, efficient_mprt=True, n_bins=20, random_logit=False))])  # fmt: skip
    model, data, _ = load_run(mlp_run)
    layers = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    assert list(summary["stages"]) == ["cascading", "smooth_mprt"]
    assert summary["stages"]["smooth_mprt"] == ["original", *layers]  # bottom up
    data.setup("test")
    x, _ = data.probe(6, "test")  # as every protocol takes them
    target = default_classes(model, x)
    direct = model_randomisation(model, x, target, ["saliency"], "bottom_up", ["spearman_abs"], seed=0, n_samples=3,
                                 noise_magnitude=0.2)  # fmt: skip
    got = [e["mean"] for e in summary["similarity"]["smooth_mprt"]["saliency"]["spearman_abs"][1:]]
    np.testing.assert_allclose(got, direct.mean()[0][:, 0, 0], rtol=0, atol=1e-12)
    entropy = efficient_mprt(model, x, target, ["saliency"], seed=0, n_bins=20)
    got = summary["efficient_mprt"]["saliency"]["scores"]["mean"]
    assert got == pytest.approx(entropy.mean()[0][0].item(), abs=1e-12)
    table = (report_dir(tmp_path) / "table.md").read_text()
    assert "### smooth_mprt: spearman_abs" in table and "### efficient MPRT" in table
    assert len(read_csv(report_dir(tmp_path) / "efficient_mprt.csv")) == 3


@pytest.mark.parametrize("extra, message", [
    ({"explainers": {"saliency": {}, "lime": {}}}, r"unknown explainer\(s\) \['lime'\]"),
    ({"measures": ["spearman", "pearson"]}, r"unknown measure\(s\) \['pearson'\]"),
    ({"mode": "cascade"},
     r"option mode='cascade'; expected one of \['cascading', 'independent', 'bottom_up', 'both'\]"),
    ({"n_inputs": 13}, r"option n_inputs=13: the test split has 12 images"),
])  # fmt: skip
def test_bad_image_options_are_named_before_any_work(cnn_run, tmp_path, extra, message):
    with pytest.raises(InputError, match=message):
        evaluate.main(["sanity", "--config", str(config(tmp_path, cnn_run, **extra))])
    assert not (tmp_path / "out").exists()  # no report folder left behind


def test_a_tabular_run_refuses_the_image_measures(mlp_run, tmp_path):
    cfg = config(tmp_path, mlp_run, measures=["spearman", "ssim", "hog_pearson"])
    with pytest.raises(InputError, match=r"measures: \['ssim', 'hog_pearson'\] compare 2-D image maps.*tabular"):
        evaluate.main(["sanity", "--config", str(cfg)])
    assert not (tmp_path / "out").exists()
