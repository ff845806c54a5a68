"""Bad input and how every entry point ends (foundation/errors.py): an ``InputError``, also one a
library wrapped, is one line on standard error with status 2; any other exception its type and
message on one line with status 1; a full disk status 2 naming the folder; Ctrl-C 130; the
traceback with ``--debug``; and the small wording helpers."""

from __future__ import annotations

import errno

import pytest

from foundation.errors import (DiskFull, InputError, OneLineParser, disk_full_in, input_error_in, number_of, one_line,
                               run_entry_point, shorten)  # fmt: skip


def ended(main, argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        run_entry_point(main, argv)
    return exit_.value.code, capsys.readouterr().err


def raising(err):
    def main(argv):
        raise err

    return main


def test_how_an_entry_point_ends(capsys, tmp_path):
    assert ended(lambda argv: None, [], capsys) == (0, "")
    wrapped = RuntimeError("jsonargparse failed")
    wrapped.__cause__ = InputError("option x=1;\n  expected 2")
    assert ended(raising(wrapped), [], capsys) == (2, "error: option x=1; expected 2\n")
    other = ended(raising(KeyError("k")), [], capsys)
    assert other == (1, "error: KeyError: 'k' (run with --debug for the traceback)\n")
    code, err = ended(raising(OSError(errno.ENOSPC, "No space", str(tmp_path / "f.pt"))), [], capsys)
    assert code == 2 and err.startswith(f"error: out of disk space in {tmp_path}, ")
    assert err.endswith(" bytes free; the previous files are intact: free some space, then run again (or --resume)\n")
    assert ended(raising(KeyboardInterrupt()), [], capsys) == (130, "interrupted\n")
    with pytest.raises(KeyError):
        run_entry_point(raising(KeyError("k")), ["--debug"])


def test_causes_are_found_behind_wrappers(tmp_path):
    inner = InputError("bad")
    outer = ValueError("outer")
    outer.__context__ = inner
    assert input_error_in(outer) is inner and input_error_in(ValueError()) is None
    full = disk_full_in(OSError(errno.EDQUOT, "quota", str(tmp_path / "x")))
    assert isinstance(full, DiskFull) and full.folder == str(tmp_path) and full.errno == errno.ENOSPC
    assert disk_full_in(OSError(errno.EACCES, "denied")) is None
    assert "the write needed 1,234 bytes" in str(DiskFull(tmp_path, size=1234))
    assert "the write needed more than 10 bytes" in str(DiskFull(tmp_path, written=10))


def test_the_wording_helpers():
    assert number_of(1, "row") == "1 row" and number_of(7000, "row") == "7,000 rows"
    assert number_of(2, "category", "categories") == "2 categories"
    assert shorten(["a", "b"]) == "'a', 'b'"
    assert shorten(range(100), limit=10, render=str) == "0, 1, 2, 3 and 96 more"
    assert one_line("a\n  b \n\n c") == "a b c"
    with pytest.raises(InputError, match="^prog: the following arguments are required: x; see prog --help$"):
        parser = OneLineParser(prog="prog")
        parser.add_argument("x")
        parser.parse_args([])
