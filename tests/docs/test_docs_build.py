"""The documentation site builds as `make docs` builds it (mkdocs.yml), with every warning an
error: a broken link or anchor, a page left out of the nav, a docstring that does not render.
Into a temporary folder, with no network (nothing in the build fetches; mkdocs and its plugins
are pinned in setup.cfg's docs extra, so a missing one fails here rather than skips). And the API
reference has a page for every public module of the five packages (tools/docs_api.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

from tests.support.helpers import ROOT


def api_modules() -> list[str]:
    spec = importlib.util.spec_from_file_location("docs_api", ROOT / "tools" / "docs_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.public_modules()


def test_api_pages_cover_every_public_module():
    names = api_modules()
    for package in ("foundation", "lightning_modules", "datamodules", "callbacks", "evaluators"):
        assert package in names
    assert "evaluators.protocols.roar.grid" in names and "foundation.errors" in names  # recursive
    assert not [name for name in names if any(part.startswith("_") for part in name.split("."))]
    assert not (ROOT / "docs" / "api").exists()  # the pages exist only inside a build, never in docs/


def test_site_builds_strict(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    warnings = [line for line in result.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert result.returncode == 0 and not warnings, result.stderr[-3000:]
    site = tmp_path / "site"
    for name in api_modules():
        assert (site / "api" / f"{name}.html").is_file(), name
    assert "run_entry_point" in (site / "api" / "foundation.errors.html").read_text()
