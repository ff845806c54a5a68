"""Many MLPs whose parameters are stacked along a leading model axis.

``weights[k]`` has shape (M, out_k, in_k) (``nn.Linear.weight`` per model) and
``biases[k]`` (M, 1, out_k). One batched product per layer evaluates all M models:
a batch x of shape (B, d) is shared by every model (expanded, not copied); x of
shape (M, B, d) gives each model its own rows. ReLU between layers, none after the
last. ``stacked_forward`` is shared by ``PopulationMLP`` and the ensembles;
``stacked_backward`` is the population's training backward pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def stacked_forward(
    weights: Sequence[torch.Tensor],
    biases: Sequence[torch.Tensor],
    x: torch.Tensor,
    activations: Sequence[nn.Module] | None = None,
    saved: list[torch.Tensor] | None = None,
) -> torch.Tensor:
    """Outputs of all M models, shape (M, B, out).

    ``activations``: one ``nn.ReLU`` module per hidden layer, for explainers that
    hook activation modules (DeepLift, guided backprop); by default an in-place ReLU.
    The modules see the rows first, (B, M, width), since DeepLift's hooks split
    their inputs along dim 0 into inputs and baselines.
    ``saved``: if given, receives each layer's input (for ``stacked_backward``).
    """
    h = x.expand(weights[0].shape[0], *x.shape) if x.dim() == 2 else x
    last = len(weights) - 1
    for k, (w, b) in enumerate(zip(weights, biases)):
        if saved is not None:
            saved.append(h)
        h = torch.baddbmm(b, h, w.transpose(1, 2))
        if k < last:
            # in place is safe: baddbmm's backward does not need its output
            h = h.relu_() if activations is None else activations[k](h.transpose(0, 1)).transpose(0, 1)
    return h


def stacked_backward(
    weights: Sequence[torch.Tensor],
    saved: Sequence[torch.Tensor],
    grad_output: torch.Tensor,
    weight_grads: Sequence[torch.Tensor],
    bias_grads: Sequence[torch.Tensor],
) -> None:
    """Parameter gradients of the stacked MLPs, written into ``weight_grads``/``bias_grads``.

    For each layer, from the last: grad_W = gᵀ h, grad_b = Σ_rows g, then
    g ← (g W) ⊙ [h > 0] for the layer below. These are, per model, the very products
    autograd forms for ``nn.Linear`` (weight gradient gᵀ h, not hᵀ g), so a model
    trained inside a stack gets bit for bit the gradients it gets alone (why not
    autograd's ``baddbmm`` backward: docs/tabular_population.md).
    """
    g = grad_output
    for k in range(len(weights) - 1, -1, -1):
        torch.bmm(g.transpose(1, 2), saved[k], out=weight_grads[k])
        torch.sum(g, 1, keepdim=True, out=bias_grads[k])
        if k:
            # saved[k] is the ReLU output of layer k; threshold_backward is ReLU's own backward
            g = torch.ops.aten.threshold_backward(torch.bmm(g, weights[k]), saved[k], 0.0)


def rows_per_pass(members: int, width: int, block_floats: int) -> int:
    """Rows per forward pass that keep one layer's activations for all members
    (members x rows x width values) within ``block_floats``; at least one."""
    return max(1, block_floats // (members * width))


def stack_linears(models: Sequence[nn.Module]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Stacked (weights, biases) of the ``nn.Linear`` layers of equally shaped models."""
    layers = [[m for m in model.modules() if isinstance(m, nn.Linear)] for model in models]
    weights = [torch.stack([ls[k].weight.detach() for ls in layers]) for k in range(len(layers[0]))]
    biases = [torch.stack([ls[k].bias.detach() for ls in layers]).unsqueeze(1) for k in range(len(layers[0]))]
    return weights, biases
