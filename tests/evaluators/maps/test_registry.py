"""The explainer registry (evaluators/maps/registry.py): the traits an entry states or the
defaults it does not, each method's definition version (2 for the methods whose draws became per
input with issue 42, 1 for deterministic ones), and kept maps of another version found and named."""

from __future__ import annotations

import warnings

import pytest

from evaluators.maps import EXPLAINERS
from evaluators.maps.registry import TRAITS, definitions, one_row, option, outdated, trait
from foundation.registry import Registry


def test_traits_stated_or_the_defaults():
    registry = Registry("explainer")
    registry.add("mine", object())  # a user's explainer, stating nothing
    assert {name: trait(registry["mine"], name) for name in TRAITS} == TRAITS
    assert trait(EXPLAINERS["smoothgrad"], "draws") == "per_input" and trait(EXPLAINERS["saliency"], "linear")
    assert trait(EXPLAINERS["lime"], "members") == "each" and trait(EXPLAINERS["deeplift"], "hooks")
    assert one_row({"n_samples": 9}) == 1
    assert option("n_steps", 50)({}) == 50 and option("n_steps", 50)({"n_steps": 4}) == 4


def test_definitions_and_outdated_kept_maps():
    assert definitions(["saliency", "smoothgrad", "gradient_shap"]) == {"saliency": 1, "smoothgrad": 2,
                                                                        "gradient_shap": 2}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert outdated({"smoothgrad": 2}, ["saliency", "smoothgrad"], "maps.pt") == []
    with pytest.warns(UserWarning, match=r"^maps.pt: computing again what it keeps of smoothgrad: made under "
                                         r"definition 1 of the method, today's is 2"):  # fmt: skip
        assert outdated(None, ["saliency", "smoothgrad"], "maps.pt") == ["smoothgrad"]
