"""Every run or population that a config under configs/ names is one that a documented command
makes: a Makefile target (its commands as ``make -n`` prints them) or a ``train.py`` command of
the README or docs/ with a fixed ``--run_name``. So no config names a folder that only one
machine had (``runs/<data>/<Model>-seed0-<time>``), and a newcomer's commands make what the
configs read. The command an evaluator names for a missing run or population
(``evaluators.inputs.sources.made_by``) is checked to make it, too."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml
from jsonargparse import Namespace

from datamodules.specs import DATASETS
from evaluators.inputs.sources import MADE_BY, made_by
from tests.support import ROOT

DEFAULT_CONFIGS = ["configs/defaults.yaml", "configs/german.yaml"]  # train.py's own, composed first
SHELL_VARIABLE = re.compile(r"\$\$?\{?s\}?")  # a loop's seed ($s in the docs, $$s in the Makefile)


def named_sources() -> list[tuple[str, str, str]]:
    """(config file, option, path) of every config's ``run`` or ``population``."""
    found = []
    for config in sorted((ROOT / "configs").rglob("*.yaml")):
        values = yaml.safe_load(config.read_text()) or {}
        for option in ("run", "population"):
            if isinstance(values.get(option), str):
                found.append((str(config.relative_to(ROOT)), option, values[option]))
    return found


def train_commands(text: str) -> list[list[str]]:
    """The arguments of every ``train.py`` command in shell text: each from ``train.py`` to
    the end of its simple command (``;``, ``&&``, ``||``, a comment or the line's end)."""
    text = text.replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        for match in re.finditer(r"train\.py\b", line):
            rest = SHELL_VARIABLE.sub("0", line[match.end():])
            rest = re.split(r";|&&|\|\||\s#|`", rest)[0]
            commands.append(shlex.split(rest))
    return commands


def option(args: list[str], name: str) -> list[str]:
    return [value for flag, value in zip(args, args[1:]) if flag == name]


def run_folder(args: list[str]) -> str | None:
    """The folder a ``train.py`` command makes: ``<output_dir>/<dataset>/<run_name>`` (train.py's
    rule, the dataset named as ``train.dataset_name`` names it), or None for a resumed run, a
    time-stamped name or a template (``<data_dir>``: not a command to run as written)."""
    import train

    if "--resume" in args or any("<" in a for a in args):
        return None
    data: dict = {}
    top = {"output_dir": "runs", "run_name": None}
    for config in DEFAULT_CONFIGS + option(args, "--config"):
        values = yaml.safe_load((ROOT / config).read_text()) or {}
        top.update({k: values[k] for k in top if k in values})
        section = values.get("data") or {}
        if section.get("class_path") not in (None, data.get("class_path")):
            data = {"class_path": section["class_path"], "init_args": {}}
        data.setdefault("init_args", {}).update(section.get("init_args") or {})
    for flag, value in zip(args, args[1:]):
        if flag == "--data":  # a datamodule class by name (as train.py's --data takes it): its options start afresh
            data = {"class_path": value if "." in value else f"datamodules.{value}", "init_args": {}}
        elif flag.startswith("--data."):
            data["init_args"][flag.removeprefix("--data.").removeprefix("init_args.")] = yaml.safe_load(value)
        elif flag in ("--output_dir", "--run_name"):
            top[flag[2:]] = value
    if top["run_name"] is None:
        return None
    dataset = train.dataset_name(Namespace(class_path=data["class_path"], init_args=Namespace(**data["init_args"])))
    return f"{Path(top['output_dir']).as_posix()}/{dataset}/{top['run_name']}"


@cache
def make_text(target: str) -> str:
    """What ``make -n -B <target>`` prints, with ``DATASET`` left as a placeholder."""
    printed = subprocess.run(["make", "-n", "-B", target, "DATASET=@DATASET@", f"PYTHON={sys.executable}"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    return printed.stdout


def make_folders(target: str, datasets=tuple(DATASETS)) -> set[str]:
    """The run folders of the ``train.py`` commands ``make -n -B <target> DATASET=<d>`` prints, for
    every d of ``datasets``."""
    texts = {make_text(target).replace("@DATASET@", d) for d in datasets}
    return {f for text in texts for args in train_commands(text) if (f := run_folder(args))}


def makefile_targets() -> list[str]:
    text = (ROOT / "Makefile").read_text()
    return sorted({t for line in re.findall(r"^\.PHONY:(.*)$", text, re.M) for t in line.split()})


def documented_folders() -> set[str]:
    """Every folder a Makefile target (for every dataset its DATASET takes) or a documented
    ``train.py`` command makes."""
    folders = {f for target in makefile_targets() for f in make_folders(target)}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        folders |= {f for args in train_commands(doc.read_text()) if (f := run_folder(args))}
    return folders


def is_made(path: str, folders) -> bool:
    """``path`` is a run folder, its population file, or a folder holding runs."""
    path = Path(path).as_posix()
    return any(path in (f, f"{f}/population.pt") or f.startswith(f"{path}/") for f in folders)


def test_every_config_names_a_run_or_population_a_documented_command_makes():
    folders = documented_folders()
    assert "runs/fashion_mnist/cnn-seed0" in folders and "runs/full/heloc/population-1000" in folders, folders
    missing = [(config, f"{name}: {path}") for config, name, path in named_sources() if not is_made(path, folders)]
    assert not missing, missing


@pytest.mark.parametrize("path", [*MADE_BY, *(f"runs/full/{d}/population-1000/population.pt" for d in DATASETS)])
def test_the_command_named_for_a_missing_run_makes_it(path):
    _, command = made_by(path)
    if command.startswith("make "):
        target, *variables = command.split()[1:]
        folders = make_folders(target, tuple(v.removeprefix("DATASET=") for v in variables) or ("german",))
    else:
        folders = {run_folder(args) for args in train_commands(command)}
    assert is_made(path, folders), (command, folders)


def test_the_parser_reads_a_run_folder_as_train_py_names_it():
    """The test's own reading of a command against train.py's: the rule, on three kinds of data."""
    cases = {
        "python train.py --config configs/german.yaml --run_name mlp-seed0": "runs/german/mlp-seed0",
        "python train.py --config configs/images/cifar10_resnet8.yaml --data.root /x/cifar10-jpeg.tar.gz "
        "--output_dir out --run_name r": "out/cifar10-jpeg/r",
        "for s in 1 2; do python train.py --config configs/images/fashion_mnist_cnn.yaml --run_name seed$s; done":
            "runs/fashion_mnist/seed0",
        "python train.py --config configs/heloc.yaml  # a stamped name": None,
    }  # fmt: skip
    for command, folder in cases.items():
        (args,) = train_commands(command)
        assert run_folder(args) == folder, command
