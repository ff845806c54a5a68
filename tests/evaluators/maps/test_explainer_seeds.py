"""Every explainer's random draws come from its ``seed`` and each input's index: the same seed
gives the same maps whatever the global generators' states, the chunking (``max_batch``) or the
other inputs of the call, and the caller's generators (torch's, NumPy's, Python's) are left as
they were."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from evaluators.maps import EXPLAINERS, explain
from evaluators.maps.registry import trait
from foundation.errors import InputError
from foundation.seeds import input_seeds
from lightning_modules.image_classifier import create_image_model
from lightning_modules.mlp import MLPClassifier

TOL = {"rtol": 1e-5, "atol": 1e-6}
IMAGE_EXPLAINERS = sorted(EXPLAINERS.names(modality="images"))
TABULAR_EXPLAINERS = sorted(EXPLAINERS.names(modality="rows"))
SAMPLING = sorted(name for name in IMAGE_EXPLAINERS if trait(EXPLAINERS[name], "draws"))


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return create_image_model("small_cnn", num_classes=3, in_channels=1).eval()


@pytest.fixture(scope="module")
def x():
    return torch.randn(5, 1, 8, 8, generator=torch.Generator().manual_seed(1))


def image_options(method: str) -> dict:
    background = torch.randn(6, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    return {"gradient_shap": {"baselines": background, "n_samples": 4}, "rise": {"n_masks": 16, "s": 2},
            "integrated_gradients": {"n_steps": 4}, "smoothgrad": {"nt_samples": 4},
            "smoothgrad_sq": {"nt_samples": 4}, "vargrad": {"nt_samples": 4}}.get(method, {})  # fmt: skip


def global_states() -> tuple:
    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def assert_same_states(before: tuple, after: tuple) -> None:
    assert torch.equal(before[0], after[0]), "torch's global generator moved"
    assert all(np.array_equal(a, b) for a, b in zip(before[1], after[1])), "NumPy's global generator moved"
    assert before[2] == after[2], "Python's random moved"


def reseed_globals(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


@pytest.mark.parametrize("method", IMAGE_EXPLAINERS)
def test_image_maps_depend_on_the_seed_alone_and_leave_global_generators_alone(net, x, method):
    reseed_globals(0)
    before = global_states()
    first = explain(net, x, method, **image_options(method))
    assert_same_states(before, global_states())
    reseed_globals(1)  # other global states: the same maps
    assert torch.equal(first, explain(net, x, method, **image_options(method)))
    assert torch.equal(first, explain(net, x, method, seed=0, **image_options(method)))
    if method in SAMPLING:
        assert not torch.allclose(first, explain(net, x, method, seed=1, **image_options(method)))


@pytest.mark.parametrize("method", IMAGE_EXPLAINERS)
def test_image_maps_do_not_depend_on_max_batch_or_the_other_images(net, x, method):
    # LRP divides by each unit's pre-activation z + ε: where z is near 0, the float rounding of a
    # batched convolution (a few 1e-7) grows to a few 1e-6 in the relevance
    tol = {"rtol": 1e-4, "atol": 1e-5} if method.startswith("lrp_") else TOL
    whole = explain(net, x, method, seed=3, **image_options(method))
    for max_batch in (1, 3):
        torch.testing.assert_close(explain(net, x, method, seed=3, max_batch=max_batch, **image_options(method)),
                                   whole, **tol)  # fmt: skip
    part = explain(net, x[2:4], method, seed=3, index=torch.tensor([2, 3]), **image_options(method))
    torch.testing.assert_close(part, whole[2:4], **tol)


def test_image_explainer_refuses_a_bad_seed_or_index(net, x):
    with pytest.raises(InputError, match="option seed=-2"):
        explain(net, x, "saliency", seed=-2)
    with pytest.raises(InputError, match=r"option index of shape \(2,\)"):
        explain(net, x, "smoothgrad", index=torch.tensor([0, 1]))
    with pytest.raises(InputError, match="option nt_samples=0; expected a positive integer"):
        explain(net, x, "vargrad", nt_samples=0)
    with pytest.raises(InputError, match="option stdevs=-0.1; expected a non-negative number"):
        explain(net, x, "gradient_shap", stdevs=-0.1, **image_options("gradient_shap"))


def tabular_options(method: str) -> dict:
    background = torch.randn(4, 5, generator=torch.Generator().manual_seed(3))
    if method in ("integrated_gradients", "deeplift"):
        return {"baselines": background[:1]}
    if method in ("deepshap", "gradient_shap"):
        return {"baselines": background, **({"n_samples": 6} if method == "gradient_shap" else {})}
    return {"n_samples": 12} if method in ("lime", "kernel_shap") else {}


@pytest.mark.parametrize("method", TABULAR_EXPLAINERS)
def test_tabular_maps_depend_on_the_seed_alone_and_leave_global_generators_alone(method):
    torch.manual_seed(0)
    model = MLPClassifier(in_features=5, hidden=(8,)).eval()
    rows = torch.randn(3, 5, generator=torch.Generator().manual_seed(4))
    reseed_globals(0)
    before = global_states()
    first = explain(model, rows, method, **tabular_options(method))
    assert_same_states(before, global_states())
    reseed_globals(1)
    assert torch.equal(first, explain(model, rows, method, **tabular_options(method)))
    if method in ("smoothgrad", "smoothgrad_sq", "vargrad", "gradient_shap", "lime", "kernel_shap",
                  "shapley_value_sampling"):  # fmt: skip
        assert not torch.equal(first, explain(model, rows, method, seed=1, **tabular_options(method)))


def test_a_rows_seed_is_the_global_seed_captum_would_see():
    """Row i of a call with seed s draws what Captum draws on row i alone after
    torch.manual_seed(s_i) and np.random.seed(s_i), s_i = derived_seed(s, i): Expected Gradients
    takes NumPy's baseline indices and α, torch's noise."""
    from captum import attr

    from evaluators.maps.adapters import ExplainedOutput

    torch.manual_seed(0)
    model = MLPClassifier(in_features=5, hidden=(8,)).eval()
    rows, background = torch.randn(3, 5), torch.randn(4, 5)
    ours = explain(model, rows, "gradient_shap", baselines=background, seed=11)
    for i, seed in enumerate(input_seeds(11, None, 3)):
        torch.manual_seed(seed)
        np.random.seed(seed)
        theirs = attr.GradientShap(ExplainedOutput(model)).attribute(rows[i : i + 1], background, n_samples=50,
                                                                     stdevs=0.0, target=1)  # fmt: skip
        torch.testing.assert_close(ours[i : i + 1], theirs, **TOL)
