"""DataModules: the five financial datasets of Ley et al. and two moons."""

from datamodules.errors import InputError
from datamodules.specs import DATASETS, DatasetSpec, get_spec
from datamodules.tabular import FinancialDataModule, TabularDataModule, TwoMoonsDataModule

__all__ = [
    "DATASETS",
    "DatasetSpec",
    "FinancialDataModule",
    "InputError",
    "TabularDataModule",
    "TwoMoonsDataModule",
    "get_spec",
]
