"""LightningModules: the tabular MLP, a population of them trained at once, the image classifier, a
population of image classifiers, and any user's network (``Classifier``, ``ModulePopulation``)."""

from lightning_modules.classifier import Classifier
from lightning_modules.image_classifier import ImageClassifier, create_image_model
from lightning_modules.image_population import ImagePopulation
from lightning_modules.mlp import MLPClassifier, build_mlp
from lightning_modules.module_population import ModulePopulation
from lightning_modules.population import PopulationMLP
from lightning_modules.population_io import load_member, load_population, save_population

# the image population's own names from before the one population file format
load_image_member, load_image_population, save_image_population = load_member, load_population, save_population

__all__ = [
    "Classifier",
    "ImageClassifier",
    "ImagePopulation",
    "MLPClassifier",
    "ModulePopulation",
    "PopulationMLP",
    "build_mlp",
    "create_image_model",
    "load_image_member",
    "load_image_population",
    "load_member",
    "load_population",
    "save_image_population",
    "save_population",
]
