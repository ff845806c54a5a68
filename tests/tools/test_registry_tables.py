"""tools/registry_tables.py: every registered name is in its docs table and every name of a docs
table is registered (docs/extending.md's generated tables, docs/fidelity_metrics.md's own
table of metrics); the generator itself writes what the page holds, and a name registered at
run time makes the check fail until the table is regenerated."""

from __future__ import annotations

import pytest

from tools import registry_tables
from tools.registry_tables import PAGE, REGISTRIES, names_in, rendered, table, tables

ROOT = PAGE.parent.parent


@pytest.mark.parametrize("kind", list(REGISTRIES))
def test_each_registry_s_table_lists_exactly_its_names(kind):
    found = tables(PAGE.read_text())
    assert kind in found, f"docs/extending.md has no table of the {kind} registry"
    assert names_in(found[kind]) == list(REGISTRIES[kind]), "run: python tools/registry_tables.py --write"


def test_the_page_is_what_the_generator_writes_for_the_registries_on_this_branch():
    text = PAGE.read_text()
    for kind, body in tables(text).items():
        if kind != "explainer":  # its columns follow the explainer registry's shape, its names checked above
            assert body == table(REGISTRIES[kind]), kind
    assert names_in(tables(rendered(text))["metric"]) == names_in(tables(text)["metric"])


def test_the_fidelity_metrics_page_names_every_registered_metric_and_no_other():
    text = (ROOT / "docs" / "fidelity_metrics.md").read_text()
    header = text.index("| name | functional core | Metric | needs | higher is better |")
    rows = text[header:].split("\n\n")[0].splitlines()[2:]
    names = [name.strip() for row in rows for name in row.split("|")[1].split(",")]
    assert sorted(names) == sorted(REGISTRIES["metric"])


def test_a_name_registered_at_run_time_is_missing_from_its_table_until_regenerated(monkeypatch):
    from evaluators.aggregators.registry import AGGREGATORS

    monkeypatch.setattr(AGGREGATORS, "_entries", dict(AGGREGATORS._entries))

    @AGGREGATORS.register("toy_max", kind="pixel", needs=("maps",))
    def toy_max(stack, map_dims=2):
        """The largest of the k values."""
        return stack.amax(0)

    assert registry_tables.main([]) == 1
    body = tables(rendered(PAGE.read_text()))["aggregator"]
    assert names_in(body)[-1] == "toy_max" and "| `toy_max` | rows, images | maps |  | map_dims=2 |" in body
