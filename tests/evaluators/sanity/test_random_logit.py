"""Sixt et al.'s random-logit test (evaluators/sanity/random_logit.py) against Quantus 0.6's
``RandomLogit`` and a hand computation (the other class drawn as NumPy's ``RandomState`` draws it;
SSIM from scikit-image)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from skimage.metrics import structural_similarity

from evaluators.maps import explain
from evaluators.sanity.random_logit import other_classes, random_logit
from foundation.errors import InputError
from foundation.modality import reduce_map
from tests.evaluators.sanity.test_model_randomisation import quantus_explain, trained_like_resnet8


def test_random_logit_against_quantus_and_by_hand():
    quantus = pytest.importorskip("quantus", reason="quantus is not installed (pip install quantus==0.6.0)")
    model = trained_like_resnet8(1)
    x, y = torch.randn(6, 3, 32, 32, generator=torch.Generator().manual_seed(2)), torch.tensor([0, 9, 3, 3, 5, 2])
    ours = random_logit(model, x, y, ["saliency"], ["spearman", "ssim"], seed=5)["saliency"]
    metric = quantus.RandomLogit(num_classes=10, seed=5, similarity_func=quantus.similarity_func.correlation_spearman,
                                 normalise=False, disable_warnings=True)  # fmt: skip
    theirs = metric(model=model, x_batch=x.numpy(), y_batch=y.numpy(), a_batch=None,
                    explain_func=quantus_explain("Gradient"), device="cpu")  # fmt: skip
    np.testing.assert_allclose(ours["spearman"], theirs, rtol=0, atol=1e-5)
    # the other class by hand: j-th of the classes other than y, j from NumPy's RandomState(5)
    j = np.random.RandomState(5).randint(0, 9, 6)
    expected = [[c for c in range(10) if c != t][k] for t, k in zip(y.tolist(), j)]
    assert other_classes(y, 10, 5).tolist() == expected

    a = reduce_map(explain(model, x, "saliency", target=y), "sum").double().numpy()
    b = reduce_map(explain(model, x, "saliency", target=torch.tensor(expected)), "sum").double().numpy()
    ssim = [structural_similarity(p, q, data_range=max(p.max(), q.max()) - min(p.min(), q.min())) for p, q in zip(a, b)]
    np.testing.assert_allclose(ours["ssim"], ssim, atol=1e-6)


def test_other_classes_never_the_target():
    target = torch.arange(4).repeat(500)
    other = other_classes(target, 4, 0)
    assert (other != target).all() and set(other.tolist()) == {0, 1, 2, 3}
    counts = torch.bincount(other[target == 0], minlength=4)[1:]  # uniform over the 3 others
    assert counts.min() > 120


def test_a_model_of_one_class_has_no_other_class():
    with pytest.raises(InputError, match="at least 2 classes; got 1"):
        other_classes(torch.zeros(3, dtype=torch.long), 1, 0)
