"""A user's image folder and a stock torchvision network, no code of theirs (docs/your_data.md,
"An image folder, end to end"): torchvision's ResNet-18 trained as a ``lightning_modules.Classifier`` on a tiny
folder, a population of two seeds through the consistency protocol, one run through aggregation,
optimised aggregation, a small ROAR grid and the sanity checks, each read from the generic configs
``configs/<protocol>/image_folder.yaml`` at the smallest sizes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml

import evaluate
import train
from evaluators.inputs.image_members import load_image_members
from evaluators.inputs.runs import load_run
from evaluators.maps import explain
from foundation.modality import reduce_map
from evaluators.metrics.agreement_functional import separability
from tests.datamodules.test_images import make_folder
from tests.support import ROOT

QUIET = ["--log_to", "none", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2"]  # fmt: skip


def generic(protocol: str, tmp_path: Path, **sizes) -> Path:
    """configs/<protocol>/image_folder.yaml with ``sizes`` (the smallest) and outputs under tmp_path."""
    cfg = yaml.safe_load((ROOT / "configs" / protocol / "image_folder.yaml").read_text())
    cfg.update(device="cpu", output_dir=str(tmp_path / protocol), **sizes)
    path = tmp_path / f"{protocol}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def accuracy(model, x, y) -> float:
    with torch.no_grad():
        return (model(x).argmax(-1) == y).double().mean().item()


@pytest.fixture(scope="module")
def resnets(tmp_path_factory):
    """Two train.py runs of Classifier(torchvision.models.resnet18), seeds 0 and 1, on a folder of
    3 classes of 32x32 PNGs (12 training, 12 test images), in one folder: the population."""
    tmp = tmp_path_factory.mktemp("own_images")
    make_folder(tmp / "pics", size=32)
    for seed in (0, 1):
        train.main(["--data", "ImageFolderDataModule", "--data.root", str(tmp / "pics"), "--data.cache_dir",
                    str(tmp / "cache"), "--data.batch_size", "4", "--model", "lightning_modules.Classifier",
                    "--model.net", "torchvision.models.resnet18", "--seed_everything", str(seed), *QUIET,
                    "--output_dir", str(tmp / "members"), "--run_name", f"seed{seed}"])  # fmt: skip
    return tmp / "members"


def test_consistency_of_two_seeds_against_a_recomputation(resnets, tmp_path):
    config = generic("consistency", tmp_path, population=str(resnets), strategies=["single", "perturb"],
                     methods=["saliency"], n_models=[1], n_points=6, k=20, n_perturb=2, sigma=0.0,
                     n_accuracy_images=12)  # fmt: skip
    summary = evaluate.main(["consistency", "--config", str(config)])
    by = {(r["strategy"], r["metric"]): r for r in summary["rows"]}
    members, _, data = load_image_members(resnets, torch.device("cpu"))
    x, y = data.probe(6, "test")
    maps = [reduce_map(explain(m, x, "saliency", target=y), "sum").flatten(1).double() for m in members.members]
    c = 1 - 2 * abs(separability(maps[0], maps[1]) - 0.5)
    assert by[("single", "watson_c")]["mean"] == pytest.approx(c, abs=1e-9)
    cos = torch.nn.functional.cosine_similarity(maps[0], maps[1], dim=1)
    assert by[("single", "angular")]["mean"] == pytest.approx(torch.arccos(cos).mean().item(), abs=1e-5)
    assert by[("perturb", "sa")]["mean"] == pytest.approx(by[("single", "sa")]["mean"], abs=1e-9)  # sigma 0
    x_all, y_all = data.probe(12, "test")
    hand = sum(accuracy(m, x_all, y_all) for m in members.members) / 2
    assert by[("single", "sa")]["test_acc"] == pytest.approx(hand, abs=1e-9)


def test_a_population_of_identical_members_agrees_fully(resnets, tmp_path):
    twins = tmp_path / "twins"
    for name in ("a", "b"):
        shutil.copytree(resnets / "pics" / "seed0", twins / name)
    config = generic("consistency", tmp_path, population=str(twins), strategies=["single"], methods=["saliency"],
                     n_models=[1], n_points=6, k=20, n_accuracy_images=12)  # fmt: skip
    by = {(r["strategy"], r["metric"]): r["mean"] for r in evaluate.main(["consistency", "--config", str(config)])
          ["rows"]}  # fmt: skip
    assert by[("single", "sa")] == 1.0 and by[("single", "ssa")] == 1.0 and by[("single", "cdc_d")] == 1.0
    assert by[("single", "watson_c")] == 1.0  # a classifier cannot tell them apart: held-out accuracy 0.5
    assert by[("single", "angular")] == pytest.approx(0.0, abs=1e-3)


@pytest.mark.slow  # 8-40 s on this CPU, with the others beside it
def test_aggregation_and_optimised_on_one_run(resnets, tmp_path):
    run = str(resnets / "pics" / "seed0")
    config = generic("aggregation", tmp_path, run=run, n_inputs=4, steps=4, n_grid=2,
                     explainers={"saliency": {}, "gradcam": {}, "integrated_gradients": {"n_steps": 2}},
                     aggregators={"mean": {}, "ucb": {}}, normalisations=["z"], sweeps={"ucb": {"eps": [0.0]}})
    summary = evaluate.main(["aggregation", "--config", str(config)])
    assert summary["n_inputs"] == 4 and {"base/gradcam", "base/saliency", "agg/mean", "agg/ucb"} <= set(summary["rows"])
    config = generic("optimised", tmp_path, run=run, n_inputs=3, m_agg=4, m_eval=6, m_sens=3, stability_samples=3,
                     explainers={"saliency": {}, "input_x_gradient": {}})  # fmt: skip
    summary = evaluate.main(["optimised", "--config", str(config)])
    assert summary["n_inputs"] == 3


@pytest.mark.slow  # 8-40 s on this CPU, with the others beside it
def test_a_roar_grid_retrains_the_resnet(resnets, tmp_path):
    run = resnets / "pics" / "seed0"
    config = generic("roar", tmp_path, run=str(run), retrainings=1)
    summary = evaluate.main(["roar", "--config", str(config)])
    rows = {(r["estimator"], r["fraction"]): r for r in summary["rows"]}
    assert set(rows) == {(e, f) for e in ("saliency", "random") for f in (0.0, 0.5)}
    assert all(r["k"] == 1 for r in rows.values())
    model, data, _ = load_run(run)
    x, y = data.probe(12, "test")
    hand = accuracy(model.eval(), x, y)  # nothing removed: the clean model's own accuracy
    assert rows[("saliency", 0.0)]["no_retrain_acc"] == pytest.approx(hand, abs=1e-9)
    assert rows[("random", 0.0)]["no_retrain_acc"] == pytest.approx(hand, abs=1e-9)


@pytest.mark.slow  # 8-40 s on this CPU, with the others beside it
def test_the_generic_sanity_config_on_one_run(resnets, tmp_path):
    """configs/sanity/image_folder.yaml, the run named by --run (the config's path is not there)."""
    config = generic("sanity", tmp_path, n_inputs=2, n_figure=1)
    summary = evaluate.main(["sanity", "--config", str(config), "--run", str(resnets / "pics" / "seed0")])
    explainers = set(yaml.safe_load((ROOT / "configs/sanity/image_folder.yaml").read_text())["explainers"])
    assert set(summary["similarity"]["cascading"]) == explainers
    assert summary["measures"] == ["spearman_abs", "spearman", "ssim", "hog_pearson"]
