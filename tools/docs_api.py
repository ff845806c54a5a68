"""Write the API reference's pages while `mkdocs build` runs (the mkdocs-gen-files plugin, mkdocs.yml).

One page per public module of the five packages (recursively; a module or package whose name
starts with "_" other than ``__init__`` is private), at ``api/<dotted.name>.md``, each holding
the module's mkdocstrings block, and ``api/SUMMARY.md``, the section's navigation (read by
mkdocs-literate-nav). Nothing is written into docs/: the pages exist only in the build, so a
new module gets its page without an edit here. Run directly, it prints the modules it covers.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("foundation", "lightning_modules", "datamodules", "callbacks", "evaluators")


def public_modules() -> list[str]:
    """Dotted names of the public modules, each package before its modules, in file order."""
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if any(part.startswith("_") for part in parts) or "__pycache__" in path.parts:
                continue
            names.append(".".join(parts))
    return sorted(names, key=lambda name: name.split("."))


def write_pages() -> None:
    import mkdocs_gen_files

    nav = mkdocs_gen_files.Nav()
    for name in public_modules():
        parts = tuple(name.split("."))
        nav[parts] = f"{name}.md"
        with mkdocs_gen_files.open(f"api/{name}.md", "w") as page:
            page.write(f"# `{name}`\n\n::: {name}\n")
        source = ROOT / Path(*parts)
        source = source / "__init__.py" if source.is_dir() else source.with_suffix(".py")
        mkdocs_gen_files.set_edit_path(f"api/{name}.md", source.relative_to(ROOT))
    with mkdocs_gen_files.open("api/index.md", "w") as index:
        index.write(overview())
    with mkdocs_gen_files.open("api/SUMMARY.md", "w") as summary:
        summary.write("* [Overview](index.md)\n")
        summary.writelines(nav.build_literate_nav())


def overview() -> str:
    """api/index.md: every module with the first paragraph of its docstring, package by package."""
    import ast

    lines = ["# API reference\n", "Generated from the docstrings of the packages' public modules "
             "(`make docs`; `tools/docs_api.py` lists them, so a new module gets its page).\n"]
    for name in public_modules():
        path = ROOT / Path(*name.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        first = " ".join(doc.split("\n\n")[0].split())  # the docstring's first paragraph
        if "." not in name:
            lines.append(f"\n## `{name}`\n")
        lines.append(f"- [`{name}`]({name}.md){': ' + first if first else ''}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print("\n".join(public_modules()))
    sys.exit(0)
elif __name__ == "<run_path>":  # run by mkdocs-gen-files (runpy.run_path); not when a test imports it
    write_pages()
