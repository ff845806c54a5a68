"""The README's command blocks run verbatim, as a reader of the README runs them: in a
shell whose ``python`` is the project's environment (``source .venv/bin/activate``),
from the checkout. A block marked ``<!-- long -->`` (minutes or more) is skipped; every
command of a block marked ``<!-- fails -->`` must end as the README says bad input ends
(status 2, one line on standard error, no traceback); every other command must succeed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def blocks() -> list[tuple[int, str, list[tuple[str, str]]]]:
    """(line, marker, [(command, trailing comment)]) for every ```bash block, continuation
    lines joined."""
    lines = (ROOT / "README.md").read_text().splitlines()
    found = []
    for i, line in enumerate(lines):
        if line.strip() != "```bash":
            continue
        marker = re.fullmatch(r"<!-- (\w+) -->", lines[i - 1].strip() if i else "")
        end = lines.index("```", i + 1)
        text = "\n".join(lines[i + 1 : end]).replace("\\\n", " ")
        split = (re.match(r"(.*?)(?:\s#\s?(.*))?$", t) for t in text.splitlines())
        commands = [(m.group(1).strip(), m.group(2) or "") for m in split if m.group(1).strip()]
        found.append((i + 1, marker.group(1) if marker else "", commands))
    return found


def test_every_block_is_run_or_marked():
    markers = [marker for _, marker, _ in blocks()]
    assert set(markers) <= {"", "long", "fails"}, markers
    assert markers.count("") >= 2 and "fails" in markers  # the checks below have something to run


@pytest.mark.parametrize("line, marker, commands", [b for b in blocks() if b[1] != "long"],
                         ids=lambda v: str(v) if isinstance(v, int) else None)  # fmt: skip
def test_readme_block_runs_verbatim(line, marker, commands, data_dir):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("RELIABLE_EXPLANATIONS_DEBUG", None)
    for command, comment in commands:
        result = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=300)  # fmt: skip
        if marker == "fails":
            lines = result.stderr.strip().splitlines()
            assert result.returncode == 2 and len(lines) == 1, (command, result.stderr)
            assert lines[0].startswith("error: "), (command, lines[0])
            for shown in comment.split("..."):  # what the README shows of the message is in it
                assert shown.strip(" ;:") in lines[0], (command, shown, lines[0])
        else:
            assert result.returncode == 0, (command, result.stderr[-2000:])
