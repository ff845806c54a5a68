"""The protocols evaluate.py runs (evaluators/protocols/registry.py): every protocol module of the
package registered once importing it, under evaluate.py's sub-command names, with the traits'
defaults where an entry states none; the generic table config exists."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import evaluators.protocols
from evaluators.protocols.registry import PROTOCOLS, TABLE_DEFAULT
from foundation.registry import Registry


def test_every_protocol_is_registered_with_its_config_and_report():
    modules = {m.name for m in pkgutil.iter_modules(evaluators.protocols.__path__)}
    assert {"landscape", "sigma_ablation", "consistency", "registry", "population_sets", "members"} <= modules
    assert {"landscape", "sigma", "consistency", "aggregation", "roar", "sanity", "data_randomisation",
            "report"} <= set(PROTOCOLS.names())  # fmt: skip
    for name in PROTOCOLS.names():
        entry = PROTOCOLS[name]
        assert callable(entry.obj) and callable(entry.extra["write"]) and entry.extra["config"] is not None, name
        assert entry.extra["source"] in ("population", "run", "model", "pair"), name


def test_traits_default_where_an_entry_states_none():
    registry = Registry("protocol", traits=PROTOCOLS.traits)
    registry.add("mine", print, config=object, write=print, report="x.json")
    extra = registry["mine"].extra
    assert (extra["has_sets"], extra["resumable"], extra["source"], extra["choices"]) == (False, False, "population",
                                                                                          None)  # fmt: skip
    assert Path(TABLE_DEFAULT).is_file()
