"""Forward pass of many MLPs whose parameters are stacked along a leading model axis.

``weights[k]`` has shape (M, out_k, in_k) (``nn.Linear.weight`` per model) and
``biases[k]`` (M, 1, out_k). One batched product per layer evaluates all M models:
a batch x of shape (B, d) is shared by every model (expanded, not copied); x of
shape (M, B, d) gives each model its own rows. ReLU between layers, none after the
last. Shared by ``PopulationMLP`` (training) and the ensembles (explaining).

The layers' backward pass computes exactly what ``nn.Linear``'s does for each model
(grad_W = gᵀ h, grad_h = g W, grad_b = Σ_rows g, each a batched product over
models), so a model trained inside a stack gets bit-for-bit the gradients it gets
alone: autograd's own ``baddbmm`` backward orders the sums of layer 1's weight
gradient differently (measured: up to 1e-5 apart per step).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class StackedLinear(torch.autograd.Function):
    """y = h Wᵀ + b for every model: h (M, B, in), W (M, out, in), b (M, 1, out)."""

    @staticmethod
    def forward(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(bias, h, weight.transpose(1, 2))

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        h, weight, _ = inputs
        ctx.save_for_backward(h, weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        h, weight = ctx.saved_tensors
        grad_h = torch.bmm(grad, weight) if ctx.needs_input_grad[0] else None
        grad_w = torch.bmm(grad.transpose(1, 2), h) if ctx.needs_input_grad[1] else None
        grad_b = grad.sum(1, keepdim=True) if ctx.needs_input_grad[2] else None
        return grad_h, grad_w, grad_b


def stacked_forward(
    weights: Sequence[torch.Tensor],
    biases: Sequence[torch.Tensor],
    x: torch.Tensor,
    activations: Sequence[nn.Module] | None = None,
) -> torch.Tensor:
    """Outputs of all M models, shape (M, B, out).

    ``activations``: one ``nn.ReLU`` module per hidden layer, for explainers that
    hook activation modules (DeepLift, guided backprop); by default an in-place ReLU.
    The modules see the rows first, (B, M, width), since DeepLift's hooks split
    their inputs along dim 0 into inputs and baselines.
    """
    h = x.expand(weights[0].shape[0], *x.shape) if x.dim() == 2 else x
    last = len(weights) - 1
    for k, (w, b) in enumerate(zip(weights, biases)):
        h = StackedLinear.apply(h, w, b)
        if k < last:
            # in place is safe: the layer's backward does not need its output
            h = h.relu_() if activations is None else activations[k](h.transpose(0, 1)).transpose(0, 1)
    return h


def stack_linears(models: Sequence[nn.Module]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Stacked (weights, biases) of the ``nn.Linear`` layers of equally shaped models."""
    layers = [[m for m in model.modules() if isinstance(m, nn.Linear)] for model in models]
    weights = [torch.stack([ls[k].weight.detach() for ls in layers]) for k in range(len(layers[0]))]
    biases = [torch.stack([ls[k].bias.detach() for ls in layers]).unsqueeze(1) for k in range(len(layers[0]))]
    return weights, biases
