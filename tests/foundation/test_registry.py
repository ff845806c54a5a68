"""foundation.registry: one shape for every registry (decorator at the definition, traits, errors)."""

import pytest

from foundation.errors import InputError
from foundation.registry import Registry


def test_decorator_registers_at_the_definition_with_its_traits():
    things = Registry("thing", page="things.md")

    @things.register("double", modalities=("rows",), needs=("target",), higher_is_better=True,
                     defaults={"k": 2}, linear=True)
    def double(x, k=2):
        """Twice ``x``.

        More text."""
        return k * x

    assert double(3) == 6  # the function is returned unchanged
    entry = things["double"]
    assert (entry.name, entry.help, entry.modalities, entry.needs) == ("double", "Twice ``x``.", ("rows",), ("target",))
    assert entry.higher_is_better is True and dict(entry.defaults) == {"k": 2}
    assert entry.linear is True and entry(4) == 8
    with pytest.raises(AttributeError, match="no trait 'batched'"):
        entry.batched


def test_names_filter_by_modality_and_traits_in_registration_order():
    things = Registry("thing")
    things.add("b", len, modalities=("images",), linear=False)
    things.add("a", len, linear=True)
    assert things.names() == ["b", "a"] and list(things) == ["b", "a"] and len(things) == 2
    assert things.names(modality="rows") == ["a"]
    assert things.names(linear=True) == ["a"] and things.names(modality="images", linear=False) == ["b"]
    assert "a" in things and "c" not in things and things.get("c") is None


def test_unknown_name_and_double_registration_are_refused():
    things = Registry("metric", page="fidelity_metrics.md")
    things.add("auc", len)
    refused = r"unknown metric 'aucc'; expected one of \['auc'\] \(docs/fidelity_metrics.md\)"
    with pytest.raises(InputError, match=refused):
        things["aucc"]
    with pytest.raises(ValueError, match="registered twice"):
        things.add("auc", len)
    with pytest.raises(ValueError, match="unknown modalities"):
        things.add("x", len, modalities=("sequences",))


def test_defaults_are_the_signature_s_unless_given_and_a_kind_s_traits_have_defaults():
    things = Registry("thing", traits={"kind": "plain", "linear": False})

    @things.register("scaled", linear=True)
    def scaled(x, k: int = 2, *, offset=0.5, **options):
        return k * x + offset

    things.add("builtin", len, defaults={"n": 1})
    things.add("spec", object())  # not callable: no signature
    assert dict(things["scaled"].defaults) == {"k": 2, "offset": 0.5}
    assert dict(things["builtin"].defaults) == {"n": 1} and dict(things["spec"].defaults) == {}
    assert (things["scaled"].kind, things["scaled"].linear) == ("plain", True)
    assert things["builtin"].linear is False and things.names(linear=False) == ["builtin", "spec"]
