"""DataModules: the five financial datasets of Ley et al., two moons, any CSV or Parquet table, image sets
(ImageNet-layout folders or archives, MNIST-5k, Fashion-MNIST), and data with a known ground truth
(a synthetic table, images with planted patterns)."""

import importlib

from datamodules.csv_table import CSVDataModule
from datamodules.image_base import ImageDataModule
from datamodules.image_cache import unpack_archive
from datamodules.images import FashionMNISTDataModule, ImageFolderDataModule, MNIST5kDataModule
from datamodules.planted_patterns import PlantedPatternDataModule
from datamodules.specs import DATASETS, DatasetSpec, get_spec
from datamodules.synthetic_table import SyntheticTableDataModule
from datamodules.tabular import FinancialDataModule, TabularDataModule, TwoMoonsDataModule
from foundation.errors import InputError


def data_location_option(class_path: str) -> str:
    """The init option of the datamodule class ``class_path`` (a config's ``data.class_path``)
    that says where its data lies: the class's ``location_option`` (``data_dir``, or ``root``
    for an image folder or archive). An ``InputError`` for a class that reads no path."""
    module, _, name = class_path.rpartition(".")
    option = getattr(getattr(importlib.import_module(module), name), "location_option", None)
    if option is None:
        raise InputError(
            f"the run's datamodule {name} reads its data from no path, so its data cannot be moved; expected a "
            "datamodule with a data location (FinancialDataModule's or FashionMNISTDataModule's data_dir, "
            "ImageFolderDataModule's root)"
        )
    return option


__all__ = [
    "CSVDataModule",
    "DATASETS",
    "DatasetSpec",
    "FashionMNISTDataModule",
    "FinancialDataModule",
    "ImageDataModule",
    "ImageFolderDataModule",
    "InputError",
    "MNIST5kDataModule",
    "PlantedPatternDataModule",
    "SyntheticTableDataModule",
    "TabularDataModule",
    "TwoMoonsDataModule",
    "data_location_option",
    "get_spec",
    "unpack_archive",
]
