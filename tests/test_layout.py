"""Tests mirror the packages: every library module ``<package path>/<module>.py`` of the packages
``test_layers.PACKAGES`` has its test file ``tests/<package path>/test_<module>.py``.
A package's ``__init__.py`` counts as a module named after its package
(``tests/<package path>/test_<package>.py``) where it defines a function or a class, not where it
only re-exports. A new module without its test file fails here, naming the file expected."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import ROOT
from tests.test_layers import modules


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


def test_every_library_module_has_its_test_file():
    missing = [f"{module}: expected {test.relative_to(ROOT)}" for module, test in library_modules().items()
               if not test.exists()]  # fmt: skip
    assert not missing, missing


def test_an_init_that_only_re_exports_is_no_module_and_one_that_defines_is():
    found = library_modules()
    assert "foundation/__init__.py" not in found and "evaluators/metrics/__init__.py" not in found
    assert found["datamodules/__init__.py"] == ROOT / "tests" / "datamodules" / "test_datamodules.py"
    assert found["foundation/files.py"] == ROOT / "tests" / "foundation" / "test_files.py"
