"""The aggregator registry (evaluators.aggregators.registry): every pixel and optimised
aggregator reachable by name, its checked entry point equal to its function called
directly and to a hand reference, and an unknown name refused naming the choices."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from evaluators.aggregators import optimised_aggregators, pixel_aggregators
from evaluators.aggregators.optimised_aggregators import VAR_EPS, aggregator_options, optimised_aggregation
from evaluators.aggregators.pixel_aggregators import aggregate
from evaluators.aggregators.registry import AGGREGATORS
from foundation.errors import InputError


PIXEL = ["mean", "percentile", "ucb", "pi", "ei", "ci", "api", "aei", "var", "rbm"]  # Mahlau & Nolde's
OPTIMISED = ["agg_mean", "agg_var", "agg_robust", "agg_faith", "agg_opt"]  # Decker et al.'s


def test_one_registry_holds_both_kinds_each_at_its_definition():
    assert AGGREGATORS.names(kind="pixel") == PIXEL and AGGREGATORS.names(kind="optimised") == OPTIMISED
    assert AGGREGATORS.names() == [*PIXEL, *OPTIMISED] == list(AGGREGATORS)
    assert {spec.needs for spec in AGGREGATORS.values()} == {("maps",), ("model", "x", "explainers")}
    for name in PIXEL:
        assert AGGREGATORS[name].obj is getattr(pixel_aggregators, name)
    for name in OPTIMISED:
        assert AGGREGATORS[name].obj is getattr(optimised_aggregators, name)
    assert dict(AGGREGATORS["ucb"].defaults) == {"map_dims": 2, "eps": -0.5}  # its signature's


@pytest.mark.parametrize("name", PIXEL)
def test_a_pixel_aggregator_by_name_equals_its_function(name):
    stack = torch.rand(3, 2, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    options = {"k": 3} if name == "rbm" else {}
    merged = aggregate(stack, name, map_dims=1, **options)
    torch.testing.assert_close(merged, AGGREGATORS[name](stack, 1, **options), rtol=0, atol=0)
    if name == "mean":  # by hand
        torch.testing.assert_close(merged, (stack[0] + stack[1] + stack[2]) / 3, rtol=1e-15, atol=0)
    with pytest.raises(InputError, match="option"):
        aggregate(stack, name, map_dims=1, no_such_option=1)  # the checked entry point


def test_optimised_aggregators_by_name_equal_their_functions_and_the_common_map():
    """On a linear model Input × Gradient and Integrated Gradients (zero baseline) both give
    x ⊙ w_target (summed over channels; no absolute value, normalisation or smoothing): every
    aggregate is that map (agg_var: μ / ε)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 3)).double().eval()
    x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    target = torch.tensor([0, 2])
    common = (x * model[1].weight[target].view(2, 3, 4, 4)).sum(1).detach()  # channels summed
    same = {"input_x_gradient": {}, "integrated_gradients": {"n_steps": 4}}
    for name in OPTIMISED:
        options = {k: v for k, v in {"n_samples": 3, "n_segments": 4}.items() if k in aggregator_options(name)}
        options.update(absolute=False, normalisation="none", smoothing=0)
        maps, weights = optimised_aggregation(model, x, name, same, target, **options)
        direct, direct_weights = AGGREGATORS[name](model, x, target, same, **options)
        torch.testing.assert_close(maps, direct, rtol=0, atol=0)
        assert (weights is None) == (direct_weights is None) == (name == "agg_var")
        reference = common / VAR_EPS if name == "agg_var" else common
        torch.testing.assert_close(maps, reference, rtol=1e-6, atol=1e-9)


def test_an_unknown_aggregator_is_refused_naming_the_choices():
    choices = r"expected one of \['mean', 'percentile'.*'agg_opt'\]"
    with pytest.raises(InputError, match=rf"unknown aggregator 'median'; {choices}"):
        AGGREGATORS["median"]
