"""The one ensemble registry (``build_ensemble``) on a tabular and an image population: every
strategy's class probabilities against a hand computation in float64, member by member (the
perturbation noise and the points on the curves written out from their definitions)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from foundation.errors import InputError
from lightning_modules import ImagePopulation, PopulationMLP
from lightning_modules.curve_model import CurveModel
from lightning_modules.curves import MLPCurve
from lightning_modules.ensembles import build_ensemble
from lightning_modules.interface import class_probabilities

MEMBERS = [2, 0, 3, 1]  # curve 0 joins members 2 and 0, curve 1 members 3 and 1
N_PERTURB, SIGMA, LAYER, SEED = 3, 0.05, 1, 7


def tabular() -> tuple[PopulationMLP, torch.Tensor]:
    population = PopulationMLP(in_features=5, seeds=[4, 5, 6, 7], hidden=(8, 6))
    with torch.no_grad():
        for p in population.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return population, torch.randn(9, 5, generator=torch.Generator().manual_seed(1))


def image() -> tuple[ImagePopulation, torch.Tensor]:
    population = ImagePopulation(arch="small_cnn", num_classes=3, in_channels=1, seeds=[4, 5, 6, 7])
    return population.eval(), torch.randn(5, 1, 12, 12, generator=torch.Generator().manual_seed(1))


def nets(population) -> list[nn.Module]:
    """Each member alone as a float64 network (the tabular member's MLP, the image member's net)."""
    return [copy.deepcopy(population.member(i).net).double().eval() for i in range(population.size)]


def weight_layers(net: nn.Module) -> list[nn.Module]:
    return [m for m in net.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]


def mean_probability(models: list[nn.Module], x: torch.Tensor) -> torch.Tensor:
    return torch.stack([m(x.double()).softmax(-1) for m in models]).mean(0)


def perturbed(models: list[nn.Module]) -> list[nn.Module]:
    """Every model repeated N_PERTURB times (model i's copies i*m .. i*m+m-1), N(0, SIGMA²) noise
    on the weight of weight layer LAYER, drawn in one float32 tensor over all copies."""
    shape = weight_layers(models[0])[LAYER].weight.shape
    noise = torch.randn((len(models) * N_PERTURB, *shape), generator=torch.Generator().manual_seed(SEED))
    variants = []
    for i, model in enumerate(models):
        for j in range(N_PERTURB):
            variant = copy.deepcopy(model)
            layer = weight_layers(variant)[LAYER]
            w32 = layer.weight.detach().float() + SIGMA * noise[i * N_PERTURB + j]  # the float32 weights plus noise
            layer.weight.data.copy_(w32.double())
            variants.append(variant)
    return variants


def ts() -> list[float]:
    return torch.rand(3, generator=torch.Generator().manual_seed(11)).tolist()


def on_curves(curves: list[CurveModel], models: list[nn.Module]) -> list[nn.Module]:
    """The networks at every t of ts() on every curve: w(t) = (1-t)² w₀ + 2t(1-t) θ + t² w₂
    (quadratic Bezier), in the shape of the curve's start member (MEMBERS[2j])."""
    out = []
    for j, curve in enumerate(curves):
        points = [curve.point_state(k) for k in range(3)]
        for t in ts():
            t32 = torch.tensor(t, dtype=torch.float32)
            c = [(1 - t32) ** 2, 2 * t32 * (1 - t32), t32**2]  # the coefficients in float32, as the curve forms them
            model = copy.deepcopy(models[MEMBERS[2 * j]])
            state = {name: sum(c[k].double() * points[k][name].double() for k in range(3)) for name in points[0]}
            model.load_state_dict(state)
            out.append(model)
    return out


def curves_of(population) -> list[CurveModel]:
    """Curves between (MEMBERS[0], MEMBERS[1]) and (MEMBERS[2], MEMBERS[3]) (``MLPCurve`` for
    the tabular population), their bends moved off the line."""
    pairs = [(population.member(MEMBERS[2 * j]), population.member(MEMBERS[2 * j + 1])) for j in range(2)]
    if isinstance(population, PopulationMLP):
        curves = [MLPCurve(5, hidden=(8, 6), mode="fixed", start_model=a, end_model=b) for a, b in pairs]
    else:
        curves = [CurveModel(a.net, b.net, "bezier") for a, b in pairs]
    with torch.no_grad():
        for curve in curves:
            for name, p in curve.named_parameters():
                if name.endswith("_1"):
                    p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return curves


@pytest.mark.parametrize("make", [tabular, image], ids=["tabular", "image"])
@pytest.mark.parametrize("strategy", ["average", "majority", "perturb", "connect", "combine"])
def test_every_strategy_from_either_population_against_a_hand_computation(make, strategy):
    population, x = make()
    models = nets(population)
    chosen = [models[i] for i in MEMBERS]
    noise = {"n_perturb": N_PERTURB, "sigma": SIGMA, "layer": LAYER, "part": "weight", "seed": SEED}
    curves = curves_of(population)
    along = {"n_t": 3, "t_seed": 11}
    options = {"average": {}, "majority": {}, "perturb": noise, "connect": along, "combine": {**along, **noise}}
    ensemble = build_ensemble(population, strategy, MEMBERS, curves if strategy in ("connect", "combine") else None,
                              **options[strategy])  # fmt: skip
    got = class_probabilities(ensemble.double(), x.double())
    if strategy == "majority":
        votes = torch.stack([m(x.double()).argmax(-1) for m in chosen])
        want = torch.stack([(votes == c).double().mean(0) for c in range(got.shape[-1])], dim=-1)
        torch.testing.assert_close(got.double(), want, rtol=0, atol=0)  # MLPEnsemble votes in float32
        return
    samples = {"average": chosen, "perturb": perturbed(chosen), "connect": on_curves(curves, models),
               "combine": perturbed(on_curves(curves, models))}[strategy]  # fmt: skip
    assert ensemble.size == len(samples)
    torch.testing.assert_close(got, mean_probability(samples, x), rtol=0, atol=1e-6)


def test_a_curve_strategy_without_curves_and_an_unknown_strategy_are_named():
    population, _ = tabular()
    with pytest.raises(InputError, match="strategy 'connect' needs the curves"):
        build_ensemble(population, "connect", MEMBERS)
    with pytest.raises(InputError, match=r"strategy 'mean'; expected one of \['average', 'combine'"):
        build_ensemble(population, "mean", MEMBERS)
