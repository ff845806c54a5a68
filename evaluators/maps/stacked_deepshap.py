"""DeepSHAP of a stacked ensemble's mean output, in torch: :func:`deeplift_shap_of_ensemble`.

The same definition as the ``deepshap`` explainer (Captum's ``DeepLiftShap`` of an
``MLPEnsemble``'s explained output, ``evaluators.maps.gradients.deepshap``), computed without
Captum's per-row bookkeeping: Captum differentiates each of the N·B (input, background) rows'
outputs separately, about 10 s for 100 inputs and 100 background rows whatever the model, and the
consistency protocol's 2,500-member ``combine`` ensembles would make thousands of such calls.
The model adapter (``evaluators.maps.adapters``) chooses it for an ``MLPEnsemble``'s logit, and
for the ``softmax_rule="rescale"`` variant (Ley et al.'s shap pipeline), which only it computes.
"""

from __future__ import annotations

import torch

from evaluators.maps.batches import activation_floats
from lightning_modules.ensembles import MLPEnsemble
from lightning_modules.interface import POSITIVE_CLASS

DEEPLIFT_EPS = 1e-10  # Captum's DeepLift default: below it a ReLU keeps its plain gradient
SHAP_NONLINEAR_EPS = 1e-6  # shap's DeepExplainer: below it a nonlinearity keeps its plain gradient
# DeepSHAP of a probability: "gradient" differentiates the softmax (Captum through a
# functional softmax); "rescale" applies the rescale rule to it element-wise (shap's
# DeepExplainer on a final nn.Softmax, Ley et al.'s reference pipeline).
SOFTMAX_RULES = ("gradient", "rescale")


def deeplift_shap_of_ensemble(
    ensemble: MLPEnsemble, x: torch.Tensor, baselines: torch.Tensor, softmax_rescale: bool = False,
    target: int | torch.Tensor = POSITIVE_CLASS,
) -> torch.Tensor:
    """DeepLiftShap (Lundberg & Lee's DeepSHAP as Captum's ``DeepLiftShap``) of an
    ensemble's mean logit of class ``target`` (an int, or one per input: (N,)), for (N, d)
    inputs and a (K, d) background (``softmax_rescale``: of a binary ensemble's positive class).
    With ``softmax_rescale``: of its mean positive-class probability p₁ = softmax(z)₁
    instead, the softmax taken element-wise by the rescale rule as ``shap``'s
    ``DeepExplainer`` takes a model's final ``nn.Softmax`` (Ley et al.'s reference
    pipeline): p₁'s multiplier is Δp₁/Δz₁ on z₁ and none on z₀ (where |Δz₁| < 1e-6, the
    plain derivative ∂p₁/∂z at x_i).

    For every pair (x_i, b_k): DeepLIFT with the rescale rule, i.e. the chain rule with
    each ReLU's derivative replaced by the multiplier Δrelu(z)/Δz between the pair's
    pre-activations (the plain derivative at x_i where |Δz| < 1e-10), times x_i - b_k;
    then the mean over the K background rows, per member, and the members' mean; in torch
    for speed (docs/explainers.md; tested equal to Captum)."""
    weights, biases = ensemble.stacked
    n, k = len(x), len(baselines)
    pairs = torch.cat([x.repeat_interleave(k, dim=0), baselines.repeat(n, 1)])  # inputs, then references
    widths = sum(w.shape[1] for w in weights)
    step = max(1, 4 * activation_floats(x.device) // (len(pairs) * widths))
    grad = torch.zeros(n * k, x.shape[1], dtype=x.dtype, device=x.device)
    for start in range(0, ensemble.size, step):
        w_part = [w[start : start + step] for w in weights]
        b_part = [b[start : start + step] for b in biases]
        h, multipliers = pairs.expand(len(w_part[0]), *pairs.shape), []
        for w, b in zip(w_part[:-1], b_part[:-1]):
            z = torch.baddbmm(b, h, w.transpose(1, 2))
            z_in, z_ref = z.split(n * k, dim=1)
            dz = z_in - z_ref
            rescale = (z_in.relu() - z_ref.relu()) / dz
            multipliers.append(torch.where(dz.abs() < DEEPLIFT_EPS, (z_in > 0).to(z.dtype), rescale))
            h = z.relu()
        # d logit_target / d last hidden layer, per member
        if isinstance(target, int):
            g = w_part[-1][:, target : target + 1, :].expand(-1, n * k, -1)
        else:
            g = w_part[-1][:, target.repeat_interleave(k), :]
        if softmax_rescale:
            g = _softmax_rescaled(g, torch.baddbmm(b_part[-1], h, w_part[-1].transpose(1, 2)), w_part[-1], n * k)
        for w, m in zip(reversed(w_part[:-1]), reversed(multipliers)):
            g = torch.bmm(g * m, w)
        grad += g.sum(0)
    return ((pairs[: n * k] - pairs[n * k :]) * grad / ensemble.size).view(n, k, -1).mean(1)


def _softmax_rescaled(g: torch.Tensor, logits: torch.Tensor, w_last: torch.Tensor, pairs: int) -> torch.Tensor:
    """``g`` (d z₁ / d last hidden layer) turned into p₁'s multipliers by the element-wise
    rescale rule, per member and (input, reference) pair; ``logits`` (M, 2·pairs, 2) of
    the inputs, then of the references."""
    z_in, z_ref = logits.split(pairs, dim=1)
    p_in, p_ref = z_in.softmax(-1)[..., 1:], z_ref.softmax(-1)[..., 1:]
    dz = z_in[..., 1:] - z_ref[..., 1:]
    plain = p_in * (1 - p_in) * (w_last[:, 1:2, :] - w_last[:, 0:1, :])  # ∂p₁/∂z · ∂z/∂h at x_i
    return torch.where(dz.abs() < SHAP_NONLINEAR_EPS, plain, g * (p_in - p_ref) / dz)


__all__ = ["SOFTMAX_RULES", "deeplift_shap_of_ensemble"]
