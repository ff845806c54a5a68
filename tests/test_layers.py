"""The packages' layers (docs/development.md, "Layout"), read from the source's import statements:
``foundation`` imports none of the project's other packages; no import circle among the project's
modules (their top-level imports, a package's ``__init__`` included where another package's module
imports through it); and no module imports a project module inside a function, where such an
import would hide a circle."""

from __future__ import annotations

import ast
from pathlib import Path
from tests.support import ROOT

BOTTOM = "foundation"
PACKAGES = (BOTTOM, "lightning_modules", "datamodules", "callbacks", "evaluators")
PROJECT = (*PACKAGES, "train", "evaluate", "portable", "bench", "tools", "tests")


def modules() -> dict[str, Path]:
    """Every module of the packages by dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(node: ast.Import | ast.ImportFrom, name: str, path: Path) -> list[str]:
    """The dotted names an import statement of module ``name`` (at ``path``) names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def imports(name: str, path: Path) -> tuple[set[str], list[tuple[str, int]]]:
    """The project names module ``name`` imports at its top level (outside ``if TYPE_CHECKING``:
    annotations only), and those it imports inside a function, with their line."""
    top: set[str] = set()
    inner: list[tuple[str, int]] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in imported(child, name, path):
                    if target.split(".")[0] in PROJECT:
                        (inner.append((target, child.lineno)) if in_function else top.add(target))
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(ast.parse(path.read_text()), False)
    return top, inner


def graph() -> dict[str, set[str]]:
    """Module -> the project modules its top-level imports run: the module named (the longest
    dotted prefix that is a module), and the ``__init__`` of each package above it that the
    importer is not itself inside."""
    found = modules()
    edges = {}
    for name, path in found.items():
        targets = set()
        for target in imports(name, path)[0]:
            parts = target.split(".")
            for end in range(1, len(parts) + 1):
                prefix = ".".join(parts[:end])
                inside = name == prefix or name.startswith(prefix + ".")
                if prefix in found and not inside:
                    targets.add(prefix)
        edges[name] = targets
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges[v]:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_bottom_package_imports_nothing_above_it():
    found = modules()
    above = [
        f"{name} imports {target} (line {line})" if line else f"{name} imports {target}"
        for name, path in found.items()
        if name.split(".")[0] == BOTTOM
        for target, line in [*((t, 0) for t in imports(name, path)[0]), *imports(name, path)[1]]
        if target.split(".")[0] != BOTTOM
    ]
    assert not above, above


def test_no_import_circles():
    assert circles(graph()) == []


def test_the_circle_finder_finds_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_project_import_inside_a_function():
    """An import inside a function runs when the function does, so it can hold a circle together
    that the module's top would refuse; the packages import each other at the top only."""
    inner = [f"{name}:{line} imports {target}" for name, path in modules().items()
             for target, line in imports(name, path)[1]]  # fmt: skip
    assert not inner, inner
