"""lightning_modules/curves.py: ``MLPCurve``'s stacked points equal the classifier at each t.
The curve layers themselves: test_curve_model.py; curves trained in a stack: test_curve_population.py."""

from __future__ import annotations

import torch

from lightning_modules import MLPClassifier
from lightning_modules.curves import MLPCurve
from lightning_modules.stacked import stacked_forward


def test_mlp_curve_stacked_points_equal_classifier_at_t():
    curve = MLPCurve(in_features=4, mode="trained", start_seed=3, end_seed=4)
    x = torch.randn(6, 4)
    torch.testing.assert_close(curve.classifier_at(0.0)(x), MLPClassifier(in_features=4, seed=3)(x))
    torch.testing.assert_close(curve.classifier_at(1.0)(x), MLPClassifier(in_features=4, seed=4)(x))
    with torch.no_grad():
        for p in curve.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ts = torch.tensor([0.0, 0.4, 1.0])
    out = stacked_forward(*curve.stacked_at(ts), x)
    for i, t in enumerate(ts.tolist()):
        torch.testing.assert_close(out[i], curve.classifier_at(t)(x), rtol=1e-5, atol=1e-6)
