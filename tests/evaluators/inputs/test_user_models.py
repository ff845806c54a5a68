"""A user's own networks: trained by train.py's generic Classifier, read by the evaluators from
a run, a checkpoint, a TorchScript, a torch.export or a state-dict file, assembled into a
population for the consistency protocol, and the bad inputs of such models."""

from __future__ import annotations

import copy

import pytest
import pytorch_lightning as pl
import torch
import yaml

import evaluate
import train
from foundation.errors import InputError, run_entry_point
from evaluators.inputs.assemble import main as assemble_main
from evaluators.inputs.runs import load_run
from lightning_modules.population_io import load_population
from tests.datamodules.test_images import make_folder
from tests.support.user_nets import TinyCNN, UserLightning

QUIET = ["--log_to", "none", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2"]  # fmt: skip
CLASSIFIER = ["--model", "lightning_modules.Classifier"]


def accuracy(model, x, y) -> float:
    """The share of ``x`` that ``model`` classifies as ``y``, computed here by hand."""
    with torch.no_grad():
        return (model(x).argmax(-1) == y).double().mean().item()


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """A tiny 32x32 image folder (3 classes, 12 training and 12 test images) and a data config for it."""
    tmp = tmp_path_factory.mktemp("user_images")
    make_folder(tmp / "tiny", size=32)
    config = tmp / "data.yaml"
    config.write_text(yaml.safe_dump({"data": {"class_path": "datamodules.ImageFolderDataModule", "init_args": {
        "root": str(tmp / "tiny"), "cache_dir": str(tmp / "cache"), "batch_size": 4}}}))  # fmt: skip
    return tmp, config


@pytest.fixture(scope="module")
def cnn_run(images):
    """A train.py run of the generic Classifier around the user's TinyCNN on the image folder."""
    tmp, config = images
    train.main(["--config", str(config), *CLASSIFIER, "--model.net", "tests.support.user_nets.TinyCNN", *QUIET,
                "--output_dir", str(tmp / "runs"), "--run_name", "cnn"])  # fmt: skip
    return tmp / "runs" / "tiny" / "cnn"


def test_a_user_sequential_trains_on_a_table_and_its_run_reloads(tmp_path):
    metrics = train.main([*CLASSIFIER, "--model.net", "tests.support.user_nets.TableNet", "--model.net.hidden", "4",
                          *QUIET, "--output_dir", str(tmp_path), "--run_name", "table"])  # fmt: skip
    run = tmp_path / "german" / "table"
    net = yaml.safe_load((run / "config.yaml").read_text())["model"]["init_args"]["net"]
    assert net == {"class_path": "tests.support.user_nets.TableNet",
                   "init_args": {"in_features": 61, "hidden": 4, "num_classes": 2}}  # from the data
    model, data, _ = load_run(run)
    x, y = data.test_tensors
    reloaded = evaluate.main(["run", str(run)])
    assert metrics["test_acc"] == pytest.approx(accuracy(model, x, y), abs=1e-6)
    assert reloaded["test_acc"] == pytest.approx(accuracy(model, x, y), abs=1e-6)


def test_a_torchvision_resnet_trains_on_an_image_folder_with_the_data_s_classes(images):
    tmp, config = images
    metrics = train.main(["--config", str(config), *CLASSIFIER, "--model.net", "torchvision.models.resnet18", *QUIET,
                          "--output_dir", str(tmp / "runs"), "--run_name", "resnet"])  # fmt: skip
    run = tmp / "runs" / "tiny" / "resnet"
    assert yaml.safe_load((run / "config.yaml").read_text())["model"]["init_args"]["net"]["init_args"][
        "num_classes"] == 3  # fmt: skip
    model, data, _ = load_run(run)
    assert model.net.fc.out_features == 3
    x, y = data.probe(12, "test")
    assert metrics["test_acc"] == pytest.approx(accuracy(model, x, y), abs=1e-6)


def model_file(kind: str, run, net, x, folder):
    """The run's network written as a file of ``kind``, and the options that read it."""
    data = ["--data_config", str(run / "config.yaml")]
    if kind == "checkpoint":
        return run / "checkpoints" / "last.ckpt", []
    path = folder / f"{kind}.pt"
    if kind == "torchscript":
        torch.jit.save(torch.jit.script(net), path)
    elif kind == "export":
        batch = torch.export.Dim("batch")
        torch.export.save(torch.export.export(net, (x,), dynamic_shapes={"x": {0: batch}}), path)
    elif kind == "lightning":  # a user's own LightningModule's checkpoint, as Lightning writes one
        module = UserLightning(num_classes=3)
        module.model.load_state_dict(net.state_dict())
        torch.save({"pytorch-lightning_version": pl.__version__, "epoch": 1, "state_dict": module.state_dict(),
                    "hyper_parameters": dict(module.hparams)}, path)  # fmt: skip
        return path, [*data, "--model_class", "tests.support.user_nets.UserLightning"]
    else:
        torch.save(net.state_dict(), path)
        return path, [*data, "--model_class", "tests.support.user_nets.TinyCNN", "--model_args", "{num_classes: 3}"]
    return path, data


@pytest.mark.parametrize("kind", ["checkpoint", "lightning", "torchscript", "export", "state_dict"])
def test_each_model_file_gives_the_module_s_logits_and_accuracy(kind, cnn_run, tmp_path):
    model, data, _ = load_run(cnn_run)
    net = copy.deepcopy(model.net).eval()
    x, y = data.probe(12, "test")
    with torch.no_grad():
        expected = net(x)
    path, options = model_file(kind, cnn_run, net, x, tmp_path)
    keys = dict(zip(options[::2], options[1::2]))
    loaded, _, _ = load_run(path, model_class=keys.get("--model_class"), data_config=keys.get("--data_config"),
                            model_args=yaml.safe_load(keys.get("--model_args", "null")))  # fmt: skip
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), expected, rtol=1e-5, atol=1e-6)
    out = tmp_path / "metrics.json"
    tested = evaluate.main(["run", str(path), *options, "--out", str(out)])
    assert tested["test_acc"] == pytest.approx(accuracy(net, x, y), abs=1e-6) and out.is_file()


def test_a_population_assembled_from_three_user_state_dicts_runs_the_consistency_protocol(cnn_run, images, tmp_path):
    tmp, config = images
    model, data, _ = load_run(cnn_run)
    x, y = data.probe(12, "test")
    nets, files = [], []
    for k in range(3):  # three members: the trained network, its weights moved by seeded noise
        net = copy.deepcopy(model.net).eval()
        with torch.no_grad():
            generator = torch.Generator().manual_seed(k)
            for p in net.parameters():
                p.add_(0.3 * k * torch.randn(p.shape, generator=generator))
        nets.append(net)
        files.append(tmp_path / f"member-{k}.pt")
        torch.save(net.state_dict(), files[-1])
    pop = tmp_path / "pop.pt"
    assemble_main(["--out", str(pop), "--data_config", str(config), "--model_class", "tests.support.user_nets.TinyCNN",
                   "--model_args", "{num_classes: 3}", *map(str, files)])  # fmt: skip
    population, payload = load_population(pop)
    for i, net in enumerate(nets):
        with torch.no_grad():
            torch.testing.assert_close(population.member(i).eval()(x), net(x))
    assert payload["member_test_acc"] == pytest.approx([accuracy(net, x, y) for net in nets], abs=1e-6)
    settings = tmp_path / "consistency.yaml"
    settings.write_text(yaml.safe_dump({"population": str(pop), "strategies": ["single", "average"], "methods":
                                        ["saliency"], "n_models": [1], "n_sets": 3, "n_points": 4,
                                        "n_accuracy_images": 12, "n_background": 2, "device": "cpu",
                                        "output_dir": str(tmp_path / "reports")}))  # fmt: skip
    summary = evaluate.main(["consistency", "--config", str(settings)])
    rows = {(r["strategy"], r["metric"]): r for r in summary["rows"]}
    assert rows[("single", "sa")]["mean"] == rows[("average", "sa")]["mean"]  # an average of one member is the member
    assert rows[("single", "sa")]["test_acc"] == pytest.approx(sum(payload["member_test_acc"]) / 3, abs=1e-6)
    with pytest.raises(InputError, match="already exists"):  # never overwritten
        assemble_main(["--out", str(pop), *map(str, files)])
    runs = tmp_path / "runs.pt"  # members given as a Classifier run and its checkpoint: their network config
    assemble_main(["--out", str(runs), str(cnn_run), str(cnn_run / "checkpoints" / "last.ckpt")])
    population, _ = load_population(runs)
    with torch.no_grad():
        torch.testing.assert_close(population.member(1).eval()(x), model.eval()(x))


def test_a_model_whose_output_is_not_logits_is_named_and_leaves_nothing(tmp_path):
    with pytest.raises(InputError, match=r"TableNet|Flat.*shape \(32,\).*expected class logits"):
        train.main([*CLASSIFIER, "--model.net", "tests.support.user_nets.Flat", *QUIET, "--output_dir", str(tmp_path)])
    assert not any(tmp_path.iterdir())  # no run folder left behind
    flat = tmp_path / "flat.pt"
    torch.save(torch.nn.Linear(61, 1).state_dict(), flat)
    torch.save({"linear." + k: v for k, v in torch.load(flat, weights_only=True).items()}, flat)
    with pytest.raises(InputError, match=rf"{flat}: an output of shape \(3,\) for a batch of 3 inputs"):
        evaluate.main(["run", str(flat), "--model_class", "tests.support.user_nets.Flat",
                       "--model_args", "{in_features: 61}", "--data_config", "configs/german.yaml"])  # fmt: skip


def test_a_checkpoint_of_another_architecture_names_the_first_mismatching_key(cnn_run, tmp_path):
    path = tmp_path / "wide.pt"
    torch.save(TinyCNN(num_classes=3, width=8).state_dict(), path)
    with pytest.raises(InputError, match=rf"{path}: does not fit the network \(TinyCNN\): 'features.0.weight' is "
                                         r"\(8, 3, 3, 3\) in the file, \(4, 3, 3, 3\)"):  # fmt: skip
        load_run(path, model_class="tests.support.user_nets.TinyCNN", model_args={"num_classes": 3},
                 data_config=str(cnn_run / "config.yaml"))  # fmt: skip
    with pytest.raises(InputError, match=r"model_args: weights='IMAGENET1K_V1' would download"):
        load_run(path, model_class="torchvision.models.resnet18", model_args={"weights": "IMAGENET1K_V1"},
                 data_config=str(cnn_run / "config.yaml"))  # fmt: skip


def test_a_corrupt_model_file_ends_in_one_line_and_status_2(cnn_run, tmp_path, capsys):
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"not a model")
    out = tmp_path / "metrics.json"
    with pytest.raises(SystemExit) as exit_status:
        run_entry_point(evaluate.main, ["run", str(bad), "--data_config", str(cnn_run / "config.yaml"),
                                        "--out", str(out)])  # fmt: skip
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_status.value.code == 2 and len(lines) == 1
    assert lines[0].startswith(f"error: {bad}: not a model file that can be read safely")
    assert not out.exists()
    with pytest.raises(InputError, match="TorchScript or torch.export file.*expected a Classifier run"):
        script = tmp_path / "script.pt"
        torch.jit.save(torch.jit.script(TinyCNN(num_classes=3).eval()), script)
        assemble_main(["--out", str(tmp_path / "pop.pt"), "--data_config", str(cnn_run / "config.yaml"), str(script),
                       str(script)])  # fmt: skip
    assert not (tmp_path / "pop.pt").exists()


def test_connect_names_a_layer_that_curves_cannot_carry():
    from lightning_modules.curve_model import CurveModel

    def net():
        return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))

    with pytest.raises(InputError, match=r"connect/combine: the network's LayerNorm '1' holds parameters that no "
                                         r"curve layer takes"):  # fmt: skip
        CurveModel(net(), net(), "bezier", "fixed")


def test_roar_retrains_a_classifier_run_from_seeds_and_names_a_file_it_cannot(cnn_run, tmp_path):
    model, data, _ = load_run(cnn_run)
    x, y = data.probe(12, "test")
    settings = {"run": str(cnn_run), "device": "cpu", "log_to": "none", "output_dir": str(tmp_path / "roar"),
                "estimators": {"random": {}}, "fractions": [0.0], "retrainings": 1,
                "trainer": {"max_epochs": 1, "accelerator": "cpu"}}  # fmt: skip
    (tmp_path / "roar.yaml").write_text(yaml.safe_dump(settings))
    (row,) = evaluate.main(["roar", "--config", str(tmp_path / "roar.yaml")])["rows"]
    assert row["no_retrain_acc"] == pytest.approx(accuracy(model, x, y), abs=1e-6)  # nothing removed at t = 0
    assert 0.0 <= row["retrain_mean"] <= 1.0
    script = tmp_path / "script.pt"
    torch.jit.save(torch.jit.script(model.net.eval()), script)
    settings.update(run=str(script), data_config=str(cnn_run / "config.yaml"), output_dir=str(tmp_path / "roar2"))
    (tmp_path / "roar2.yaml").write_text(yaml.safe_dump(settings))
    with pytest.raises(InputError, match="ROAR retrains models from a seed option; Classifier has none"):
        evaluate.main(["roar", "--config", str(tmp_path / "roar2.yaml")])
    assert not (tmp_path / "roar2").exists()


def test_hook_explainers_name_a_torchscript_model():
    from evaluators.maps import explain
    from lightning_modules.classifier import Classifier

    script = Classifier(torch.jit.script(TinyCNN(num_classes=3).eval())).eval()
    for method in ("guided_backprop", "deeplift"):
        with pytest.raises(InputError, match=f"{method}.* acts through module hooks, which a TorchScript model"):
            explain(script, torch.randn(2, 3, 8, 8), method)
