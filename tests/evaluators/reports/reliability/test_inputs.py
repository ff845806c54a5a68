"""The report on an image population: a folder of three tiny ResNet-8 runs that differ only in
their seed, with no config file (configs/report/image_folder.yaml is the default): the inputs,
the class explained and the accuracies against an independent recomputation, and the maps
summed over channels, one per pixel."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import evaluate
import train
from evaluators.inputs.image_members import load_image_members
from evaluators.maps import explain
from tests.datamodules.test_images import make_folder


@pytest.fixture(scope="module")
def image_members(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("report_images")
    make_folder(tmp / "tiny", size=32)
    for seed in (0, 1, 2):
        train.main(["--config", "configs/images/cifar10_resnet8.yaml", "--data.root", str(tmp / "tiny"),
                    "--data.cache_dir", str(tmp / "cache"), "--data.batch_size", "4", "--trainer.accelerator", "cpu",
                    "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--log_to", "none",
                    "--trainer.enable_progress_bar", "false", "--output_dir", str(tmp / "members"),
                    "--run_name", f"seed{seed}", "--model.seed", str(seed)])  # fmt: skip
    return tmp / "members"


def test_report_of_an_image_folder_population(image_members, tmp_path):
    out = tmp_path / "reports"
    report = evaluate.main(["report", "--population", str(image_members), "--output_dir", str(out),
                            "--set", "n_points=6", "--set", "explainers=[saliency]", "--set", "n_accuracy_images=6",
                            "--set", "infidelity_samples=4", "--set", "n_bootstrap=20", "--set", "cascade_steps=2",
                            "--set", "device=cpu", "--set", "log_to=none"])  # fmt: skip
    (run_dir,) = out.iterdir()
    assert (run_dir / "report.html").is_file() and (run_dir / "report.json").is_file()
    info = report["population"]
    assert info["inputs"] == "images" and info["input_shape"] == [3, 32, 32] and info["map_units"] == 1024
    assert report["config"]["n_points"] == 6 and report["sections"]["agreement"]["k"] == 10
    members, _, data = load_image_members(image_members, torch.device("cpu"))
    x, y = data.probe(6, "test")
    with torch.no_grad():
        mean = torch.stack([m(x).softmax(-1) for m in members.members]).mean(0)
        accuracies = [(m(x).argmax(-1) == y).double().mean().item() for m in members.members]
    assert info["accuracy"] == pytest.approx(accuracies)
    unit = torch.load(run_dir / "maps" / "saliency.pt", weights_only=True)
    assert unit["maps"].shape == (3, 6, 32, 32) and len(unit["layers"]) == 2
    first = explain(members.members[0], x, "saliency", target=mean.argmax(-1)).sum(1).double()
    assert torch.allclose(unit["maps"][0], first, atol=1e-6)
