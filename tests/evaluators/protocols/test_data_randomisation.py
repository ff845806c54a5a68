"""Training on permuted labels through train.py (the option itself: tests/datamodules/test_label_permutation.py),
the training accuracy train.py records, and the data randomisation protocol (``evaluate.py data_randomisation``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from scipy.stats import spearmanr
from skimage.metrics import structural_similarity

import evaluate
import train
from evaluators.inputs.runs import load_run
from evaluators.maps import explain
from foundation.errors import InputError
from lightning_modules.population_io import load_population, population_datamodule
from tests.datamodules.test_images import make_folder
from tests.support.wandb_runs import assert_logged


# --- train.py: recorded in the config, the same after a resume, the training accuracy ----------
def test_train_py_records_the_permutation_resumes_with_it_and_records_training_accuracy(tmp_path):
    args = ["--config", "configs/german.yaml", "--model.hidden", "[8]", "--data.permute_labels", "5",
            "--log_to", "none", "--output_dir", str(tmp_path), "--run_name", "perm",
            "--trainer.enable_progress_bar", "false"]  # fmt: skip
    train.main([*args, "--trainer.max_epochs", "1"])
    run = tmp_path / "german" / "perm"
    assert yaml.safe_load((run / "config.yaml").read_text())["data"]["init_args"]["permute_labels"] == 5
    metrics = train.main(["--resume", str(run), "--trainer.max_epochs", "3", "--log_to", "none",
                          "--trainer.enable_progress_bar", "false"])  # fmt: skip
    assert metrics["epochs"] == 3 and metrics["data"]["permuted_train_labels"] == 5
    model, data, _ = load_run(run)
    x, y = data.train_tensors
    true_y = data._arrays["y_train"]
    order = torch.randperm(len(true_y), generator=torch.Generator().manual_seed(5))
    assert torch.equal(y, true_y[order])
    with torch.no_grad():
        by_hand = (model(x).argmax(-1) == y).double().mean().item()
    assert metrics["train_acc"] == pytest.approx(by_hand, abs=1e-6)
    assert abs(by_hand - (model(x).argmax(-1) == true_y).double().mean().item()) > 1e-3  # not the true labels'


def test_a_population_records_each_members_training_accuracy(tmp_path):
    metrics = train.main(["--config", "configs/population.yaml", "--model.size", "3", "--model.hidden", "[8]",
                          "--population.chunk_size", "2", "--data.permute_labels", "0", "--trainer.max_epochs", "2",
                          "--log_to", "none", "--output_dir", str(tmp_path), "--run_name", "p",
                          "--trainer.enable_progress_bar", "false"])  # fmt: skip
    population, payload = load_population(metrics["population"])
    data = population_datamodule(payload, None)
    x, y = data.train_tensors
    with torch.no_grad():
        by_hand = (population(x).argmax(-1) == y).double().mean(1)
    recorded = torch.tensor(payload["metadata"]["member_train_acc"], dtype=torch.float64)
    torch.testing.assert_close(recorded, by_hand, atol=1e-6, rtol=0)
    assert metrics["train_acc_mean"] == pytest.approx(by_hand.mean().item(), abs=1e-6)
    rows = (Path(metrics["run_dir"]) / "members.csv").read_text().split()
    assert rows[0] == "seed,test_acc,kept,train_acc"
    assert [float(r.split(",")[3]) for r in rows[1:]] == pytest.approx(by_hand.tolist(), abs=1e-6)


# --- the protocol ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def german_pair(tmp_path_factory) -> dict[str, Path]:
    """Two populations of 2 MLPs on German Credit, true and permuted labels (8 epochs of 16 steps:
    about 90 % training accuracy on the permuted labels)."""
    out = tmp_path_factory.mktemp("german_pair")
    runs = {}
    for name, extra in (("true", []), ("permuted", ["--data.permute_labels", "0"])):
        train.main(["--config", "configs/population.yaml", "--model.size", "2", "--model.hidden", "[32]",
                    "--model.lr", "2e-2", "--data.batch_size", "50", "--trainer.max_epochs", "8", "--log_to", "none",
                    "--output_dir", str(out), "--run_name", name,
                    "--trainer.enable_progress_bar", "false", *extra])  # fmt: skip
        runs[name] = out / "german" / name
    return runs


def protocol_config(tmp_path: Path, true: Path, permuted: Path, **options) -> Path:
    config = {"true_labels": str(true), "permuted_labels": str(permuted), "n_inputs": 20, "device": "cpu",
              "output_dir": str(tmp_path / "reports"), **options}  # fmt: skip
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_tabular_protocol_scores_are_spearman_of_the_paired_maps(german_pair, tmp_path):
    config = protocol_config(tmp_path, german_pair["true"], german_pair["permuted"],
                             explainers=["saliency", "input_x_gradient"])  # fmt: skip
    summary = evaluate.main(["data_randomisation", "--config", str(config)])
    sides = {name: load_population(german_pair[name] / "population.pt") for name in ("true", "permuted")}
    data = population_datamodule(sides["true"][1], None)
    x, y = data.test_tensors[0][:20], data.test_tensors[1][:20]
    for row in summary["rows"]:
        scores = []
        for k in range(2):
            a, b = (explain(sides[n][0].member(k), x, row["explainer"], target=y).detach().numpy() for n in sides)
            if row["measure"] == "spearman_abs":
                a, b = np.abs(a), np.abs(b)
            scores.append([spearmanr(a[i], b[i]).statistic for i in range(20)])
        scores = np.array(scores)
        assert row["mean"] == pytest.approx(scores.mean(), abs=1e-9)
        assert row["ci95_members"] == pytest.approx(1.959964 * scores.mean(1).std(ddof=1) / np.sqrt(2), abs=1e-5)
        assert row["mean"] < 0.8  # trained on other labels: other maps
    accuracy = summary["accuracy"]
    assert accuracy["permuted"]["permute_labels"] == 0 and accuracy["true"]["permute_labels"] is None
    assert accuracy["permuted"]["train_acc_mean"] > 0.8  # memorised the permuted labels, mostly
    for name in sides:  # the accuracies train.py recorded, measured again by the protocol
        assert accuracy[name]["train_acc"] == pytest.approx(sides[name][1]["metadata"]["member_train_acc"], abs=1e-6)
        assert accuracy[name]["test_acc"] == pytest.approx(sides[name][1]["member_test_acc"], abs=1e-6)
    report = next((tmp_path / "reports").iterdir())
    assert json.loads((report / "data_randomisation.json").read_text())["rows"] == summary["rows"]
    assert (report / "data_randomisation.csv").read_text().count("\n") == 5
    assert (report / "similarity.png").stat().st_size > 1000
    row = summary["rows"][0]  # logged by default (offline in the tests), in the true-label population's group
    assert_logged(report, "data_randomisation", german_pair["true"], {
        f"data_randomisation/{row['explainer']}/{row['measure']}/mean": row["mean"]}, ["data_randomisation"],
        ["similarity"])  # fmt: skip


def test_protocol_gives_similarity_one_when_the_labels_were_not_permuted(german_pair, tmp_path):
    """The broken variant: a "permuted" model that saw the true labels is the true model itself."""
    config = protocol_config(tmp_path, german_pair["true"], german_pair["true"], explainers=["saliency"])
    summary = evaluate.main(["data_randomisation", "--config", str(config)])
    assert [r["mean"] for r in summary["rows"]] == pytest.approx([1.0, 1.0], abs=1e-12)


def test_protocol_refuses_bad_options(german_pair, tmp_path):
    for options, message in (({"explainers": ["nope"]}, "unknown"), ({"measures": ["ssim"]}, "tabular maps"),
                             ({"explainers": ["gradcam"]}, "takes")):  # fmt: skip
        with pytest.raises(InputError, match=message):
            evaluate.main(["data_randomisation", "--config", str(protocol_config(tmp_path, german_pair["true"],
                                                                                 german_pair["permuted"], **options))])


def test_image_protocol_scores_maps_and_grid(tmp_path):
    make_folder(tmp_path / "data", classes=("a", "b", "c"), n=4, size=24)
    runs = {}
    for name, extra in (("true", []), ("permuted", ["--data.permute_labels", "1"])):
        train.main(["--config", "configs/images/cifar10_resnet8.yaml", "--model.arch", "small_cnn",
                    "--data.root", str(tmp_path / "data"), "--data.cache_dir", str(tmp_path / "cache"),
                    "--data.batch_size", "4", "--data.random_crop_padding", "0", "--data.horizontal_flip", "false",
                    "--trainer.max_epochs", "1", "--trainer.accelerator", "cpu", "--log_to", "none",
                    "--output_dir", str(tmp_path / "runs"), "--run_name", name,
                    "--trainer.enable_progress_bar", "false", *extra])  # fmt: skip
        runs[name] = tmp_path / "runs" / "data" / name
    config = protocol_config(tmp_path, runs["true"], runs["permuted"], n_inputs=4, n_grid_images=2,
                             explainers=["saliency", "gradcam"])  # fmt: skip
    summary = evaluate.main(["data_randomisation", "--config", str(config)])
    assert summary["measures"] == ["spearman_abs", "spearman", "ssim", "hog_pearson"] and summary["pairs"] == 1
    models = {name: load_run(path)[0] for name, path in runs.items()}
    data = load_run(runs["true"])[1]
    data.setup("test")
    x, y = data.probe(4, "test")
    a, b = (explain(models[n], x, "saliency", target=y).sum(1).detach().double().numpy() for n in ("true", "permuted"))
    ssim = [structural_similarity(a[i], b[i], data_range=max(a[i].max(), b[i].max()) - min(a[i].min(), b[i].min()))
            for i in range(4)]  # fmt: skip
    row = next(r for r in summary["rows"] if r["explainer"] == "saliency" and r["measure"] == "ssim")
    assert row["mean"] == pytest.approx(np.mean(ssim), abs=1e-6) and row["nan"] == 0
    assert row["ci95_members"] is None  # one model a side: no interval over members
    report = next((tmp_path / "reports").iterdir())
    assert (report / "maps.png").stat().st_size > 1000
    assert summary["accuracy"]["permuted"]["permute_labels"] == 1


def test_protocol_refuses_two_sides_of_different_data(german_pair, tmp_path):
    train.main(["--config", "configs/population.yaml", "--model.size", "2", "--model.hidden", "[8]",
                "--data", "datamodules.TwoMoonsDataModule", "--trainer.max_epochs", "1", "--log_to", "none",
                "--output_dir", str(tmp_path), "--run_name", "moons",
                "--trainer.enable_progress_bar", "false"])  # fmt: skip
    moons = next(tmp_path.glob("*/moons"))
    config = protocol_config(tmp_path, german_pair["true"], moons, explainers=["saliency"])
    with pytest.raises(InputError, match="different test inputs"):
        evaluate.main(["data_randomisation", "--config", str(config)])
