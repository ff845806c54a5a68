"""The README's command blocks run verbatim, as a reader of the README runs them: in a
shell whose ``python`` is the project's environment (``source .venv/bin/activate``),
from the checkout. A block marked ``<!-- long -->`` (minutes or more) is skipped; every
command of a block marked ``<!-- fails -->`` must end as the README says bad input ends
(status 2, one line on standard error, no traceback); every other command must succeed.
The blocks are read and run by tests.support.helpers (``command_blocks``, ``run_block``), as the
docs pages' are (tests/docs/test_docs_commands.py)."""

from __future__ import annotations

import pytest

from tests.support.helpers import ROOT, command_blocks, run_block

BLOCKS = command_blocks(ROOT / "README.md")


def test_every_block_is_run_or_marked():
    markers = [block.marker for block in BLOCKS]
    assert set(markers) <= {"", "long", "fails"}, markers
    assert markers.count("") >= 2 and "fails" in markers  # the checks below have something to run


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.marker != "long"], ids=lambda b: str(b.line))
def test_readme_block_runs_verbatim(block, data_dir):
    run_block(block)
