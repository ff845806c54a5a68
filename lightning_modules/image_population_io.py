"""Saving and loading a trained image population as one file.

A plain ``torch.save`` dictionary of tensors, numbers, strings and lists, loaded with
``torch.load(weights_only=True)`` (as the tabular population's, ``population_io``):
``{"format", "hparams", "seeds", "state_dict", "member_test_acc", "metadata"}``, where
``state_dict`` is the population's (keys ``nets.<i>.<parameter or buffer>``).
"""

from __future__ import annotations

from pathlib import Path

from lightning_modules.image_classifier import ImageClassifier
from lightning_modules.image_population import ImagePopulation
from lightning_modules.population_io import read_population_file, save_population

IMAGE_FORMAT = "reliable-explanations/image-population-v1"


def save_image_population(path: str | Path, population: ImagePopulation, member_test_acc: list[float],
                          metadata: dict) -> None:  # fmt: skip
    """Write atomically: a reader never sees a half-written file."""
    save_population(path, population, member_test_acc, metadata, file_format=IMAGE_FORMAT)


def load_image_population(path: str | Path) -> tuple[ImagePopulation, dict]:
    """The population (on the CPU) and the rest of the file (seeds, accuracies, metadata)."""
    payload = read_population_file(path, file_format=IMAGE_FORMAT)
    population = ImagePopulation(**payload["hparams"], seeds=payload["seeds"])
    population.load_state_dict(payload["state_dict"])
    return population, payload


def load_image_member(path: str | Path, index: int) -> ImageClassifier:
    """Member ``index`` of a saved image population as a plain ``ImageClassifier``."""
    population, _ = load_image_population(path)
    return population.member(index)
