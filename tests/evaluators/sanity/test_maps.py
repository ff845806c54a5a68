"""The maps the sanity checks compare (evaluators/sanity/maps.py): the registry's maps of every
input at once, an image map reduced over its channels (by hand: the sum or the sum of absolute
values over C), and the checks of the explainer, measure and reduction options."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from evaluators.maps import explain
from evaluators.sanity.maps import check_reduction, explainer_options, maps_of, prepared
from foundation.errors import InputError


def test_explainer_options_from_a_list_or_a_mapping():
    assert explainer_options(["saliency", "smoothgrad"]) == {"saliency": {}, "smoothgrad": {}}
    assert explainer_options({"integrated_gradients": {"n_steps": 4}}) == {"integrated_gradients": {"n_steps": 4}}
    for bad, message in (("saliency", "option explainers="), ([], "option explainers="),
                         (["nope"], "unknown explainer 'nope'"), ({"saliency": 3}, "options 3; expected a mapping")):
        with pytest.raises(InputError, match=message):
            explainer_options(bad)


def test_reductions_are_checked():
    check_reduction("sum")
    with pytest.raises(InputError, match="option reduction='max'"):
        check_reduction("max")


def test_image_maps_are_reduced_over_channels_and_row_maps_kept():
    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5)).eval()
    x, target = torch.randn(3, 3, 8, 8), torch.tensor([0, 4, 2])
    full = explain(cnn, x, "saliency", target=target, seed=1)
    torch.testing.assert_close(maps_of(cnn, x, target, "saliency", {}, 1, "sum"), full.sum(1), rtol=0, atol=0)
    torch.testing.assert_close(maps_of(cnn, x, target, "saliency", {}, 1, "abs_sum"), full.abs().sum(1),
                               rtol=0, atol=0)  # fmt: skip
    mlp = nn.Sequential(nn.Linear(5, 3)).double()
    rows = torch.randn(4, 5, dtype=torch.float64)
    got = maps_of(mlp, rows, torch.tensor([0, 1, 2, 0]), "saliency", {}, 0, "sum")
    torch.testing.assert_close(got, mlp[0].weight[[0, 1, 2, 0]], rtol=0, atol=0)  # a linear map's gradient: W[t]


def test_prepared_explains_the_predicted_class_by_default():
    torch.manual_seed(1)
    mlp = nn.Linear(5, 3).double()
    x = torch.randn(6, 5, dtype=torch.float64)
    options, measures, moved, target = prepared(mlp, x, None, ["saliency"], ["spearman"], "sum")
    assert options == {"saliency": {}} and measures == ["spearman"] and torch.equal(moved, x)
    assert torch.equal(target, (x @ mlp.weight.T + mlp.bias).argmax(1))
    assert torch.equal(prepared(mlp, x, 2, ["saliency"], ["spearman"], "sum")[3], torch.full((6,), 2))
