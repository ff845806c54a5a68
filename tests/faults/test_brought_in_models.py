"""Issue 41, item 5: a brought-in model is scored on the inputs it expects, and a model of the
wrong kind in a run folder is one line.

A user's plain network trained on a table's raw values (not standardised) was scored, unannounced,
on the rows the datamodule standardises with the training split's statistics; a CNN checkpoint
placed in a table run folder ended in a raw conv2d ``RuntimeError``."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

import train
from evaluators.inputs.runs import load_run
from tests.support.helpers import assert_one_line_error, run_in_process
from tests.datamodules.test_images import make_folder
from tests.support.user_nets import TableNet, TinyCNN

QUIET = ["--log_to", "none", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--trainer.max_epochs", "1"]  # fmt: skip
OWN_MEAN, OWN_STD = [150.0, 0.0, 0.5, 0.5], [25.0, 1.0, 0.5, 0.5]  # a model's own statistics of the raw columns


def table(n: int, seed: int) -> pd.DataFrame:
    """Rows x1 in [100, 200], x2 ~ N(0, 1), colour blue/red; y = x1 + 20 [red] > 160, 20 % flipped."""
    rng = np.random.default_rng(seed)
    x1, x2, colour = rng.uniform(100, 200, n), rng.normal(0, 1, n), rng.choice(["blue", "red"], n)
    y = (x1 + 20 * (colour == "red") > 160).astype(int)
    flip = rng.random(n) < 0.2
    return pd.DataFrame({"x1": x1, "x2": x2, "colour": colour, "y": np.where(flip, 1 - y, y)})


def raw_rows(frame: pd.DataFrame) -> torch.Tensor:
    """A table's rows encoded by hand: x1, x2, colour=blue, colour=red, as in the file (no standardisation)."""
    return torch.tensor(np.c_[frame.x1, frame.x2, frame.colour == "blue", frame.colour == "red"], dtype=torch.float32)


def raw_rule_net() -> TableNet:
    """A plain network on raw rows: class 1 where x1 + 20 [red] > 160 (its weights set by hand)."""
    net = TableNet(in_features=4, hidden=2, num_classes=2)
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0, 0, 0, 20], [-1.0, 0, 0, -20]]))
        net[0].bias.copy_(torch.tensor([-160.0, 160.0]))
        net[2].weight.copy_(torch.tensor([[0.0, 1], [1, 0]]))
        net[2].bias.zero_()
    return net


def hand_accuracy(net, x: torch.Tensor, y) -> float:
    with torch.no_grad():
        return (net(x).argmax(-1) == torch.tensor(np.asarray(y))).double().mean().item()


@pytest.fixture(scope="module")
def brought_in(tmp_path_factory):
    """A table (train and test files), its data config, and the raw-rule network's state dict."""
    tmp = tmp_path_factory.mktemp("brought_in")
    table(80, 0).to_csv(tmp / "t.csv", index=False)
    test = table(40, 1)
    test.to_csv(tmp / "t_test.csv", index=False)
    config = tmp / "data.yaml"
    config.write_text(yaml.safe_dump({"data": {"class_path": "datamodules.CSVDataModule", "init_args": {
        "path": str(tmp / "t.csv"), "test_path": str(tmp / "t_test.csv"), "target": "y", "numeric": ["x1", "x2"],
        "categorical": ["colour"]}}}))  # fmt: skip
    model = tmp / "net.pt"
    torch.save(raw_rule_net().state_dict(), model)
    options = ["--data_config", str(config), "--model_class", "tests.support.user_nets.TableNet",
               "--model_args", "{in_features: 4, hidden: 2}"]  # fmt: skip
    return tmp, test, model, options


def test_a_model_of_raw_rows_is_scored_on_them_with_model_inputs_raw(brought_in):
    tmp, test, model, options = brought_in
    expected = hand_accuracy(raw_rule_net(), raw_rows(test), test.y)
    raw = run_in_process("evaluate.py", "run", str(model), *options, "--model_inputs", "raw")
    served = run_in_process("evaluate.py", "run", str(model), *options)
    assert raw.returncode == 0 and served.returncode == 0, raw.stderr[-2000:] + served.stderr[-2000:]
    scored = {name: yaml.safe_load(r.stdout[r.stdout.index("{"):])["test_acc"] for name, r in
              (("raw", raw), ("served", served))}  # fmt: skip
    assert scored["raw"] == pytest.approx(expected, abs=1e-6) and expected > 0.6
    assert scored["served"] != pytest.approx(expected)  # standardised rows: another (wrong) score
    raw_gets = "the model gets the encoded rows (numbers as in the file, categories 0/1) without the standardisation"
    for result, gets in ((raw, raw_gets), (served, "the model gets them as served")):
        lines = [line for line in result.stdout.splitlines() if line.startswith("inputs: ")]
        assert len(lines) == 1 and gets in lines[0], result.stdout
        assert "categorical columns ['colour'] one-hot encoded" in lines[0]
        assert "every column standardised with the training split's mean and std" in lines[0]


def test_the_model_s_own_mean_and_std_give_a_hand_standardised_forward_pass(brought_in):
    tmp, test, model, options = brought_in
    net = raw_rule_net()
    keys = dict(zip(options[::2], options[1::2]))
    loaded, data, _ = load_run(model, model_class=keys["--model_class"], model_args=yaml.safe_load(
        keys["--model_args"]), data_config=keys["--data_config"], model_mean=OWN_MEAN, model_std=OWN_STD)  # fmt: skip
    by_hand = (raw_rows(test) - torch.tensor(OWN_MEAN)) / torch.tensor(OWN_STD)
    with torch.no_grad():
        torch.testing.assert_close(loaded(data.test_tensors[0]), net(by_hand), rtol=1e-4, atol=1e-4)
    result = run_in_process("evaluate.py", "run", str(model), *options, "--model_mean", str(OWN_MEAN),
                            "--model_std", str(OWN_STD))  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert yaml.safe_load(result.stdout[result.stdout.index("{"):])["test_acc"] == pytest.approx(
        hand_accuracy(net, by_hand, test.y), abs=1e-6)  # fmt: skip
    assert "0/1) standardised with its own mean [150, 0, 0.5, 0.5] and std [25, 1, 0.5, 0.5]" in result.stdout


def test_image_pixels_in_0_1_are_the_raw_inputs(tmp_path):
    pixels = make_folder(tmp_path / "img", size=8)["test"][0]
    config = tmp_path / "data.yaml"
    config.write_text(yaml.safe_dump({"data": {"class_path": "datamodules.ImageFolderDataModule", "init_args": {
        "root": str(tmp_path / "img"), "cache_dir": str(tmp_path / "cache")}}}))  # fmt: skip
    torch.manual_seed(0)
    net = TinyCNN(num_classes=3).eval()
    torch.save(net.state_dict(), tmp_path / "cnn.pt")
    loaded, data, _ = load_run(tmp_path / "cnn.pt", model_class="tests.support.user_nets.TinyCNN",
                               model_args={"num_classes": 3}, data_config=str(config), model_inputs="raw")
    x, _ = data.probe(len(pixels), "test")
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), net(torch.tensor(pixels).float() / 255), rtol=1e-4, atol=1e-5)


def test_options_of_a_model_s_inputs_are_checked_in_one_line_by_every_command_taking_one(brought_in, tmp_path):
    tmp, _, model, options = brought_in
    result = run_in_process("evaluate.py", "sanity", "--config", "configs/sanity/german.yaml", "--run", str(model),
                            *options[:4], "--set", "model_args={in_features: 4, hidden: 2}", "--model_inputs", "raw",
                            "--model_mean", "[1, 2]", "--model_std", "[1, 2]", "--output_dir", str(tmp_path))
    assert_one_line_error(result, "option model_mean: 2 values; the data has 4 features")
    result = run_in_process("evaluate.py", "explain", str(model), *options, "--model_mean", "[1]")
    assert_one_line_error(result, "options model_mean and model_std: give both")


@pytest.fixture(scope="module")
def cnn_in_table_folder(brought_in):
    """A table run folder whose last.ckpt is an image model's (a CNN trained on an image folder)."""
    tmp = brought_in[0]
    config = tmp / "data.yaml"
    train.main(["--config", str(config), "--model", "lightning_modules.MLPClassifier", *QUIET,
                "--output_dir", str(tmp / "runs"), "--run_name", "mlp"])  # fmt: skip
    make_folder(tmp / "img", size=8)
    train.main(["--data", "ImageFolderDataModule", "--data.root", str(tmp / "img"), "--data.cache_dir",
                str(tmp / "c"), "--data.batch_size", "4", "--model", "lightning_modules.ImageClassifier",
                "--model.arch", "small_cnn", *QUIET, "--output_dir", str(tmp / "runs"), "--run_name", "cnn"])
    shutil.copy(tmp / "runs" / "img" / "cnn" / "checkpoints" / "last.ckpt", tmp / "runs" / "t" / "mlp" / "checkpoints")
    return tmp / "runs" / "t" / "mlp"


@pytest.mark.parametrize("command", [["evaluate.py", "run"], ["evaluate.py", "sanity", "--config",
                                                              "configs/sanity/german.yaml", "--run"]])
def test_a_cnn_checkpoint_in_a_table_run_folder_is_one_line(cnn_in_table_folder, command, tmp_path):
    extra = ["--output_dir", str(tmp_path / "out")] if command[1] != "run" else []
    result = run_in_process(*command, str(cnn_in_table_folder), *extra)
    assert_one_line_error(result, f"{cnn_in_table_folder / 'checkpoints' / 'last.ckpt'}: holds an ImageClassifier "
                                  "(small_cnn), an image model of images (N, C, H, W); the run folder's data (t) "
                                  "needs a tabular model of rows (N, 4)")  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_train_resume_of_a_table_run_holding_a_cnn_checkpoint_is_one_line(cnn_in_table_folder):
    result = run_in_process("train.py", "--resume", str(cnn_in_table_folder), *QUIET)
    assert_one_line_error(result, "holds an ImageClassifier (small_cnn), an image model of images (N, C, H, W); the "
                                  "run folder's config.yaml trains an MLPClassifier")  # fmt: skip
