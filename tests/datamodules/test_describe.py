"""``python -m datamodules.describe`` (datamodules/describe.py): a table file described as
CSVDataModule takes it (its class counts against pandas' ``value_counts``), image folders and
archives listed from their files, which names are tables, and a table without ``--target`` named."""

from __future__ import annotations

import re

import pytest

from datamodules import describe as describe_cli
from datamodules.describe import describe_images, is_table, main as describe_main
from foundation.errors import InputError, run_entry_point
from tests.datamodules.test_csv_table import make_table, write
from tests.datamodules.test_images import make_archive, make_folder


@pytest.fixture
def table(tmp_path):
    frame = make_table()
    return frame, write(frame, tmp_path / "scores.csv")


@pytest.fixture
def folder(tmp_path):
    arrays = make_folder(tmp_path / "data")
    return tmp_path / "data", arrays


def test_describe_a_table_file(table, capsys):
    _, path = table
    with pytest.raises(SystemExit) as stop:
        run_entry_point(describe_cli.main, [path, "--target", "label"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    for expected in ["90 rows; 5 features after one-hot", "customer", "dropped (ID-like)", "dropped (constant)",
                     "categorical (3 categories)", "numeric", "integers", "target", "Rule: numbers, integers"]:
        assert expected in " ".join(out.split())  # rich wraps the title
    counts = make_table().label.value_counts()
    for label in ("bad", "good"):
        assert re.search(rf"│ {label}\s+│\s+{counts[label]} │", out), out


def test_describe_lists_image_sets(folder, tmp_path, capsys):
    root, _ = folder
    archive = make_archive(root, tmp_path / "tiny.tar.gz")
    describe_main([str(root), str(archive)])
    out = capsys.readouterr().out
    assert "Image sets" in out and "data" in out and "tiny" in out and "3x8x8" in out


def test_which_names_are_tables_and_a_table_needs_its_target(folder, tmp_path):
    root, _ = folder
    assert is_table("my.csv") and is_table("t.parquet") and not is_table("images.tar.gz") and not is_table("german")
    info = describe_images(str(root))
    assert (info["classes"], info["train"], info["test"], info["image"]) == (3, 12, 12, "3x8x8")
    with pytest.raises(InputError, match="my.csv: option --target is missing"):
        describe_main(["my.csv"])
