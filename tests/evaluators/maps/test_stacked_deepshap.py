"""DeepSHAP of a stacked ensemble in torch (evaluators/maps/stacked_deepshap.py): equal to the
generic ``deepshap`` and to Captum's ``DeepLiftShap`` of the ensemble's class scores; with the
softmax rescaled, each pair's attributions sum to its probability difference (float64) and equal
shap's ``DeepExplainer`` on a final softmax; the softmax rule checked."""

from __future__ import annotations

import pytest
import torch
from captum import attr

from evaluators.maps import EXPLAINERS, batches, explain
from evaluators.maps.adapters import ExplainedOutput
from foundation.errors import InputError
from lightning_modules import PopulationMLP
from lightning_modules.ensembles import ENSEMBLES, MLPEnsemble
from tools.shap_softmax_ablation import MeanSoftmax


def test_ensemble_deepshap_in_torch_equals_captums_deepliftshap(population, monkeypatch):
    """``stacked_deepshap`` computes the generic ``deepshap`` of the ensemble's class scores
    (the registry's function on ``ExplainedOutput``), which is Captum's ``DeepLiftShap``."""
    ensemble = ENSEMBLES["perturb"](population, [0, 1, 2], n_perturb=4, sigma=0.2)  # 12 members
    torch.manual_seed(3)
    x, background = torch.randn(9, 6), torch.randn(5, 6)
    background[0] = x[0]  # a reference equal to its input: every Δz is 0, Captum's plain-gradient branch
    captum = attr.DeepLiftShap(ExplainedOutput(ensemble)).attribute(x, baselines=background, target=1)
    generic = EXPLAINERS["deepshap"].obj(ExplainedOutput(ensemble), x, torch.ones(9, dtype=torch.long), 256,
                                         baselines=background)  # fmt: skip
    torch.testing.assert_close(generic, captum)
    monkeypatch.setitem(batches.ACTIVATION_FLOATS_PER_CHUNK, "cpu", 1)  # one member per chunk
    torch.testing.assert_close(explain(ensemble, x, "deepshap", baselines=background), generic, rtol=1e-4, atol=1e-6)
    labels = torch.tensor([0, 1, 1, 0, 1, 0, 0, 1, 1])  # a class per input
    torch.testing.assert_close(explain(ensemble, x, "deepshap", target=labels, baselines=background),
                               attr.DeepLiftShap(ExplainedOutput(ensemble)).attribute(x, baselines=background,
                                                                                      target=labels),
                               rtol=1e-4, atol=1e-6)  # fmt: skip
    probability = MLPEnsemble(*ensemble.stacked, explain_output="probability")  # softmax: Captum's own path
    torch.testing.assert_close(
        explain(probability, x, "deepshap", baselines=background),
        attr.DeepLiftShap(ExplainedOutput(probability)).attribute(x, baselines=background, target=1),
    )
    with pytest.raises(InputError, match="needs option baselines"):
        explain(ensemble, x, "deepshap")


def test_deepshap_with_the_softmax_rescaled_sums_to_each_pairs_probability_difference(population):
    """DeepLIFT's rescale rule on every nonlinearity (the ReLUs and, element-wise, the
    softmax) makes each (input, reference) pair's attributions sum to the change of the
    explained output: the mean over the background of p₁(x) - p₁(b), here in float64."""
    weights, biases = ([t.double() for t in ts] for ts in ENSEMBLES["average"](population, [0, 1, 2]).stacked)
    ensemble = MLPEnsemble(weights, biases, explain_output="probability")
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(7, 6, generator=gen, dtype=torch.float64)
    background = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    phi = explain(ensemble, x, "deepshap", baselines=background, softmax_rule="rescale")
    with torch.no_grad():
        expected = ensemble.explained_output(x) - ensemble.explained_output(background).mean()
    torch.testing.assert_close(phi.sum(1), expected, rtol=1e-9, atol=1e-12)
    gradient_rule = explain(ensemble, x, "deepshap", baselines=background)  # Captum through the softmax
    assert (gradient_rule.sum(1) - expected).abs().max() > 1e-3  # which does not sum to it


def test_deepshap_softmax_rescale_equals_shaps_deepexplainer_on_a_final_softmax(population):
    shap = pytest.importorskip("shap")  # not a project dependency: see tools/shap_softmax_ablation.py

    ensemble = MLPEnsemble(*ENSEMBLES["average"](population, [0, 1, 2]).stacked, explain_output="probability")
    torch.manual_seed(5)
    x, background = torch.randn(6, 6), torch.randn(8, 6)
    values = shap.DeepExplainer(MeanSoftmax(*ensemble.stacked).eval(), background).shap_values(
        x, check_additivity=False)
    ours = explain(ensemble, x, "deepshap", baselines=background, softmax_rule="rescale")
    torch.testing.assert_close(ours, torch.tensor(values[..., 1], dtype=torch.float32), rtol=1e-4, atol=1e-6)


def test_softmax_rule_is_checked():
    ensemble = ENSEMBLES["average"](PopulationMLP(in_features=3, seeds=[0]), [0])
    x = torch.zeros(2, 3)
    with pytest.raises(InputError, match="option softmax_rule='exact'"):
        explain(ensemble, x, "deepshap", baselines=x, softmax_rule="exact")
    with pytest.raises(InputError, match="expected explain_output='probability'"):
        explain(ensemble, x, "deepshap", baselines=x, softmax_rule="rescale")  # a logit ensemble
