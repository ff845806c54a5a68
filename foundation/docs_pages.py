"""Which documentation page explains an option: the one table behind "every error message that
names an option names its page too".

``run_entry_point`` (``foundation.errors``) ends every entry point's bad input with one line;
where that line names an option (``--model_class``, ``option device='tpu'``, ``unknown option(s)
['n_inputs']``, jsonargparse's ``Option 'size'``) and names no page yet, it gains the page of
the task the option serves, from :func:`page_for`: the option's own page where the option
serves one task whatever the command (``OPTION_PAGES``, exact names or dotted prefixes), else
the page of the command it was given to (``COMMAND_PAGES``: evaluate.py's protocol, train.py,
another entry point). Pages are paths from the checkout's root; an entry may list several, of
which the first that exists in the checkout is named (a page that the documentation is growing
into, then the one that holds the text today). tests/foundation/test_docs_pages.py checks that each entry
names a page that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The page of each entry point and evaluate.py command: where its options are described.
COMMAND_PAGES: dict[str, str | tuple[str, ...]] = {
    "train.py": ("docs/getting-started.md", "README.md"),  # and a page per option family below
    "describe.py": ("docs/your_data.md", "README.md"),  # python -m datamodules.describe
    "evaluate.py": ("docs/getting-started.md", "README.md"),
    "evaluate.py run": "docs/your_model.md",
    "evaluate.py explain": "docs/explainers.md",
    "evaluate.py consistency": ("docs/consistency.md", "docs/table1.md"),
    "evaluate.py landscape": ("docs/landscape.md", "README.md"),
    "evaluate.py sigma": ("docs/landscape.md", "README.md"),
    "evaluate.py aggregation": "docs/aggregation.md",
    "evaluate.py optimised": "docs/optimised_aggregation.md",
    "evaluate.py roar": "docs/roar.md",
    "evaluate.py sanity": "docs/sanity_checks.md",
    "evaluate.py data_randomisation": "docs/sanity_checks.md",
    "evaluate.py report": "docs/trust.md",
}

# Options that serve one task whichever command they are given to. A key ending in "." is a
# prefix: every option under it (train.py's dotted options).
OPTION_PAGES: dict[str, str | tuple[str, ...]] = {
    "model_class": "docs/your_model.md",
    "model_args": "docs/your_model.md",
    "data_config": "docs/your_model.md",
    "model_inputs": "docs/your_model.md",
    "model_mean": "docs/your_model.md",
    "model_std": "docs/your_model.md",
    "shard": "docs/roar.md",
    "rankings_only": "docs/roar.md",
    "rankings_shard_size": "docs/roar.md",
    "portable": ("docs/reliability.md", "README.md"),
    "population.": ("docs/populations.md", "docs/tabular_population.md"),
    "data.": ("docs/your_data.md", "README.md"),
    # CSVDataModule's options as its own messages name them (option drop, max_categories=1000, ...)
    **dict.fromkeys(["categorical", "numeric", "drop", "missing", "max_categories", "integer_categories",
                     "unseen_category"], "docs/your_data.md"),
}


def existing(pages: str | tuple[str, ...]) -> str:
    """The first of ``pages`` that exists in the checkout (the last where none does)."""
    pages = (pages,) if isinstance(pages, str) else pages
    return next((page for page in pages if (ROOT / page).is_file()), pages[-1])


# How a one-line message names an option: a command-line flag, "option NAME", "option(s)
# ['NAME', ...]", jsonargparse's "Option 'NAME'" and "key 'NAME'".
_NAMED = re.compile(r"--([A-Za-z][\w.]*)|\b(?:[Oo]ptions?|option\(s\)|[Kk]ey)\s+\[?[\"']?([A-Za-z_][\w.]*)")


def named_options(message: str) -> list[str]:
    """The options ``message`` names, in order (without leading dashes)."""
    return [name for m in _NAMED.finditer(message) if (name := m.group(1) or m.group(2)) != "help"]


def command_of(program: str, argv: list[str]) -> str:
    """``COMMAND_PAGES``'s key for ``program`` (a script's file name) run with ``argv``:
    ``evaluate.py <command>`` where argv names one of its commands."""
    program = Path(program).name
    if program == "evaluate.py":
        first = next((a for a in argv if not a.startswith("-")), "")
        if f"evaluate.py {first}" in COMMAND_PAGES:
            return f"evaluate.py {first}"
    return program


def page_for(message: str, program: str, argv: list[str]) -> str | None:
    """The page that explains the option ``message`` names (None where it names none):
    the option's own page, else its command's."""
    options = named_options(message)
    if not options:
        return None
    for option in options:
        if option in OPTION_PAGES:
            return existing(OPTION_PAGES[option])
        for key, pages in OPTION_PAGES.items():
            if key.endswith(".") and option.startswith(key):
                return existing(pages)
    pages = COMMAND_PAGES.get(command_of(program, argv))
    return None if pages is None else existing(pages)


def with_page(message: str, program: str, argv: list[str]) -> str:
    """``message`` with "(see <page>)" after it where it names an option and no page yet
    ("... --help" becomes "... --help and <page>")."""
    page = page_for(message, program, argv)
    if page is None or "docs/" in message or "README.md" in message:
        return message
    return f"{message} and {page}" if message.endswith("--help") else f"{message} (see {page})"
