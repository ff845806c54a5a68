"""Bad user input, and the one way every entry point ends on an error.

``InputError`` names the file, column or option and what was expected. Entry points
(`train.py`, `evaluate.py`, `python -m datamodules.describe`) run their ``main``
through ``run_entry_point``: an ``InputError`` (also one that a library wrapped, e.g.
jsonargparse while instantiating) or a bad command line ends with its message on one
line of standard error and exit status 2 (a message that names an option also names the
documentation page that describes it: ``foundation.docs_pages``); any other exception with its type and
message on one line and status 1; out of disk space (``DiskFull``, or an ``OSError`` ENOSPC
or EDQUOT) with status 2 and the folder; Ctrl-C with status 130. No traceback, unless the
command line holds ``--debug`` or the environment sets ``RELIABLE_EXPLANATIONS_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import sys
from typing import Callable, NoReturn

from foundation.docs_pages import with_page

DEBUG_ENV = "RELIABLE_EXPLANATIONS_DEBUG"


class InputError(ValueError):
    """Bad input from the user: names the file, column or option and what was expected."""


class OneLineParser(argparse.ArgumentParser):
    """``argparse`` whose errors are ``InputError``s (one line, no usage dump)."""

    def error(self, message: str) -> NoReturn:
        raise InputError(f"{self.prog}: {message}; see {self.prog} --help")


def input_error_in(err: BaseException | None) -> InputError | None:
    """The InputError behind ``err``, also when a library wrapped it."""
    while err is not None:
        if isinstance(err, InputError):
            return err
        err = err.__cause__ or err.__context__
    return None


def number_of(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` agreeing in number, the count with thousands separators: "1 row", "7,000 rows"."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def shorten(values, limit: int = 300, render=repr) -> str:
    """``values`` joined by ", " (each by ``render``: ``repr`` quotes text as ``'abc'``),
    as many of the first as fit in about ``limit`` characters, then "and N more": so a
    message listing a column's categories or a table's columns stays about one line."""
    values = list(values)
    shown: list[str] = []
    for value in values:
        text = render(value)
        if shown and len(", ".join([*shown, text])) > limit:
            break
        shown.append(text[:limit])
    rest = len(values) - len(shown)
    return ", ".join(shown) + (f" and {rest:,} more" if rest else "")


class DiskFull(OSError):
    """Out of disk space while writing into ``folder``: names it, the bytes the write needed
    (``size``, where known; else at least the ``written`` ones) and the space left."""

    def __init__(self, folder, size: int | None = None, written: int = 0) -> None:
        needed = (f"; the write needed {size:,} bytes" if size is not None
                  else f"; the write needed more than {written:,} bytes" if written else "")  # fmt: skip
        try:
            left = f", {shutil.disk_usage(folder).free:,} bytes free"
        except OSError:
            left = ""
        super().__init__(errno.ENOSPC, f"out of disk space in {folder}{needed}{left}; the previous files are "
                                       "intact: free some space, then run again (or --resume)")  # fmt: skip
        self.folder = folder

    def __str__(self) -> str:
        return self.strerror


def disk_full_in(err: BaseException | None) -> DiskFull | None:
    """The ``DiskFull`` behind ``err``; one made from an ``OSError`` ENOSPC or EDQUOT behind it
    (its file's folder, where it names one)."""
    while err is not None:
        if isinstance(err, DiskFull):
            return err
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return DiskFull(os.path.dirname(os.path.abspath(err.filename)) if err.filename else "a folder")
        err = err.__cause__ or err.__context__
    return None


def one_line(message: str) -> str:
    return " ".join(part.strip() for part in str(message).splitlines() if part.strip())


def run_entry_point(main: Callable[[list[str]], object], argv: list[str] | None = None) -> NoReturn:
    """Run ``main(argv)`` (default: the command line, handed over explicitly and taken
    off ``sys.argv``) and exit as the module's docstring says."""
    if argv is None:
        argv, sys.argv[1:] = sys.argv[1:], []
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    try:
        main(argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as err:  # noqa: BLE001 (the one place that turns any failure into a line)
        if debug:
            raise
        cause = input_error_in(err) or disk_full_in(err)
        if cause is not None:
            message = one_line(cause)
            if isinstance(cause, InputError):
                message = with_page(message, getattr(getattr(main, "__code__", None), "co_filename", ""), argv)
            print(f"error: {message}", file=sys.stderr)
            sys.exit(2)
        print(f"error: {type(err).__name__}: {one_line(err)} (run with --debug for the traceback)", file=sys.stderr)
        sys.exit(1)
    sys.exit(0)
