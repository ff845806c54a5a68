"""DataModules: the five financial datasets of Ley et al., two moons, and image sets
(ImageNet-layout folders or archives, MNIST-5k, Fashion-MNIST)."""

from datamodules.errors import InputError
from datamodules.images import (
    FashionMNISTDataModule,
    ImageDataModule,
    ImageFolderDataModule,
    MNIST5kDataModule,
    unpack_archive,
)
from datamodules.specs import DATASETS, DatasetSpec, get_spec
from datamodules.tabular import FinancialDataModule, TabularDataModule, TwoMoonsDataModule

__all__ = [
    "DATASETS",
    "DatasetSpec",
    "FashionMNISTDataModule",
    "FinancialDataModule",
    "ImageDataModule",
    "ImageFolderDataModule",
    "InputError",
    "MNIST5kDataModule",
    "TabularDataModule",
    "TwoMoonsDataModule",
    "get_spec",
    "unpack_archive",
]
