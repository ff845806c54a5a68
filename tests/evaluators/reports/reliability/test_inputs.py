"""The report on an image population, with no config file (configs/report/image_folder.yaml is
the default): a folder of three tiny ResNet-8 runs that differ only in their seed, and a
population of a user's own network assembled from three state dicts; the inputs, the class
explained and the accuracies against an independent recomputation, the maps summed over
channels, one per pixel, and the files (page, report.json, W&B offline run)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml

import evaluate
import train
from evaluators.inputs.assemble import main as assemble_main
from evaluators.inputs.image_members import load_image_members
from evaluators.maps import explain
from tests.datamodules.test_images import make_folder
from tests.evaluators.reports.reliability.test_protocol import strict_json
from tests.support.wandb_runs import records
from tests.support.user_nets import TinyCNN


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


@pytest.fixture(scope="module")
def own_population(tmp_path_factory) -> tuple[Path, list[TinyCNN]]:
    """A user's own image network (``tests.support.user_nets.TinyCNN``): three members saved as
    state dicts (weights drawn from seeds 0-2), assembled with their class and a data config of
    a tiny folder of 16x16 PNGs (3 classes, 12 training and 12 test images) into a population file."""
    tmp = tmp_path_factory.mktemp("own_report")
    make_folder(tmp / "pics", size=16)
    config = tmp / "data.yaml"
    config.write_text(yaml.safe_dump({"data": {"class_path": "datamodules.ImageFolderDataModule", "init_args": {
        "root": str(tmp / "pics"), "cache_dir": str(tmp / "cache"), "batch_size": 4}}}))  # fmt: skip
    nets, files = [], []
    for seed in range(3):
        torch.manual_seed(seed)
        nets.append(TinyCNN(num_classes=3).eval())
        files.append(tmp / f"member{seed}.pt")
        torch.save(nets[-1].state_dict(), files[-1])
    pop = tmp / "pop.pt"
    assemble_main(["--out", str(pop), "--data_config", str(config), "--model_class", "tests.support.user_nets.TinyCNN",
                   "--model_args", "{num_classes: 3}", *map(str, files)])  # fmt: skip
    return pop, nets


def finite_numbers(value, place: str = "report") -> list[str]:
    """The places of the numbers in ``value`` (nested mappings and lists) that are not finite (null
    stands for "none", e.g. no number of members settles the ranking)."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in finite_numbers(v, f"{place}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in finite_numbers(v, f"{place}[{i}]")]
    return [place] if isinstance(value, float) and not math.isfinite(value) else []


def test_report_of_a_user_s_own_image_networks_with_no_config(own_population, tmp_path):
    """``evaluate.py report --population <assembled file>`` with the default image config: the page,
    report.json (every number of its sections finite), the W&B offline run with the scalars; the
    accuracies and member 0's saliency maps against the user's own networks, recomputed here."""
    pop, nets = own_population
    out = tmp_path / "reports"
    report = evaluate.main(["report", "--population", str(pop), "--output_dir", str(out)])
    (run_dir,) = out.iterdir()
    assert (run_dir / "report.html").is_file() and "Recommended: " in (run_dir / "summary.txt").read_text()
    written = strict_json(run_dir / "report.json")
    assert "undefined" not in written and finite_numbers(written["sections"]) == []
    assert written["population"]["n_members"] == 3 and written["population"]["input_shape"] == [3, 16, 16]
    assert written["population"]["n_points"] == 12  # the default 100 images: the 12 the test split holds
    (run_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    logged = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for record in records(run_file)
              if record.WhichOneof("record_type") == "history" for item in record.history.item}
    deltas = {k: v for k, v in logged.items() if k.startswith("sanity/") and k.endswith("/delta")}
    assert len(deltas) == 5 and "sanity/aggregate:mean/delta" in deltas  # 4 explainers and the one aggregate
    assert all(math.isfinite(v) for v in deltas.values())
    _, _, data = load_image_members(pop, torch.device("cpu"))
    x, y = data.probe(12, "test")
    with torch.no_grad():
        mean = torch.stack([net(x).softmax(-1) for net in nets]).mean(0)
        accuracies = [(net(x).argmax(-1) == y).double().mean().item() for net in nets]
    assert report["population"]["accuracy"] == pytest.approx(accuracies)
    x.requires_grad_(True)
    nets[0](x).gather(1, mean.argmax(-1)[:, None]).sum().backward()
    unit = torch.load(run_dir / "maps" / "saliency.pt", weights_only=True)
    assert torch.allclose(unit["maps"][0].float(), x.grad.sum(1), atol=1e-6)
