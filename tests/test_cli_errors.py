"""Every entry point's one error path, run as a user runs it (a subprocess): bad options,
types, config files and input files end in one line on standard error naming what was
wrong, a non-zero exit, no traceback, and no run folder left behind; ``--debug`` shows
the traceback. ``train.py``'s cases are in tests/test_train_cli.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from tests.helpers import assert_one_line_error


ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=env)  # fmt: skip


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
        result = run("evaluate.py", *args)
        assert_one_line_error(result, message)
        assert not out.exists() or not any(out.iterdir()), (args, list(out.iterdir()))  # no run folder left


def test_missing_population_names_the_command_that_makes_it(tmp_path):
    result = run("evaluate.py", "landscape", "--config", "configs/landscape/german.yaml", "--population",
                 str(tmp_path / "runs" / "full" / "german" / "population-1000" / "population.pt"))  # fmt: skip
    assert_one_line_error(result, "file not found; expected a population file written by train.py "
                                  "(make it with: make population DATASET=german)")  # fmt: skip


def test_describe_table1_tool_and_debug_flag(tmp_path):
    assert_one_line_error(run("-m", "datamodules.describe", "hmda"), "unknown dataset 'hmda'")
    assert_one_line_error(run("tools/table1.py", "--paper", str(tmp_path / "none.json")),
                          "none.json: cannot be read as a consistency.json report")  # fmt: skip
    result = run("-m", "datamodules.describe", "--data-dir", str(tmp_path), "heloc", "--debug")
    assert result.returncode != 0 and "Traceback" in result.stderr and "InputError" in result.stderr
