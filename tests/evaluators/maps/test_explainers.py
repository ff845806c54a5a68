"""Explainers: the registry against Captum called directly; a population explained in
one batched call against its members one by one."""

from __future__ import annotations

import pytest
import torch
from captum import attr

from evaluators.maps import EXPLAINERS, explain
from evaluators.maps import batches
from evaluators.maps.adapters import ExplainedOutput
from foundation.errors import InputError
from foundation.seeds import input_seeds
from lightning_modules import MLPClassifier
from lightning_modules.ensembles import ENSEMBLES

DETERMINISTIC = ["saliency", "integrated_gradients", "input_x_gradient", "guided_backprop", "deeplift",
                 "feature_ablation", "deepshap"]  # fmt: skip


def direct(model: MLPClassifier, x: torch.Tensor, method: str, background: torch.Tensor) -> torch.Tensor:
    """Captum on the two-logit model with target=1 (the positive-class logit)."""
    zero = torch.zeros_like(x[:1])
    calls = {
        "saliency": lambda: attr.Saliency(model).attribute(x, target=1, abs=False),
        "integrated_gradients": lambda: attr.IntegratedGradients(model).attribute(x, zero, target=1, n_steps=50),
        "input_x_gradient": lambda: attr.InputXGradient(model).attribute(x, target=1),
        "guided_backprop": lambda: attr.GuidedBackprop(model).attribute(x, target=1),
        "deeplift": lambda: attr.DeepLift(model).attribute(x, zero, target=1),
        "feature_ablation": lambda: attr.FeatureAblation(model).attribute(x, target=1),
        "deepshap": lambda: attr.DeepLiftShap(model).attribute(x, background, target=1),
    }
    return calls[method]()


def options(method: str, background: torch.Tensor) -> dict:
    return {"baselines": background} if method == "deepshap" else {}


@pytest.mark.parametrize("method", DETERMINISTIC)
def test_registry_matches_captum_called_directly(population, method):
    model = population.member(1)
    x, background = torch.randn(12, 6), torch.randn(5, 6)
    torch.testing.assert_close(explain(model, x, method, **options(method, background)),
                               direct(model, x, method, background), rtol=1e-5, atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("nt_type", ["smoothgrad", "smoothgrad_sq", "vargrad"])
def test_noise_tunnel_methods_match_captum_with_the_same_noise(population, nt_type):
    """Input i's noise is Captum's after ``torch.manual_seed(s_i)`` on input i alone."""
    model = population.member(0)
    x = torch.randn(8, 6)
    ours = explain(model, x, nt_type, seed=3, stdevs=0.1)
    theirs = []
    for i, seed in enumerate(input_seeds(3, None, len(x))):
        torch.manual_seed(seed)
        theirs.append(attr.NoiseTunnel(attr.Saliency(model)).attribute(
            x[i : i + 1], nt_type=nt_type, nt_samples=50, stdevs=0.1, target=1, abs=False))
    torch.testing.assert_close(ours, torch.cat(theirs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", DETERMINISTIC + ["smoothgrad", "vargrad"])
def test_population_in_one_call_equals_members_one_by_one(population, method):
    x, background = torch.randn(10, 6), torch.randn(4, 6)
    opts = options(method, background)
    if method in ("smoothgrad", "vargrad"):  # no noise: the layout of the 50 copies is what is tested
        opts["stdevs"] = 0.0
    batched = explain(population, x, method, **opts)
    assert batched.shape == (3, 10, 6)
    for i in range(3):
        alone = explain(population.member(i), x, method, **opts)
        torch.testing.assert_close(batched[i], alone, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", sorted(EXPLAINERS.names(modality="rows")))
def test_every_explainer_runs_on_an_ensemble(population, method):
    ensemble = ENSEMBLES["perturb"](population, [0, 2], n_perturb=3, sigma=0.1)
    x = torch.randn(4, 6)
    opts = {"baselines": torch.randn(3, 6)} if method in ("deepshap", "gradient_shap") else {}
    if method in ("lime", "kernel_shap", "shapley_value_sampling"):
        opts["n_samples"] = 20
    out = explain(ensemble, x, method, **opts)
    assert out.shape == (4, 6) and torch.isfinite(out).all()
    if method == "saliency":
        (grad,) = torch.autograd.grad(ensemble.explained_output(x.requires_grad_()).sum(), x)
        torch.testing.assert_close(out, grad)


def test_unknown_explainer_is_named():
    with pytest.raises(InputError, match="unknown explainer 'shap'"):
        explain(MLPClassifier(in_features=2), torch.randn(2, 2), "shap")


@pytest.mark.parametrize("method", ["deeplift", "integrated_gradients", "saliency"])
def test_ensemble_of_logits_explains_as_the_mean_of_its_members(population, method):
    # majority's explained output is the members' mean logit: additive, so DeepLift's,
    # IG's and gradients' attributions are the members' mean attributions.
    ensemble = ENSEMBLES["majority"](population, [0, 1, 2])
    x = torch.randn(7, 6)
    members = torch.stack([explain(population.member(i), x, method) for i in range(3)]).mean(0)
    torch.testing.assert_close(explain(ensemble, x, method), members, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("method", "rows_per_input"), [("saliency", 1), ("integrated_gradients", 50), ("input_x_gradient", 1),
                                   ("smoothgrad", 50), ("deepshap", 6)],
)  # fmt: skip
def test_average_ensemble_explained_in_chunks_equals_one_pass(population, method, rows_per_input, monkeypatch):
    ensemble = ENSEMBLES["perturb"](population, [0, 1, 2], n_perturb=4, sigma=0.2)  # 12 members
    x = torch.randn(5, 6)
    options = {"baselines": torch.randn(3, 6)} if method == "deepshap" else {}
    targets = torch.ones(5, dtype=torch.long)
    whole = EXPLAINERS[method].obj(ExplainedOutput(ensemble), x, targets, 5 * rows_per_input,
                                   **({"seeds": input_seeds(1, None, 5)} if method == "smoothgrad" else {}), **options)
    # chunks of 5, 5, 2 members: passes of 5 * rows_per_input rows x 210 activations each
    monkeypatch.setitem(batches.ACTIVATION_FLOATS_PER_CHUNK, "cpu", 5 * rows_per_input * 210 * 5)
    chunked = explain(ensemble, x, method, seed=1, max_batch=5 * rows_per_input, **options)
    torch.testing.assert_close(chunked, whole, rtol=1e-5, atol=1e-6)
