"""The layers of a classifier and their randomisation (evaluators/sanity/layers.py): which modules
are layers, in module order; cascading and independent re-initialisation on a copy, each layer
drawn as its own constructor draws from ``seed + position``; BatchNorm reset as at construction."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from evaluators.sanity.layers import randomisable_layers, randomised_models, reinitialise
from foundation.errors import InputError
from tests.evaluators.sanity.test_model_randomisation import fresh_linear, trained_like_resnet8


def test_layers_in_module_order_and_cascade():
    model = trained_like_resnet8()
    names = randomisable_layers(model)
    assert names[:3] == ["conv1", "bn1", "layers.0.conv1"] and names[-1] == "fc" and len(names) == 15
    original = {k: v.clone() for k, v in model.state_dict().items()}
    for step, (name, randomised) in enumerate(randomised_models(model, "cascading", seed=3)):
        assert name == names[-1 - step]
        changed = {k.rsplit(".", 1)[0] for k, v in randomised.state_dict().items() if not torch.equal(v, original[k])}
        assert changed == set(names[len(names) - 1 - step:]), name  # exactly this layer and every one above
        if name.startswith("layers.1.bn"):  # BatchNorm reset as at construction
            bn = dict(randomised.named_modules())[name]
            assert torch.equal(bn.running_mean, torch.zeros(16 * 2)) and torch.equal(bn.running_var, torch.ones(32))
            assert torch.equal(bn.weight, torch.ones(32)) and int(bn.num_batches_tracked) == 0
    for name, randomised in randomised_models(model, "independent", seed=3):
        changed = {k.rsplit(".", 1)[0] for k, v in randomised.state_dict().items() if not torch.equal(v, original[k])}
        assert changed == {name}, name


def test_layers_of_a_custom_model():
    class Scaled(nn.Module):  # a parameter without reset_parameters: never randomised
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(3))

        def forward(self, x):
            return x * self.scale

    model = nn.Sequential(nn.Linear(4, 3), Scaled(), nn.ReLU(), nn.BatchNorm1d(3, affine=False), nn.Linear(3, 2))
    assert randomisable_layers(model) == ["0", "3", "4"]
    with pytest.raises(InputError, match="no layer to randomise"):
        next(randomised_models(nn.Sequential(nn.ReLU(), Scaled())))
    with pytest.raises(InputError, match="mode='top_down'"):
        next(randomised_models(model, "top_down"))


def test_a_layer_is_drawn_as_its_constructor_draws_and_the_global_state_is_kept():
    """Layer j of three re-initialised from seed + j equals ``nn.Linear`` built after
    ``torch.manual_seed(seed + j)``; ``same_seed`` draws every layer from ``seed``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 5), nn.Linear(5, 2)).double()
    state = torch.get_rng_state()
    steps = [(name, {k: v.clone() for k, v in m.state_dict().items()}) for name, m in randomised_models(model, seed=11)]
    assert [name for name, _ in steps] == ["3", "2", "0"]
    last = steps[-1][1]
    for name, position, (n_in, n_out) in (("0", 0, (4, 6)), ("2", 1, (6, 5)), ("3", 2, (5, 2))):
        expected = fresh_linear(n_in, n_out, 11 + position).weight
        torch.testing.assert_close(last[f"{name}.weight"], expected, rtol=0, atol=0)
    same = dict(randomised_models(model, "independent", seed=11, same_seed=True))["0"]
    torch.testing.assert_close(same[0].weight, fresh_linear(4, 6, 11).weight, rtol=0, atol=0)
    layer = nn.Linear(3, 3)
    state = torch.get_rng_state()
    reinitialise(layer, 5)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(5)
    torch.testing.assert_close(layer.weight, nn.Linear(3, 3).weight, rtol=0, atol=0)


def test_a_non_module_is_refused():
    with pytest.raises(InputError, match="expected a torch.nn.Module"):
        randomisable_layers(lambda x: x)
