"""timm and torchvision networks by name (issue 42, item 6): ``--model.net timm.create_model
--model.net.model_name M --model.net.num_classes 10`` and a torchvision constructor with several
``--model.net.*`` options train from the command line on an image folder (16x16, 3 classes, two
batches), as a ``Classifier`` run and as a ``ModulePopulation``; the run goes through ``evaluate.py
run``, ``explain`` and a ROAR retraining, each population (a folder of two runs, a population
file) through the consistency protocol. Before, the first ended in "Option 'num_classes' is not
accepted" and a function's second option in jsonargparse's "unexpected keyword argument
'linked_targets'"."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml

import evaluate
from evaluators.inputs.runs import load_run
from lightning_modules.net_options import net_kwargs, one_net_option
from lightning_modules.population_io import load_population
from tests.support.helpers import assert_one_line_error, run_in_process
from tests.datamodules.test_images import make_folder
from tests.entry_points.test_own_images import generic

TIMM = ["--model.net", "timm.create_model", "--model.net.model_name", "test_resnet", "--model.net.num_classes", "10"]
TORCHVISION = ["--model.net", "torchvision.models.mobilenet_v3_small", "--model.net.num_classes", "3",
               "--model.net.dropout", "0.1"]  # fmt: skip
QUIET = ["--log_to", "none", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2"]  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """An image folder of 3 classes of 16x16 PNGs (12 training, 12 test images) and the train.py
    options that read it."""
    tmp = tmp_path_factory.mktemp("timm_torchvision")
    make_folder(tmp / "pics", size=16)
    return tmp


def train_args(tmp: Path, model: str, net: list[str], name: str, *more: str, output: str = "runs") -> list[str]:
    """train.py's options for ``model`` around ``net`` on the folder, run ``name`` under ``tmp/output``."""
    return ["--data", "ImageFolderDataModule", "--data.root", str(tmp / "pics"), "--data.cache_dir", str(tmp / "cache"),
            "--data.batch_size", "4", "--model", model, *net, *more, *QUIET, "--output_dir", str(tmp / output),
            "--run_name", name]  # fmt: skip


def train(tmp: Path, model: str, net: list[str], name: str, *more: str, output: str = "runs") -> Path:
    """A train.py run (in process) of ``model`` around ``net`` on the folder, under ``tmp/output``;
    its run folder."""
    result = run_in_process("train.py", *train_args(tmp, model, net, name, *more, output=output))
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp / output / "pics" / name


def consistency(population: Path, tmp: Path) -> dict:
    """The consistency protocol's ``single`` saliency rows on ``population`` (generic image config)."""
    config = generic("consistency", tmp, population=str(population), strategies=["single"], methods=["saliency"],
                     n_models=[1], n_points=4, k=20, n_accuracy_images=8)  # fmt: skip
    return {r["metric"]: r for r in evaluate.main(["consistency", "--config", str(config)])["rows"]}


def test_the_options_of_a_network_by_name_become_one_option():
    args = one_net_option(["--model", "lightning_modules.Classifier", *TIMM, "--model.lr", "0.1", "--seed_everything",
                           "1"])  # fmt: skip
    at = args.index("--model.net")
    assert args[:at] == ["--model", "lightning_modules.Classifier", "--model.lr", "0.1"]  # after every --model option
    assert json.loads(args[at + 1]) == {"class_path": "timm.create_model", "init_args": {"model_name": "test_resnet"},
                                        "dict_kwargs": {"num_classes": "10"}}  # a **kwargs option  # fmt: skip
    assert args[at + 2:] == ["--seed_everything", "1"]
    (spec,) = [json.loads(a) for a in one_net_option(TORCHVISION) if a.startswith("{")]
    assert spec == {"class_path": "torchvision.models.mobilenet_v3_small",  # (*, weights, progress, **kwargs)
                    "dict_kwargs": {"num_classes": "3", "dropout": "0.1"}}  # fmt: skip
    equals = one_net_option(["--model.net=timm.create_model", "--model.net.dict_kwargs.drop_rate=0.1"])
    assert equals == ["--model.net", '{"class_path": "timm.create_model", "dict_kwargs": {"drop_rate": "0.1"}}']
    for as_given in (["--model.net.model_name", "m"],  # a network named in a config file
                     ["--model.net", "m.Net", "--model.net.norm.init_args.eps", "1"]):  # an option of a nested class
        assert one_net_option(as_given) == as_given


@pytest.fixture(scope="module")
def timm_runs(folder) -> Path:
    """Two Classifier runs of timm's create_model, seeds 0 and 1, in one folder: a population."""
    for seed in (0, 1):
        train(folder, "lightning_modules.Classifier", TIMM, f"seed{seed}", "--seed_everything", str(seed),
              output="timm")
    return folder / "timm" / "pics"


def test_a_network_that_cannot_be_built_ends_in_one_line_naming_it(folder):
    unknown = ["--model.net", "timm.create_model", "--model.net.model_name", "no_such_net"]
    result = run_in_process("train.py", *train_args(folder, "lightning_modules.Classifier", unknown, "unknown"))
    assert_one_line_error(result, "building lightning_modules.Classifier from the options: Unknown model (no_such_net)")
    assert not (folder / "runs" / "pics" / "unknown").exists()


def test_a_timm_classifier_trains_and_goes_through_run_and_explain(timm_runs):
    run = timm_runs / "seed0"
    net = yaml.safe_load((run / "config.yaml").read_text())["model"]["init_args"]["net"]
    assert net["dict_kwargs"] == {"num_classes": 3, "in_chans": 3}  # the data's, over the 10 given
    result = run_in_process("evaluate.py", "run", str(run))
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads(result.stdout[result.stdout.index("{"):])
    assert metrics["test_acc"] == pytest.approx(json.loads((run / "metrics.json").read_text())["test_acc"])
    model, data, _ = load_run(run)
    assert tuple(model.eval()(data.probe(2, "test")[0]).shape) == (2, 3)
    result = run_in_process("evaluate.py", "explain", str(run), "--methods", "saliency,gradcam", "--n_images", "2",
                            "--log_to", "none")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(run.glob("explanations-*/explanations.png"))


def test_a_folder_of_timm_runs_goes_through_consistency(timm_runs, tmp_path):
    rows = consistency(timm_runs, tmp_path)
    assert 0.0 <= rows["sa"]["mean"] <= 1.0 and 0.0 <= rows["watson_c"]["mean"] <= 1.0


def test_roar_retrains_a_timm_run_from_its_network_config(timm_runs, tmp_path):
    run = timm_runs / "seed0"
    config = generic("roar", tmp_path, run=str(run), retrainings=1, fractions=[0.0], estimators={"random": {}},
                     trainer={"max_epochs": 1, "accelerator": "cpu"})  # fmt: skip
    (row,) = evaluate.main(["roar", "--config", str(config)])["rows"]
    model, data, _ = load_run(run)
    x, y = data.probe(12, "test")
    with torch.no_grad():
        clean = (model.eval()(x).argmax(-1) == y).double().mean().item()
    assert row["no_retrain_acc"] == pytest.approx(clean, abs=1e-9)  # nothing removed at fraction 0
    assert row["k"] == 1 and 0.0 <= row["retrain_mean"] <= 1.0  # retrained once: 3 logits, from its seed


@pytest.mark.parametrize("net", [TIMM, TORCHVISION], ids=["timm", "torchvision"])
def test_a_population_of_a_network_by_name_goes_through_consistency(folder, tmp_path, net):
    run = train(folder, "lightning_modules.ModulePopulation", net, f"pop-{net[1]}", "--model.size", "2")
    net_config = net_kwargs(yaml.safe_load((run / "config.yaml").read_text())["model"]["init_args"]["net"])
    assert net_config["init_args"]["num_classes"] == 3
    population, _ = load_population(run / "population.pt")
    assert population.size == 2 and population.seeds == [0, 1]
    x = torch.rand(2, 3, 16, 16)
    assert not torch.equal(population.member(0)(x), population.member(1)(x))  # each member from its own seed
    rows = consistency(run / "population.pt", tmp_path)
    assert 0.0 <= rows["sa"]["mean"] <= 1.0 and os.path.isdir(tmp_path / "consistency")
