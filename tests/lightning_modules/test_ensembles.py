"""Ensembles: each against members evaluated one by one, sigma = 0, differentiability."""

from __future__ import annotations

import pytest
import torch

from lightning_modules import MLPClassifier, PopulationMLP
from lightning_modules.curves import MLPCurve
from lightning_modules.ensembles import ENSEMBLES, MLPEnsemble, build_ensemble, perturb_stack


@pytest.fixture(scope="module")
def population():
    torch.manual_seed(0)
    pop = PopulationMLP(in_features=5, seeds=[0, 1, 2, 3], explain_output="logit")
    with torch.no_grad():
        for p in pop.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return pop


def test_average_predicts_mean_member_probability_and_explains_mean_output(population):
    x = torch.randn(10, 5)
    ensemble = ENSEMBLES["average"](population, [1, 3])
    expected = torch.stack([population.member(i)(x).softmax(-1) for i in (1, 3)]).mean(0)
    torch.testing.assert_close(ensemble.probabilities(x), expected)
    members = torch.stack([population.member(i)(x) for i in (1, 3)])
    torch.testing.assert_close(ensemble(x), members.mean(0))  # forward: the members' mean logit
    # explained: the mean member logit (the population explains logits), not the mean probability
    mean_logit = torch.stack([population.member(i)(x)[:, 1] for i in (1, 3)]).mean(0)
    torch.testing.assert_close(ensemble.explained_output(x), mean_logit)
    as_probability = MLPEnsemble(*ensemble.stacked, "average", explain_output="probability")
    torch.testing.assert_close(as_probability.explained_output(x), expected[:, 1])


def test_majority_votes_and_explains_mean_member_output(population):
    x = torch.randn(50, 5)
    ensemble = ENSEMBLES["majority"](population, [0, 1, 2])
    votes = torch.stack([population.member(i)(x).argmax(-1) for i in range(3)]).float().mean(0)
    torch.testing.assert_close(ensemble.probabilities(x)[:, 1], votes)
    assert torch.equal(ensemble.predict(x), (votes >= 0.5).long())
    mean_logit = torch.stack([population.member(i)(x)[:, 1] for i in range(3)]).mean(0)
    torch.testing.assert_close(ensemble.explained_output(x), mean_logit)


def test_perturbed_with_sigma_zero_equals_base_model(population):
    x = torch.randn(10, 5)
    ensemble = ENSEMBLES["perturb"](population, [2], n_perturb=7, sigma=0.0)
    assert ensemble.size == 7
    torch.testing.assert_close(ensemble.probabilities(x), population.member(2)(x).softmax(-1))


@pytest.mark.parametrize(("layer", "part"), [(0, "weight"), (0, "bias"), (2, "weight")])
def test_perturbation_touches_only_the_chosen_tensor(population, layer, part):
    weights = [w.detach() for w in population.weights]
    biases = [b.detach() for b in population.biases]
    noisy_w, noisy_b = perturb_stack(weights, biases, n_perturb=3, sigma=0.5, layer=layer, part=part, seed=1)
    for k in range(len(weights)):
        for name, original, noisy in (("weight", weights[k], noisy_w[k]), ("bias", biases[k], noisy_b[k])):
            repeated = original.repeat_interleave(3, dim=0)
            if (k, name) == (layer, part):
                std = (noisy - repeated).std().item()
                assert 0.4 < std < 0.6
            else:
                assert torch.equal(noisy, repeated)


def test_perturb_is_a_mean_of_perturbed_models(population):
    x = torch.randn(10, 5)
    ensemble = ENSEMBLES["perturb"](population, [0, 1], n_perturb=4, sigma=0.3, seed=5)
    weights, biases = ensemble.stacked
    per_model = []
    for i in range(2):  # "perturbed model" i: the mean of its 4 variants
        rows = slice(4 * i, 4 * i + 4)
        variant = MLPEnsemble([w[rows] for w in weights], [b[rows] for b in biases])
        per_model.append(variant.probabilities(x))
    torch.testing.assert_close(ensemble.probabilities(x), torch.stack(per_model).mean(0))


def test_connect_and_combine_average_points_along_curves():
    curves = [MLPCurve(in_features=5, start_seed=s, end_seed=s + 1) for s in (0, 10)]
    ends = PopulationMLP(in_features=5, seeds=[0, 1, 10, 11])  # the curves' end points' seeds
    x = torch.randn(8, 5)
    ensemble = build_ensemble(ends, "connect", [0, 1, 2, 3], curves, n_t=3)
    expected = torch.stack([c.classifier_at(t)(x).softmax(-1) for c in curves for t in (0.0, 0.5, 1.0)]).mean(0)
    torch.testing.assert_close(ensemble.probabilities(x), expected)
    combined = build_ensemble(ends, "combine", [0, 1, 2, 3], curves, n_t=3, n_perturb=5, sigma=0.0)
    assert combined.size == 2 * 3 * 5
    torch.testing.assert_close(combined.probabilities(x), expected)


@pytest.mark.parametrize("kind", ["average", "majority", "perturb", "connect", "combine"])
def test_ensembles_are_differentiable_wrt_input(population, kind):
    if kind in ("connect", "combine"):
        ensemble = ENSEMBLES[kind](population, [0, 1], [MLPCurve(in_features=5, start_seed=0, end_seed=1)], n_t=3)
    else:
        ensemble = ENSEMBLES[kind](population, [0, 1, 2])
    ensemble = ensemble.double()
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ensemble.explained_output, (x,), eps=1e-6, atol=1e-5)
    (grad,) = torch.autograd.grad(ensemble.explained_output(x).sum(), x)
    assert grad.abs().sum() > 0


def test_ensemble_is_one_module_captum_can_explain(population):
    from captum.attr import Saliency

    ensemble = ENSEMBLES["perturb"](population, [0, 1], n_perturb=3, sigma=0.1)
    x = torch.randn(6, 5, requires_grad=True)
    attributions = Saliency(ensemble).attribute(x, target=1, abs=False)
    (grad,) = torch.autograd.grad(ensemble(x)[:, 1].sum(), x)
    torch.testing.assert_close(attributions, grad)
    member = population.member(0)
    assert isinstance(member, MLPClassifier)


def test_predict_in_row_pieces_equals_one_pass(population, monkeypatch):
    from lightning_modules import ensembles

    x = torch.randn(103, 5)
    ensemble = ENSEMBLES["perturb"](population, [0, 1, 2], n_perturb=5, sigma=0.3, seed=1)
    monkeypatch.setattr(ensembles, "PREDICT_BLOCK_FLOATS", ensemble.size * 128 * 10)  # pieces of 10 rows
    pieces = ensemble.predict(x)
    scores = ensemble.probabilities(x)
    assert torch.equal(pieces, (scores[:, 1] >= scores[:, 0]).long())
