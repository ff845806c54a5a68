"""Stacked MLPs (lightning_modules/stacked.py): the stacked forward pass against each model's own
``nn.Sequential`` in float64 (shared rows and rows per model), the hand-written backward pass
against autograd's gradients of each model alone, and the stacking of ``nn.Linear`` layers."""

from __future__ import annotations

import torch
from torch import nn

from lightning_modules.stacked import rows_per_pass, stack_linears, stacked_backward, stacked_forward


def models(m=3, seed=0):
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2)).double()
            for _ in range(m)]  # fmt: skip


def test_the_stacked_forward_pass_is_each_models_own():
    nets = models()
    weights, biases = stack_linears(nets)
    assert [w.shape for w in weights] == [(3, 6, 4), (3, 5, 6), (3, 2, 5)] and biases[0].shape == (3, 1, 6)
    shared, own = torch.randn(7, 4, dtype=torch.float64), torch.randn(3, 7, 4, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(stacked_forward(weights, biases, shared), torch.stack([n(shared) for n in nets]))
        torch.testing.assert_close(stacked_forward(weights, biases, own),
                                   torch.stack([n(x) for n, x in zip(nets, own)]))  # fmt: skip
        relus = [nn.ReLU(), nn.ReLU()]
        torch.testing.assert_close(stacked_forward(weights, biases, shared, relus),
                                   stacked_forward(weights, biases, shared))  # fmt: skip


def test_the_backward_pass_is_autograds_for_each_model_alone():
    nets = models()
    weights, biases = stack_linears(nets)
    x, y = torch.randn(3, 8, 4, dtype=torch.float64), torch.randint(0, 2, (8,))
    saved: list[torch.Tensor] = []
    with torch.no_grad():
        out = stacked_forward(weights, biases, x, saved=saved)
    probabilities = out.softmax(-1)  # d(sum of cross-entropies)/d(logits) = softmax − one-hot
    grad_output = probabilities - nn.functional.one_hot(y, 2).double()
    weight_grads, bias_grads = [torch.empty_like(w) for w in weights], [torch.empty_like(b) for b in biases]
    stacked_backward(weights, saved, grad_output, weight_grads, bias_grads)
    for m, net in enumerate(nets):
        nn.functional.cross_entropy(net(x[m]), y, reduction="sum").backward()
        linears = [layer for layer in net if isinstance(layer, nn.Linear)]
        for k, layer in enumerate(linears):
            torch.testing.assert_close(weight_grads[k][m], layer.weight.grad)
            torch.testing.assert_close(bias_grads[k][m, 0], layer.bias.grad)


def test_rows_per_pass_keep_a_layer_within_the_block():
    assert rows_per_pass(10, 64, 10 * 64 * 100) == 100 and rows_per_pass(10, 64, 10 * 64 * 100 - 1) == 99
    assert rows_per_pass(1000, 128, 5) == 1
