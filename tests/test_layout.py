"""The tests mirror the packages (tests/README.md): library module ``<package path>/<module>.py``
of the packages ``test_layers.PACKAGES`` has its test file ``tests/<package path>/test_<module>.py``.
A package's ``__init__.py`` counts as a module named after its package
(``tests/<package path>/test_<package>.py``) where it defines a function or a class, not where it
only re-exports.

``WITHOUT_OWN_FILE`` is the short list of the modules that still lack their file, each with the test
files that exercise it. The tests fail when a module has neither its file nor an entry, and when a
listed module has gained its file (so the list cannot go stale). tests/README.md's section "Library
modules without a test file of their own" is rendered from the list:
``.venv/bin/python -m tests.test_layout --write`` rewrites it, and a test checks it is current."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.support import ROOT
from tests.test_layers import modules

README = ROOT / "tests" / "README.md"
HEADING = "## Library modules without a test file of their own"

# module -> the test files that exercise it (paths under tests/), or how it is exercised
WITHOUT_OWN_FILE: dict[str, str] = {
    "evaluators/reports/reliability/config.py": "`evaluators/reports/reliability/test_protocol.py`",
}


def library_modules() -> dict[str, Path]:
    """Library module (its path under the checkout, ``a/b.py``) -> its mirrored test file; an
    ``__init__.py`` only where it defines a function or a class."""
    found = {}
    for path in modules().values():
        if path.name == "__init__.py":
            if not any(isinstance(node, (ast.FunctionDef, ast.ClassDef)) for node in ast.parse(path.read_text()).body):
                continue
            test = f"test_{path.parent.name}.py"
        else:
            test = f"test_{path.name}"
        relative = path.relative_to(ROOT)
        found[relative.as_posix()] = ROOT / "tests" / relative.parent / test
    return found


def readme_section() -> str:
    """tests/README.md's section on the modules without a test file of their own, from ``WITHOUT_OWN_FILE``."""
    rows = "".join(f"| `{module}` | {where} |\n" for module, where in sorted(WITHOUT_OWN_FILE.items()))
    return (
        f"{HEADING}\n\n"
        f"{len(WITHOUT_OWN_FILE)} of the {len(library_modules())} library modules (an `__init__.py` counts where it "
        "defines a function or class) are\ntested only inside broader files. The list is `WITHOUT_OWN_FILE` in "
        "`tests/test_layout.py`, which fails\nwhen a module comes without its test file or a listed module gains "
        "one; `.venv/bin/python -m\ntests.test_layout --write` rewrites this section from it.\n\n"
        "| module | exercised by |\n|---|---|\n" + rows
    )


def readme_with_section(text: str) -> str:
    """README text ``text`` with its section replaced by ``readme_section()``."""
    start = text.index(HEADING)
    end = text.find("\n## ", start + len(HEADING))
    return text[:start] + readme_section() + (text[end:] if end >= 0 else "")


def test_every_library_module_has_its_test_file_or_an_entry():
    missing = [f"{module}: expected {test.relative_to(ROOT)}" for module, test in library_modules().items()
               if not test.exists() and module not in WITHOUT_OWN_FILE]  # fmt: skip
    assert not missing, missing


def test_no_listed_module_has_gained_its_file_or_gone():
    modules_ = library_modules()
    stale = [module for module in WITHOUT_OWN_FILE if module not in modules_ or modules_[module].exists()]
    assert not stale, f"remove from WITHOUT_OWN_FILE (the module is gone or has its own test file): {stale}"


def test_the_readme_section_is_current():
    assert README.read_text() == readme_with_section(README.read_text()), (
        "tests/README.md's list is stale: run .venv/bin/python -m tests.test_layout --write"
    )


def test_an_init_that_only_re_exports_is_no_module_and_one_that_defines_is():
    found = library_modules()
    assert "foundation/__init__.py" not in found and "evaluators/metrics/__init__.py" not in found
    assert found["datamodules/__init__.py"] == ROOT / "tests" / "datamodules" / "test_datamodules.py"
    assert found["foundation/files.py"] == ROOT / "tests" / "foundation" / "test_files.py"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.test_layout --write  (rewrites tests/README.md's list of modules "
                 "without a test file)")
    README.write_text(readme_with_section(README.read_text()))
