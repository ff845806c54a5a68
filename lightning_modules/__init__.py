"""LightningModules: the tabular MLP, a population of them trained at once, and the image classifier."""

from lightning_modules.image_classifier import ImageClassifier, create_image_model
from lightning_modules.mlp import MLPClassifier, build_mlp
from lightning_modules.population import PopulationMLP
from lightning_modules.population_io import load_member, load_population, save_population

__all__ = [
    "ImageClassifier",
    "MLPClassifier",
    "PopulationMLP",
    "build_mlp",
    "create_image_model",
    "load_member",
    "load_population",
    "save_population",
]
