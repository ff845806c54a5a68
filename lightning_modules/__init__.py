"""LightningModules: the tabular MLP and a population of them trained at once."""

from lightning_modules.mlp import MLPClassifier, build_mlp
from lightning_modules.population import PopulationMLP
from lightning_modules.population_io import load_member, load_population, save_population

__all__ = ["MLPClassifier", "PopulationMLP", "build_mlp", "load_member", "load_population", "save_population"]
