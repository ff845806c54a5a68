"""foundation.files.atomic_write: the whole new file or the old one, and no temporary left."""

from __future__ import annotations

import pytest

from foundation.files import atomic_open, atomic_write


def test_atomic_write_replaces_the_file_through_a_hidden_temporary_beside_it(tmp_path):
    target = tmp_path / "metrics.json"
    target.write_text("old")
    seen = []

    def write(tmp):
        seen.append(tmp)
        tmp.write_text("new")
        assert target.read_text() == "old"  # untouched until the move

    atomic_write(target, write)
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["metrics.json"]
    assert seen[0].parent == tmp_path and seen[0].name.startswith(".metrics.json.tmp-")


def test_atomic_write_that_fails_keeps_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "population.pt"
    target.write_text("old")

    def half_then_crash(tmp):
        tmp.write_text("ha")
        raise KeyboardInterrupt  # Ctrl-C mid-write

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, half_then_crash)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["population.pt"]


def test_atomic_open_changes_the_file_only_when_its_block_ends_without_error(tmp_path):
    target = tmp_path / "table.csv"
    target.write_text("old\n")
    with pytest.raises(ValueError):
        with atomic_open(target, newline="") as f:
            f.write("half")
            raise ValueError("a row that cannot be written")
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["table.csv"]
    with atomic_open(target, newline="") as f:
        f.write("new\n")
    assert target.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["table.csv"]
