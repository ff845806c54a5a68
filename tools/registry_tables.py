"""The docs' tables of the registries, generated from them: docs/extending.md ("Registries") holds
one table per registry between ``<!-- registry: <kind> -->`` and ``<!-- /registry -->``.

``python tools/registry_tables.py`` prints whether the page's tables list every registered name
(and no other); ``--write`` regenerates them after an entry was added. tests/tools/
test_registry_tables.py checks the names of every table against its registry. Columns: the
name, what it applies to (``modalities``), what it reads (``needs``), a metric's direction,
its defaults (those of its signature unless declared) and its one-line help.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from datamodules.specs import DATASETS  # noqa: E402
from evaluators.aggregators.registry import AGGREGATORS  # noqa: E402
from evaluators.maps import EXPLAINERS  # noqa: E402
from evaluators.metrics.registry import METRICS  # noqa: E402
from evaluators.protocols.registry import PROTOCOLS  # noqa: E402
from foundation.files import write_text  # noqa: E402
from foundation.registry import Registry  # noqa: E402
from lightning_modules.ensembles import ENSEMBLES  # noqa: E402
from lightning_modules.image_classifier import ARCHITECTURES  # noqa: E402
from lightning_modules.population_base import POPULATIONS  # noqa: E402

PAGE = ROOT / "docs" / "extending.md"
REGISTRIES = {"explainer": EXPLAINERS, "metric": METRICS, "aggregator": AGGREGATORS, "protocol": PROTOCOLS,
              "ensemble": ENSEMBLES, "population": POPULATIONS, "dataset": DATASETS,
              "architecture": ARCHITECTURES}  # fmt: skip
BLOCK = re.compile(r"(<!-- registry: (\w+) -->\n)(.*?)(<!-- /registry -->)", re.S)
PLAIN = (bool, int, float, str, type(None))


def _value(value) -> str:
    if isinstance(value, PLAIN):
        return repr(value)
    if isinstance(value, tuple) and all(isinstance(v, PLAIN) for v in value):
        return repr(value)
    return type(value).__name__  # a tensor, a function: its kind only


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(registry) -> str:
    """The markdown table of ``registry`` (a plain dict of names: the names alone)."""
    lines = ["| name | applies to | needs | higher is better | defaults | what |", "|---|---|---|---|---|---|"]
    for name in registry:
        if not isinstance(registry, Registry):
            lines.append(f"| `{name}` | | | | | |")
            continue
        entry = registry[name]
        direction = {True: "yes", False: "no", None: ""}[entry.higher_is_better]
        defaults = ", ".join(f"{k}={_value(v)}" for k, v in entry.defaults.items())
        lines.append(f"| `{name}` | {', '.join(entry.modalities)} | {', '.join(entry.needs)} | {direction} | "
                     f"{_cell(defaults)} | {_cell(entry.help)} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def tables(text: str) -> dict[str, str]:
    """The page's registry tables: kind -> its table as written."""
    return {kind: body for _, kind, body, _ in BLOCK.findall(text)}


def names_in(body: str) -> list[str]:
    """The names of a table's first column (rows below the header)."""
    return re.findall(r"^\| `([^`]+)` \|", body, re.M)


def rendered(text: str) -> str:
    """``text`` with every registry table regenerated from its registry."""
    return BLOCK.sub(lambda m: m.group(1) + table(REGISTRIES[m.group(2)]) + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/registry_tables.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--write", action="store_true", help="regenerate the tables of docs/extending.md")
    args = parser.parse_args(argv)
    text = PAGE.read_text()
    if args.write:
        write_text(PAGE, rendered(text))
        return 0
    found = tables(text)
    wrong = [kind for kind, registry in REGISTRIES.items() if names_in(found.get(kind, "")) != list(registry)]
    print(f"tables out of date: {wrong}; run python tools/registry_tables.py --write" if wrong else "tables up to date")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
