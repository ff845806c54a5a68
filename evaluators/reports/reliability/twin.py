"""The permuted-label twin the report trains on request (option ``permute_labels: <seed>``): the
report's population trained again by its own recipe with only the training labels permuted
(``datamodules.label_permutation``), then used as a given ``permuted_population`` (``permuted``).

The recipe is the population's training config, ``config.yaml`` in the run folder of its
population file: the composed config train.py wrote (data, model, the members' seeds, optimiser,
batch size, epochs, ``seed_everything``), so member m of the twin starts from member m's weights
and sees the same batches, only with other labels. ``evaluate.py`` trains it with train.py
before the report starts (this layer may not import train.py), with the arguments of
``twin_arguments``:

    python train.py --config <population run>/config.yaml --data.permute_labels <seed>
        --resume=null --run_name population --log_to none --output_dir <report>/permuted

(``--resume=null``: a population whose training was resumed has its own folder as ``resume`` in
its config; ``--log_to none``: the report logs the verdict; with the report's ``data_dir``, the
datamodule's data location too), into ``<report>/permuted/<dataset>/population/``
(``twin_run``). An interrupted report resumed with ``--resume <report>`` resumes the twin's
training (``train.py --resume <twin run>``: finished chunks and epochs are kept); a twin whose
``population.pt`` is written (``twin_population``) is used as it is, never trained again.

A folder of image runs has no one recipe (each run has its own config); it is refused with the
commands that make its twin by hand (``by_hand``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from datamodules import data_location_option
from datamodules.label_permutation import check_permute_labels
from foundation.errors import InputError
from foundation.files import read_yaml

TWIN = "permuted"  # <report>/permuted/<dataset>/population/: train.py's <output_dir>/<dataset>/<run_name>
RUN_NAME = "population"
CONFIG = "config.yaml"


def by_hand(recipe: str, seed: int) -> str:
    """The commands that train a twin by hand from ``recipe`` (train.py's options) and report on it."""
    return (f"python train.py {recipe} --data.permute_labels {seed} --resume=null --output_dir <folder>, then "
            "permuted_population=<the population file or folder it wrote> instead of permute_labels")


def training_config(population: str, seed: int) -> Path:
    """The recipe of ``population`` (a population file): its run folder's ``config.yaml``; an
    ``InputError`` for a bad seed, a folder of image runs or a population file without it."""
    check_permute_labels(seed)
    if Path(population).is_dir():
        raise InputError(f"option permute_labels={seed} with population={population!r}: a folder of image runs has "
                         "no one training recipe to repeat; train each run's twin by hand, the runs named as in "
                         f"the population so that they pair in order: {by_hand('--config <run>/config.yaml', seed)} "
                         "for each run")  # fmt: skip
    config = Path(population).parent / CONFIG
    if not config.is_file():
        raise InputError(f"option permute_labels={seed}: {config} is missing, the training config train.py writes "
                         f"beside the population file {population!r} (moved or assembled by hand?); train the twin "
                         f"by hand: {by_hand('<the options the population was trained with>', seed)}")  # fmt: skip
    return config


def twin_run(run_dir: Path) -> Path | None:
    """The twin's train.py run folder in report folder ``run_dir`` (None before it is made)."""
    found = sorted((run_dir / TWIN).glob(f"*/{RUN_NAME}"))
    return found[0] if found else None


def twin_population(run_dir: Path) -> Path | None:
    """The twin's population file once its training finished, else None."""
    run = twin_run(run_dir)
    return run / "population.pt" if run is not None and (run / "population.pt").is_file() else None


def twin_arguments(cfg, run_dir: Path) -> list[str]:
    """train.py's arguments that train the twin of report config ``cfg`` (``population``,
    ``permute_labels``, ``data_dir``) into ``run_dir``, or continue its interrupted training."""
    recipe = training_config(cfg.population, cfg.permute_labels)
    run = twin_run(run_dir)
    if run is not None and not (run / CONFIG).is_file():  # made, killed before its config: nothing trained there
        shutil.rmtree(run)
    if run is not None and (run / CONFIG).is_file():
        arguments = ["--resume", str(run)]
    else:
        arguments = ["--config", str(recipe), "--data.permute_labels", str(cfg.permute_labels), "--resume=null",
                     "--run_name", RUN_NAME, "--log_to", "none", "--output_dir", str(run_dir / TWIN)]  # fmt: skip
    if cfg.data_dir is not None:
        class_path = read_yaml(recipe)["data"]["class_path"]
        arguments += [f"--data.{data_location_option(class_path)}", str(cfg.data_dir)]
    return arguments
