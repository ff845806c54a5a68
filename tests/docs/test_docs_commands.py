"""Every ```bash block of every page under docs/ runs verbatim, by the README's rules
(tests/docs/test_readme_commands.py, tests.support.helpers ``command_blocks`` and ``run_block``): a block
marked ``<!-- fails -->`` must end as bad input ends (status 2, one line on standard error
holding what the command's comment shows of it); a block marked long is skipped, and on these
pages and the README it says why: in its marker, ``<!-- long: trains for minutes -->``, or in its commands'
``#`` comments (``# 500 images, 50 min``); every other block must succeed (each command
within ``run_block``'s time-out; a block that takes minutes is marked long, not timed here:
a timing on a loaded 2-core machine says little)."""

from __future__ import annotations

import pytest

from tests.support.helpers import ROOT, command_blocks, run_block

PAGES = sorted((ROOT / "docs").rglob("*.md"))
BLOCKS = [(page.relative_to(ROOT).as_posix(), block) for page in PAGES for block in command_blocks(page)]


def test_every_block_is_run_or_marked_with_a_reason():
    assert BLOCKS  # the pages hold command blocks
    wrong = []
    readme = [("README.md", block) for block in command_blocks(ROOT / "README.md")]  # run by test_readme_commands
    for page, block in BLOCKS + readme:
        reason = block.reason or " ".join(comment for _, comment in block.commands).strip()
        if block.marker not in ("", "long", "fails"):
            wrong.append(f"{page}:{block.line}: unknown marker {block.marker!r}")
        elif block.marker == "long" and not reason:
            wrong.append(f"{page}:{block.line}: a long block says why it is not run: <!-- long: <reason> -->")
        elif not block.commands:
            wrong.append(f"{page}:{block.line}: an empty command block")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("page, block", [(p, b) for p, b in BLOCKS if b.marker != "long"],
                         ids=lambda v: v if isinstance(v, str) else str(v.line))  # fmt: skip
def test_docs_block_runs_verbatim(page, block, data_dir):
    run_block(block)
