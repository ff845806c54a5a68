"""What an evaluator is given, checked once where it is loaded: the kind of model a
``train.py`` run or a population holds, whether its checkpoint can be read, and, for a run
or population that is missing, the command that makes it.

Kinds: ``tabular`` and ``image`` (one model: ``MLPClassifier``, ``ImageClassifier``; a
``Classifier`` around a user's network, or a user's model file: the kind of its data),
``tabular population`` (``PopulationMLP``), ``tabular network population`` (a ``ModulePopulation``
of a user's networks on a table) and ``image population`` (``ImagePopulation``, a
``ModulePopulation`` on images, or a folder of image runs). A config's ``kind`` option
(``tabular``, ``image`` or null for either) names the data its models must be of: an image
config given a tabular model stops at once instead of treating features as pixels.
"""

from __future__ import annotations

import importlib
import os
import re
import warnings
from pathlib import Path

import torch

from datamodules.specs import DATASETS
from foundation.errors import InputError
from foundation.modality import MODALITIES, ROWS, modality_of

SINGLE_MODELS = tuple(m.kind for m in MODALITIES.values())  # one model of a modality's data: tabular, image
POPULATIONS = (*(f"{kind} population" for kind in SINGLE_MODELS), f"{ROWS.kind} network population")
# a table's population file by its class: stacked MLPs or a user's networks (evaluators.inputs.config)
TABLE_POPULATIONS = {"PopulationMLP": POPULATIONS[0], "ModulePopulation": POPULATIONS[-1]}
CONFIG_KINDS = (None, *SINGLE_MODELS)
RUN_KINDS = {"MLPClassifier": "tabular", "ImageClassifier": "image", "PopulationMLP": "tabular population",
             "ImagePopulation": "image population", "Classifier": None}  # None: its data's kind  # fmt: skip
POPULATION_FILE = "a population file written by train.py"
RUN_FOLDER = "a run folder written by train.py"
MEMBER_FOLDER = "a folder of image runs written by train.py"

# The fixed paths that the Makefile's targets and the documented commands train (docs/reproducing.md, "The
# commands, in order" and "Image protocols"), and that the configs name: an evaluator
# that misses one says which command makes it. tests/configs/test_config_paths.py checks that each
# command makes its path and that every config's run or population is one a command makes.
MADE_BY = {
    "runs/fashion_mnist/cnn-seed0": (RUN_FOLDER, "make fashion-mnist-cnn"),
    "runs/cifar10-jpeg/resnet8-seed0": (RUN_FOLDER, "make cifar10-resnet8"),
    "runs/consistency_images/members/cnn": (MEMBER_FOLDER, "make fashion-mnist-members"),
    "runs/consistency_images/members/mlp": (MEMBER_FOLDER, "make fashion-mnist-mlp-members"),
    "runs/consistency_images/cifar10/cifar10-jpeg/population-8/population.pt": (POPULATION_FILE,
                                                                                "make cifar10-population"),
    "runs/german/mlp-seed0": (RUN_FOLDER, "python train.py --config configs/german.yaml --run_name mlp-seed0"),
    "runs/heloc/mlp-seed0": (RUN_FOLDER, "python train.py --config configs/heloc.yaml --data.data_dir ../shared/data "
                                         "--run_name mlp-seed0"),
    "runs/roar/clean/adult/mlp-seed0": (RUN_FOLDER, "python train.py --config configs/adult.yaml "
                                                    "--output_dir runs/roar/clean --run_name mlp-seed0"),
}  # fmt: skip
TABULAR_POPULATION = re.compile(r"(?:.*/)?runs/full/(\w+)/population-1000/population\.pt")


def made_by(path: str | Path) -> tuple[str, str] | None:
    """(what lies at ``path``, the command that makes it) for a path a documented command
    makes: one of ``MADE_BY``, or a tabular population of ``make population``, also as the
    end of a longer path (the checkout elsewhere, or an absolute path); else None."""
    text = Path(os.path.normpath(str(path))).as_posix()
    match = TABULAR_POPULATION.fullmatch(text)
    if match and match.group(1) in DATASETS:
        return POPULATION_FILE, f"make population DATASET={match.group(1)}"
    return next((made for key, made in MADE_BY.items() if text == key or text.endswith(f"/{key}")), None)


def not_found(path: str | Path, expected: str, noun: str | None = None) -> InputError:
    """The error for a missing ``path`` (a ``noun``: by default "folder" where a folder is
    expected there, else "file"): what was expected there and, where a documented command
    makes it, that command."""
    known = made_by(path)
    expected, hint = (known[0], f" (make it with: {known[1]})") if known else (expected, "")
    noun = noun or ("folder" if expected in (RUN_FOLDER, MEMBER_FOLDER) else "file")
    return InputError(f"{path}: {noun} not found; expected {expected}{hint}")


def run_kind(config: dict) -> str:
    """The kind of model a run's ``config.yaml`` (read as a dict) trains; another model class by its name."""
    name = str((config.get("model") or {}).get("class_path", "")).rsplit(".", 1)[-1]
    if name in RUN_KINDS and RUN_KINDS[name] is None:
        return data_kind(str((config.get("data") or {}).get("class_path", "")))
    return RUN_KINDS.get(name, name or "unknown model")


def data_kind(class_path: str) -> str:
    """The data kind (``tabular``, ``image``) of a datamodule class: its modality's (``foundation.modality``)."""
    module, _, name = class_path.rpartition(".")
    return modality_of(getattr(importlib.import_module(module), name)).kind


def _article(kind: str) -> str:
    noun = f"{kind} model" if kind in SINGLE_MODELS else kind
    return f"an {noun}" if noun[0] in "aeiouAEIOU" else f"a {noun}"


def check_kind(where: str, found: str, accepted: tuple[str, ...], kind: str | None = None, why: str = "") -> None:
    """The one check of what an evaluator was given: ``found`` must be a kind the evaluator
    takes (``accepted``) and of the config's ``kind`` of data where it names one; ``why``: the
    evaluator's reason for what it takes, said with the refusal."""
    if kind not in CONFIG_KINDS:
        raise InputError(f"option kind={kind!r}; expected one of {list(CONFIG_KINDS)} (the data the models are of)")
    wanted = [k for k in accepted if kind is None or k.split()[0] == kind]
    if not wanted:
        raise InputError(f"option kind={kind!r}; this evaluator takes {' or '.join(_article(k) for k in accepted)}")
    if found not in wanted:
        because = f" (the config's kind: {kind})" if kind is not None else ""
        because += f": {why}" if why else ""
        raise InputError(f"{where}: holds {_article(found)}; expected "
                         f"{' or '.join(_article(k) for k in wanted)}{because}")  # fmt: skip


def check_checkpoint(path: Path):
    """What ``path`` holds, once it reads as a checkpoint with ``torch.load(weights_only=True)``;
    one that does not (cut short, or holding objects other than tensors and plain values) is named."""
    try:
        with warnings.catch_warnings():  # torch's notes on what it met on the way: the error says enough
            warnings.simplefilter("ignore")
            return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # torch.load's failures differ by what is wrong (zip, pickle, EOF)
        raise InputError(f"{path}: not a readable checkpoint ({type(err).__name__}); expected the "
                         "checkpoint train.py writes (train the run again if it is damaged)") from None  # fmt: skip
