"""The maps package's own functions (evaluators/maps/__init__.py): what inputs are (their
modality by shape), which explainers a model and its inputs take (the registry's entries by
modality), and ``explain``'s refusals naming the method and what it takes. Every method's maps
against Captum: test_explainers.py, test_image_explainers.py, test_explain_registry.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from evaluators.maps import EXPLAINERS, explain, explainer_names, input_kind
from foundation.errors import InputError
from lightning_modules import MLPClassifier


def test_inputs_are_rows_images_or_neither():
    assert input_kind(torch.zeros(2, 5)) == "rows" and input_kind(torch.zeros(2, 3, 4, 4)) == "images"
    assert input_kind(torch.zeros(2, 3, 4)) is None


def test_the_explainers_a_model_and_its_inputs_take():
    rows = sorted(n for n, e in EXPLAINERS.items() if "rows" in e.modalities)
    images = sorted(n for n, e in EXPLAINERS.items() if "images" in e.modalities)
    assert explainer_names(MLPClassifier(3)) == rows and "lime" in rows and "gradcam" not in rows
    cnn = nn.Sequential(nn.Conv2d(3, 2, 3), nn.Flatten(), nn.Linear(8, 2))  # a user's module: a Conv2d, images
    assert explainer_names(cnn) == images and "gradcam" in images and "lime" not in images
    both = sorted(n for n, e in EXPLAINERS.items() if {"rows", "images"} <= set(e.modalities))
    assert explainer_names(cnn, torch.zeros(1, 3, 5)) == both  # inputs of another shape


def test_explain_refuses_what_a_method_does_not_take():
    model, x = MLPClassifier(3), torch.zeros(2, 3)
    with pytest.raises(InputError, match=r"explainer 'gradcam' takes images \(N, C, H, W\); got inputs of shape "
                                         r"\(2, 3\)"):  # fmt: skip
        explain(model, x, "gradcam")
    with pytest.raises(InputError, match=r"explainer 'deepshap' needs option baselines: a tensor of inputs \(B, 3\)"):
        explain(model, x, "deepshap")
    with pytest.raises(InputError, match="option seed=-1"):
        explain(model, x, "saliency", seed=-1)
