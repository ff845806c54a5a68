"""The datamodules package's own function (datamodules/__init__.py): ``data_location_option``, the
init option naming where a config's datamodule reads its data, for each kind the package offers,
and a datamodule that reads no path refused."""

from __future__ import annotations

import pytest

from datamodules import data_location_option
from foundation.errors import InputError


@pytest.mark.parametrize("class_path, option", [
    ("datamodules.FinancialDataModule", "data_dir"),
    ("datamodules.tabular.FinancialDataModule", "data_dir"),
    ("datamodules.CSVDataModule", "path"),
    ("datamodules.ImageFolderDataModule", "root"),
    ("datamodules.FashionMNISTDataModule", "data_dir"),
])  # fmt: skip
def test_the_option_naming_the_data(class_path, option):
    assert data_location_option(class_path) == option


def test_a_datamodule_without_a_path_is_refused():
    with pytest.raises(InputError, match="the run's datamodule TwoMoonsDataModule reads its data from no path"):
        data_location_option("datamodules.TwoMoonsDataModule")
