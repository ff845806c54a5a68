"""Every entry point's one error path: bad options, types, config files and input files end in
one line on standard error naming what was wrong, a non-zero exit, no traceback, and no run
folder left behind; ``--debug`` shows the traceback. Each entry point runs once as a user runs it
(a subprocess); the other cases run it in this process (``tests.support.helpers.run_in_process``), which
takes the same path without the imports. ``train.py``'s cases are in tests/entry_points/test_train_cli.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support.helpers import ROOT, assert_one_line_error, run_in_process as run


def run_subprocess(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_evaluate_bad_config_population_and_values(small_population, tmp_path):
    population = small_population
    out = tmp_path / "out"
    bad = tmp_path / "bad.yaml"
    bad.write_text("population: [unclosed\n")
    good = tmp_path / "landscape.yaml"
    good.write_text(f"population: {population}\nn_sets: 1\noutput_dir: {out}\ndevice: cpu\n")
    sigma = tmp_path / "sigma.yaml"
    sigma.write_text(f"population: {population}\nn_models: 2\noutput_dir: {out}\ndevice: cpu\n")
    not_a_population = tmp_path / "weights.pt"
    torch.save({"w": torch.zeros(2)}, not_a_population)
    text_file = tmp_path / "notes.pt"
    text_file.write_text("not a tensor file\n")
    cases = [
        (["landscape", "--config", str(bad)], f"--config {bad}: not valid YAML"),
        (["landscape", "--config", str(good), "--set", "n_sets=abc"], "option n_sets='abc'; expected int"),
        (["landscape", "--config", str(good), "--set", "n_set=2"], "unknown option(s) ['n_set']"),
        (["landscape", "--config", str(good), "--population", str(not_a_population)], "not a population file"),
        (["landscape", "--config", str(good), "--population", str(text_file)], "not a population file written by"),
        (["landscape", "--config", str(good), "--n_sets", "9"], "9 disjoint sets of 4 models need 36"),
        (["landscape", "--config", str(good), "--data_dir", str(tmp_path / "nowhere")], "does not exist"),
        (["sigma", "--config", str(sigma), "--set", "method=magic"], "option method='magic': unknown explainer"),
        (["landscape", "--confg", str(good)], "evaluate.py landscape: one of the arguments --config is required"),
        (["nonsense"], "evaluate.py: argument command: invalid choice: 'nonsense'"),
    ]
    for args, message in cases:
        result = (run_subprocess if args == ["nonsense"] else run)("evaluate.py", *args)
        assert_one_line_error(result, message)
        assert not out.exists(), (args, list(out.rglob("*")))  # no run folder left, nor the output folder made for it


def test_missing_population_names_the_command_that_makes_it(tmp_path):
    result = run("evaluate.py", "landscape", "--config", "configs/landscape/german.yaml", "--population",
                 str(tmp_path / "runs" / "full" / "german" / "population-1000" / "population.pt"))  # fmt: skip
    assert_one_line_error(result, "file not found; expected a population file written by train.py "
                                  "(make it with: make population DATASET=german)")  # fmt: skip


def test_describe_table1_tool_and_debug_flag(tmp_path):
    assert_one_line_error(run("-m", "datamodules.describe", "hmda"), "unknown dataset 'hmda'")
    assert_one_line_error(run_subprocess("tools/table1.py", "--paper", str(tmp_path / "none.json")),
                          "none.json: cannot be read as a consistency.json report")  # fmt: skip
    result = run_subprocess("-m", "datamodules.describe", "--data-dir", str(tmp_path), "heloc", "--debug")
    assert result.returncode != 0 and "Traceback" in result.stderr and "InputError" in result.stderr


@pytest.fixture(scope="module")
def image_population_run(tmp_path_factory) -> Path:
    """A train.py run of a two-member ImagePopulation (ResNet-8s, 2 steps) on a tiny image folder."""
    import train
    from tests.datamodules.test_images import make_folder

    tmp = tmp_path_factory.mktemp("image_population")
    make_folder(tmp / "tiny", size=32)
    train.main([
        "--config", "configs/images/cifar10_population.yaml", "--data.root", str(tmp / "tiny"), "--data.subset", "null",
        "--data.cache_dir", str(tmp / "cache"), "--data.batch_size", "4", "--model.size", "2",
        "--trainer.accelerator", "cpu", "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
        "--log_to", "none", "--output_dir", str(tmp / "runs"), "--run_name", "pop", "--trainer.enable_progress_bar",
        "false",
    ])  # fmt: skip
    return tmp / "runs" / "tiny" / "pop"


def test_a_model_of_another_kind_is_refused_with_one_line(small_population, tiny_run, image_population_run,
                                                          tmp_path):  # fmt: skip
    """Each evaluator checks the kind of run or population where it loads it: an image population to
    the MLP-only protocols, a population run to a one-model command, a tabular model or population to
    a config for images (``kind: image``); one line, status 2, and no output folder made."""
    out = tmp_path / "out" / "nested"
    image_file = str(image_population_run / "population.pt")
    tabular_run = Path(small_population).parent  # a PopulationMLP's run folder
    mlp = tmp_path / "mlp"
    import train

    train.main(["--trainer.max_epochs", "1", "--log_to", "none", "--output_dir", str(mlp), "--run_name", "m",
                "--trainer.enable_progress_bar", "false"])  # fmt: skip
    cases = [
        (["landscape", "--config", "configs/landscape/german.yaml", "--population", image_file],
         f"option population={image_file!r}: holds an image population; expected a tabular population"),
        (["sigma", "--config", "configs/sigma/german.yaml", "--population", str(tiny_run.parent)],
         "holds an image population; expected a tabular population"),
        (["consistency", "--config", "configs/consistency/fashion_mnist.yaml", "--population", small_population],
         "holds a tabular population; expected an image population (the config's kind: image)"),
        (["explain", str(image_population_run), "--log_to", "none"],
         f"{image_population_run}: holds an image population; expected a tabular model or an image model"),
        (["run", str(image_population_run)], "holds an image population; expected a tabular model or an image"),
        (["run", str(tabular_run)], "holds a tabular population; expected a tabular model or an image model"),
        (["roar", "--config", "configs/roar/fashion_mnist_cpu.yaml", "--run", str(mlp / "german" / "m")],
         f"option run='{mlp / 'german' / 'm'}': holds a tabular model; expected an image model (the config's kind"),
        (["roar", "--config", "configs/roar/fashion_mnist_cpu.yaml", "--run", str(tiny_run), "--set", "data.subsett=5"],
         "option data: ['subsett'] not an option of the run's datamodule ImageFolderDataModule; expected some of"),
        (["aggregation", "--config", "configs/aggregation/cifar10.yaml", "--run", str(mlp / "german" / "m"),
          "--set", "kind=images"], "option kind='images'; expected one of [None, 'tabular', 'image']"),
    ]  # fmt: skip
    for args, message in cases:
        result = run("evaluate.py", *args, *(["--output_dir", str(out)] if args[0] not in ("run", "explain") else []))
        assert_one_line_error(result, message)
        assert not (tmp_path / "out").exists(), (args, list((tmp_path / "out").rglob("*")))
    assert [p.name for p in image_population_run.iterdir() if p.name.startswith("explanations")] == []


def test_a_damaged_checkpoint_is_named_not_unpickled(tiny_run, tmp_path):
    """A cut or foreign ``last.ckpt``: one line naming the file, never the advice to unpickle it
    (``weights_only=False`` runs whatever the file holds), for ``evaluate.py`` and ``train.py --resume``."""
    import shutil

    run_dir = tmp_path / "r"
    shutil.copytree(tiny_run, run_dir)
    last = run_dir / "checkpoints" / "last.ckpt"
    for damage in (last.read_bytes()[:200], b"\x80\x04not a pickle", None):
        if damage is None:  # a pickle that weights_only refuses: an arbitrary object
            torch.save({"state_dict": {}, "obj": Path("x")}, last)
        else:
            last.write_bytes(damage)
        for args in (["evaluate.py", "run", str(run_dir)], ["train.py", "--resume", str(run_dir)]):
            result = run(*args)
            assert_one_line_error(result, f"{last}: not a readable checkpoint (")
            assert "weights_only" not in result.stderr


def test_a_missing_run_or_population_names_the_command_that_makes_it(tmp_path):
    """Run from a fresh folder (nothing trained), each image config's error says which make
    target trains what it reads."""
    cases = {
        "configs/aggregation/fashion_mnist.yaml": "runs/fashion_mnist/cnn-seed0: folder not found; expected a run "
                                                  "folder written by train.py (make it with: make fashion-mnist-cnn)",
        "configs/optimised/cifar10.yaml": "(make it with: make cifar10-resnet8)",
        "configs/consistency/fashion_mnist_watson_mlp.yaml": "runs/consistency_images/members/mlp: folder not found; "
        "expected a folder of image runs written by train.py (make it with: make fashion-mnist-mlp-members)",
        "configs/consistency/cifar10.yaml": "population-8/population.pt: file not found; expected a population file "
                                            "written by train.py (make it with: make cifar10-population)",
    }  # fmt: skip
    for config, message in cases.items():
        command = config.split("/")[1]
        result = run("evaluate.py", command, "--config", str(ROOT / config), "--set", "device=cpu", cwd=tmp_path)
        assert_one_line_error(result, message)
        assert list(tmp_path.iterdir()) == [], config
