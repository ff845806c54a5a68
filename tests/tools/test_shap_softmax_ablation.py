"""tools/shap_softmax_ablation.py: the reference code's model rebuilt from a stacked ensemble
(shap itself is not a project dependency, so only the rebuilt model is tested here)."""

from __future__ import annotations

import torch

from lightning_modules.ensembles import MLPEnsemble
from tools.shap_softmax_ablation import MeanSoftmax


def test_mean_softmax_is_the_ensembles_mean_probability_layer_by_layer():
    gen = torch.Generator().manual_seed(0)
    shapes = [(5, 7), (4, 5), (2, 4)]  # (out, in) per layer, 3 members
    weights = [torch.randn(3, o, i, generator=gen, dtype=torch.float64) for o, i in shapes]
    biases = [torch.randn(3, 1, o, generator=gen, dtype=torch.float64) for o, _ in shapes]
    x = torch.randn(6, 7, generator=gen, dtype=torch.float64)
    model = MeanSoftmax(weights, biases).double()
    torch.testing.assert_close(model(x), MLPEnsemble(weights, biases).probabilities(x))
    by_hand = torch.stack([
        torch.softmax((torch.relu(torch.relu(x @ weights[0][m].T + biases[0][m]) @ weights[1][m].T + biases[1][m])
                       @ weights[2][m].T + biases[2][m]), dim=-1)
        for m in range(3)
    ]).mean(0)  # fmt: skip
    torch.testing.assert_close(model(x), by_hand)
    assert sum(isinstance(m, torch.nn.Softmax) for m in model.modules()) == 3  # one per member, for shap's hooks
