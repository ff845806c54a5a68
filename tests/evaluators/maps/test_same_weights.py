"""Same weights, same maps: every explainer gives an ``MLPClassifier`` the maps it gives its own
plain network (``model.net``, the same class), bit for bit, and a population member inside its
population the maps it gets alone (up to the stacked kernels' rounding)."""

from __future__ import annotations

import pytest
import torch

from evaluators.maps import EXPLAINERS, explain
from lightning_modules import MLPClassifier, PopulationMLP

D = 5
SMALL = {"smoothgrad": {"nt_samples": 6}, "smoothgrad_sq": {"nt_samples": 6}, "vargrad": {"nt_samples": 6},
         "gradient_shap": {"n_samples": 6}, "integrated_gradients": {"n_steps": 8}, "lime": {"n_samples": 20},
         "kernel_shap": {"n_samples": 20}, "shapley_value_sampling": {"n_samples": 3}}  # fmt: skip
ROWS = EXPLAINERS.names(modality="rows")


def options(method: str) -> dict:
    background = torch.randn(4, D, generator=torch.Generator().manual_seed(3))
    return {**SMALL.get(method, {}), **({"baselines": background} if method in ("deepshap", "gradient_shap") else {})}


def rows() -> torch.Tensor:
    return 3 * torch.randn(6, D, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("method", ROWS)
@pytest.mark.parametrize("target", [None, "labels"])
def test_a_table_model_and_its_plain_network_give_the_same_maps(method, target):
    model = MLPClassifier(in_features=D, hidden=(8, 6), num_classes=3, seed=4).eval()
    labels = torch.tensor([0, 2, 1, 1, 2, 0]) if target else model(rows()).argmax(-1)  # the default: predicted
    ours = explain(model, rows(), method, target=None if target is None else labels, seed=7, **options(method))
    plain = explain(model.net, rows(), method, target=labels, seed=7, **options(method))
    assert torch.equal(ours, plain) and ours.abs().sum() > 0


@pytest.mark.parametrize("method", ROWS)
def test_a_binary_table_model_explains_its_positive_class_as_its_network_does(method):
    model = MLPClassifier(in_features=D, hidden=(8, 6), seed=4).eval()
    ours = explain(model, rows(), method, seed=7, **options(method))
    assert torch.equal(ours, explain(model.net, rows(), method, target=1, seed=7, **options(method)))


@pytest.mark.parametrize("method", ROWS)
def test_a_population_member_in_its_population_equals_the_member_alone(method):
    population = PopulationMLP(in_features=D, seeds=[5, 6, 7], hidden=(8, 6)).eval()
    maps = explain(population, rows(), method, seed=7, **options(method))
    for i in range(population.size):
        alone = explain(population.member(i).net, rows(), method, target=1, seed=7, **options(method))
        torch.testing.assert_close(maps[i], alone, rtol=1e-5, atol=1e-6)
