"""The metric registry (evaluators.metrics.registry): every metric reachable by name, its
per-input scores equal to its functional core called directly, its Metric (one update
signature) the mean of those scores over two updates, and an unknown name refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from evaluators.metrics import axiomatic, localisation
from evaluators.metrics.complexity import complexity, sparseness
from evaluators.metrics.faithfulness_correlation import faithfulness_correlation
from evaluators.metrics.infidelity import infidelity, subset_perturbations
from evaluators.metrics.insertion_deletion import auc, insertion_deletion_curves
from evaluators.metrics.registry import METRICS, score
from evaluators.metrics.relative_stability import relative_stability
from evaluators.metrics.road import road_curves
from evaluators.metrics.sensitivity import sensitivities
from foundation.errors import InputError

MEANS = torch.full((5,), 0.1, dtype=torch.float64)  # tabular rows: the replaced features' values
OPTIONS = {"insertion": {"steps": 3, "baseline": "zero"}, "deletion": {"steps": 3, "baseline": "zero"},
           "infidelity": {"n_samples": 4, "baseline": MEANS}, "fcor": {"n_samples": 5, "baseline": MEANS},
           "sens_avg": {"n_samples": 3}, "sens_max": {"n_samples": 3},
           "road_morf": {"percentages": (20, 60), "feature_means": MEANS},
           "road_lerf": {"percentages": (20, 60), "feature_means": MEANS}, "relative_stability": {"n_samples": 3},
           "sparseness": {}, "complexity": {}, "pointing_game": {}, "attribution_localisation": {},
           "top_k_intersection": {"k": 2}, "relevance_mass_accuracy": {}, "relevance_rank_accuracy": {},
           "localisation_auc": {}, "ground_truth_agreement": {"k": 2}, "completeness": {"atol": 0.5},
           "completeness_gap": {}, "non_sensitivity": {"eps": 0.05}, "input_invariance": {"atol": 0.05}}
TRUTH = torch.tensor([[1, 0, 0, 1, 0], [0, 1, 1, 0, 0], [0, 0, 1, 0, 0], [1, 1, 1, 1, 0], [0, 0, 0, 1, 1],
                      [0, 1, 0, 0, 0]], dtype=torch.bool)  # fmt: skip
FUNCTIONS = {**{n: getattr(localisation, n) for n in ("pointing_game", "attribution_localisation",
                                                      "top_k_intersection", "relevance_mass_accuracy",
                                                      "relevance_rank_accuracy", "localisation_auc",
                                                      "ground_truth_agreement")},
             **{n: getattr(axiomatic, n) for n in ("completeness", "completeness_gap", "non_sensitivity")}}  # fmt: skip
# the papers' directions: insertion, FCOR and LeRF rise with a faithful map, the others fall; a sparser
# map (Chalasani et al.) and a less complex one (Bhatt et al.) are read as better
HIGHER_IS_BETTER = {"insertion": True, "deletion": False, "infidelity": False, "fcor": True, "sens_avg": False,
                    "sens_max": False, "road_morf": False, "road_lerf": True, "relative_stability": False,
                    "sparseness": True, "complexity": False, "pointing_game": True, "attribution_localisation": True,
                    "top_k_intersection": True, "relevance_mass_accuracy": True, "relevance_rank_accuracy": True,
                    "localisation_auc": True, "ground_truth_agreement": True, "completeness": True,
                    "completeness_gap": False, "non_sensitivity": False, "input_invariance": True}


def setting():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)).double().eval()
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    target = torch.tensor([0, 1, 2, 0, 1, 2])

    def explain_fn(v, t):  # gradient × input of the target logit
        v = v.detach().requires_grad_()
        (grad,) = torch.autograd.grad(model(v).gather(1, t[:, None]).sum(), v)
        return (grad * v).detach()

    return model, x, target, explain_fn, explain_fn(x, target)


def direct(name, model, x, maps, target, explain_fn, options, truth):
    """The functional core called directly, reduced to one score (or curve) per input."""
    if name in ("insertion", "deletion"):
        fractions, curves = insertion_deletion_curves(model, x, maps, name, target, **options)
        return auc(curves, fractions)
    if name in ("infidelity", "fcor"):
        samples = subset_perturbations(model, x, target, **options)
        return (infidelity if name == "infidelity" else faithfulness_correlation)(maps, samples)
    if name.startswith("sens_"):
        distances = sensitivities(explain_fn, x, maps, target, **options)
        return distances.mean(1) if name == "sens_avg" else distances.amax(1)
    if name in ("sparseness", "complexity"):
        return (sparseness if name == "sparseness" else complexity)(maps)
    if "truth" in METRICS[name].needs:
        return FUNCTIONS[name](maps, truth, **options)
    if name in FUNCTIONS:
        return FUNCTIONS[name](model, x, maps, target, **options)
    if name == "input_invariance":
        return axiomatic.input_invariance(model, x, maps, explain_fn, target, **options)
    if name.startswith("road_"):
        return road_curves(model, x, maps, name[5:], target=target, **options)[1]
    scores = relative_stability(model, x, maps, explain_fn, target, **options)
    return torch.stack([scores["ris"], scores["rrs"], scores["ros"]], 1)


def test_the_registry_names_every_metric_with_its_direction():
    assert set(METRICS) == set(OPTIONS)
    assert {name: spec.higher_is_better for name, spec in METRICS.items()} == HIGHER_IS_BETTER
    assert {name for name, spec in METRICS.items() if "explain_fn" in spec.needs} == {
        "sens_avg", "sens_max", "relative_stability", "input_invariance"}
    assert {name for name, spec in METRICS.items() if "truth" in spec.needs} == set(FUNCTIONS) - {
        "completeness", "completeness_gap", "non_sensitivity"}
    assert {name for name, spec in METRICS.items() if spec.needs == ("maps",)} == {"sparseness", "complexity"}
    assert METRICS.names(needs=("maps",)) == ["sparseness", "complexity"]


def test_a_metric_declares_the_direction_of_its_metric_class():
    """The registry's direction is the Metric's own (torchmetrics' ``higher_is_better``)."""
    assert {name: entry.obj.higher_is_better for name, entry in METRICS.items()} == HIGHER_IS_BETTER


@pytest.mark.parametrize("name", list(OPTIONS))
def test_a_metric_by_name_equals_its_functional_core_and_its_metric_the_mean(name):
    model, x, target, explain_fn, maps = setting()
    options = OPTIONS[name]
    expected = direct(name, model, x, maps, target, explain_fn, options, TRUTH)
    inputs = (lambda s: {"truth": TRUTH[s]}) if "truth" in METRICS[name].needs else (lambda s: {})
    scores = score(name, model, x, maps, target, explain_fn, **inputs(slice(None)), **options)
    assert torch.equal(scores.isnan(), expected.isnan())
    torch.testing.assert_close(scores, expected, equal_nan=True, rtol=0, atol=0)
    metric = METRICS[name].obj(**options)
    metric.update(model, x[:2], maps[:2], target[:2], explain_fn=explain_fn, **inputs(slice(0, 2)))
    metric.update(model, x[2:], maps[2:], target[2:], explain_fn=explain_fn, **inputs(slice(2, 6)))
    parts = torch.cat([direct(name, model, x[s], maps[s], target[s], explain_fn, options, TRUTH[s])
                       for s in (slice(0, 2), slice(2, 6))])  # fmt: skip
    result = metric.compute()
    result = torch.stack(list(result.values())) if isinstance(result, dict) else result
    defined = ~parts.isnan().reshape(len(parts), -1).any(1)
    torch.testing.assert_close(result, parts[defined].mean(0), rtol=1e-12, atol=0)
    assert metric.count.item() + metric.left_out.item() == len(x)


def test_an_unknown_metric_is_refused_naming_the_choices():
    with pytest.raises(InputError, match=r"unknown metric 'auc'; expected one of \['insertion', 'deletion'"):
        METRICS["auc"]


@pytest.mark.parametrize("name", ["sens_avg", "relative_stability"])
def test_a_metric_that_explains_refuses_an_update_without_explain_fn(name):
    model, x, target, _, maps = setting()
    with pytest.raises(InputError, match="needs explain_fn="):
        METRICS[name].obj(**OPTIONS[name]).update(model, x, maps, target)
