"""An input's map depends only on the model, the input, its index and the seed: for every
stochastic explainer (trait ``draws``) and every model kind, an input explained alone (with its
index) equals the same input explained in a batch of others, and a population member's map of it
equals that member's own."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from evaluators.maps import EXPLAINERS, explain
from evaluators.maps.registry import trait
from lightning_modules import ImageClassifier, MLPClassifier, PopulationMLP
from lightning_modules.curves import MLPCurve
from lightning_modules.ensembles import ENSEMBLES, build_ensemble
from lightning_modules.module_population import ModulePopulation

D, K, HIDDEN = 4, 3, (8, 6)
SMALL = {"smoothgrad": {"nt_samples": 5}, "smoothgrad_sq": {"nt_samples": 5}, "vargrad": {"nt_samples": 5},
         "gradient_shap": {"n_samples": 5}, "lime": {"n_samples": 15}, "kernel_shap": {"n_samples": 15},
         "shapley_value_sampling": {"n_samples": 2}, "rise": {"n_masks": 8, "s": 2}}  # fmt: skip
STOCHASTIC = {modality: sorted(n for n in EXPLAINERS.names(modality=modality) if trait(EXPLAINERS[n], "draws"))
              for modality in ("rows", "images")}  # fmt: skip


def table_models() -> dict:
    torch.manual_seed(0)
    population = PopulationMLP(in_features=D, seeds=[3, 1, 4], hidden=HIDDEN, num_classes=K).eval()
    curves = [MLPCurve(in_features=D, start_seed=s, end_seed=s + 1, hidden=HIDDEN, num_classes=K) for s in (0, 5)]
    net = {"class_path": "torch.nn.Linear", "init_args": {"in_features": D, "out_features": K}}
    return {
        "mlp": MLPClassifier(in_features=D, hidden=HIDDEN, num_classes=K, seed=2).eval(),
        "mlp_probability": MLPClassifier(in_features=D, hidden=HIDDEN, num_classes=2, seed=2,
                                         explain_output="probability").eval(),  # fmt: skip
        "population": population,
        **{name: ENSEMBLES[name](population, [0, 2]) for name in ("average", "majority")},
        "perturb": ENSEMBLES["perturb"](population, [0, 1], n_perturb=2, sigma=0.2, seed=5),
        "connect": build_ensemble(population, "connect", [0, 1, 2, 3], curves, n_t=2),
        "combine": build_ensemble(population, "combine", [0, 1, 2, 3], curves, n_t=2, n_perturb=2, sigma=0.2),
        "module_population": ModulePopulation(net, size=2, num_classes=K, inputs="rows").eval(),
        "sequential": nn.Sequential(nn.Linear(D, 8), nn.ReLU(), nn.Linear(8, K)).eval(),
    }


TABLE_MODELS = table_models()


def options(method: str, x: torch.Tensor) -> dict:
    background = {"baselines": torch.randn(3, *x.shape[1:], generator=torch.Generator().manual_seed(9))}
    return {**SMALL.get(method, {}), **(background if method == "gradient_shap" else {})}


def check_alone_equals_in_batch(model, x, method, population: bool, seed_matters: bool = True) -> None:
    opts = options(method, x)
    batch = explain(model, x, method, seed=4, **opts)
    for i in (1, 3):
        alone = explain(model, x[i : i + 1], method, seed=4, index=[i], **opts)
        in_batch = batch[:, i : i + 1] if population else batch[i : i + 1]
        torch.testing.assert_close(alone, in_batch, rtol=1e-5, atol=1e-7)
    if seed_matters:
        assert not torch.allclose(batch, explain(model, x, method, seed=5, **opts))


@pytest.mark.parametrize("kind", sorted(TABLE_MODELS))
@pytest.mark.parametrize("method", STOCHASTIC["rows"])
def test_a_row_alone_equals_the_same_row_in_a_batch(method, kind):
    x = 5 * torch.randn(5, D, generator=torch.Generator().manual_seed(1))  # spread: LIME's Lasso keeps features
    # the module population's members are linear: their gradients and Shapley values are the same for every draw
    seed_matters = kind != "module_population"
    check_alone_equals_in_batch(TABLE_MODELS[kind], x, method, kind.endswith("population"), seed_matters)


@pytest.mark.parametrize("method", STOCHASTIC["images"])
def test_an_image_alone_equals_the_same_image_in_a_batch(method):
    torch.manual_seed(0)
    model = ImageClassifier(arch="small_cnn", num_classes=K, in_channels=1).eval()
    x = torch.randn(5, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    check_alone_equals_in_batch(model, x, method, population=False)


@pytest.mark.parametrize("method", STOCHASTIC["rows"])
def test_a_population_members_map_is_the_members_own(method):
    population = TABLE_MODELS["population"]
    x = 5 * torch.randn(5, D, generator=torch.Generator().manual_seed(1))  # spread: LIME's Lasso keeps features
    target = torch.tensor([0, 2, 1, 1, 0])
    maps = explain(population, x, method, target=target, seed=2, **options(method, x))
    for i in range(population.size):
        alone = explain(population.member(i), x, method, target=target, seed=2, **options(method, x))
        torch.testing.assert_close(maps[i], alone, rtol=1e-5, atol=1e-6)


def test_every_stochastic_method_is_covered():
    assert STOCHASTIC["rows"] == ["gradient_shap", "kernel_shap", "lime", "shapley_value_sampling", "smoothgrad",
                                  "smoothgrad_sq", "vargrad"]  # fmt: skip
    assert STOCHASTIC["images"] == ["gradient_shap", "rise", "smoothgrad", "smoothgrad_sq", "vargrad"]
