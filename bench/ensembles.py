"""Explaining a `combine` ensemble: batched vs materialising each model and looping.

    python bench/ensembles.py

The ensemble: 2 curves x 25 points x 50 first-layer weight perturbations (sigma 0.2)
= 2,500 German Credit MLPs (61 inputs); the explanation: Saliency (input gradient of
the ensemble's explained output, its members' mean positive-class logit) on 1,000 inputs.

(batched) ``evaluators.maps.tabular_explainers.explain(ensemble, x, "saliency")``: Captum's
          Saliency on the ``MLPEnsemble`` module, members stacked in chunks of
          cache-sized activations, each chunk one forward and backward pass;
(looped)  what a user does without stacking: build each of the 2,500 models as its
          own ``MLPClassifier``, explain it with ``Saliency`` and average;
(looped, plain autograd) the same loop without Captum, to show where the time goes.
The three attributions are checked to agree. The last line is one JSON object.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from captum.attr import Saliency

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from lightning_modules import MLPClassifier  # noqa: E402
from lightning_modules.curves import MLPCurve  # noqa: E402
from evaluators.maps import explain  # noqa: E402
from lightning_modules.ensembles import ENSEMBLES  # noqa: E402

D, N_INPUTS, N_T, N_PERTURB = 61, 1000, 25, 50


def materialise(weights, biases, i: int) -> MLPClassifier:
    model = MLPClassifier(in_features=D)
    linears = [m for m in model.net if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for lin, w, b in zip(linears, weights, biases):
            lin.weight.copy_(w[i])
            lin.bias.copy_(b[i, 0])
    return model


def main() -> None:
    torch.manual_seed(0)
    curves = [MLPCurve(in_features=D, start_seed=s, end_seed=s + 1) for s in (0, 2)]
    with torch.no_grad():  # a bent curve, as after training
        for curve in curves:
            for name, p in curve.named_parameters():
                if name.endswith("_1"):
                    p.add_(0.1 * torch.randn_like(p))
    ensemble = ENSEMBLES["combine"](curves, n_t=N_T, n_perturb=N_PERTURB, sigma=0.2)
    x = torch.randn(N_INPUTS, D)
    print(f"combine ensemble: {ensemble.size} MLPs, {N_INPUTS} inputs x {D} features")

    start = time.perf_counter()
    batched = explain(ensemble, x, "saliency")
    batched_s = time.perf_counter() - start

    weights, biases = ensemble.stacked
    start = time.perf_counter()
    looped = torch.zeros_like(x)
    for i in range(ensemble.size):
        model = materialise(weights, biases, i)
        looped += Saliency(model.explained_output).attribute(x, abs=False)
    looped /= ensemble.size
    looped_s = time.perf_counter() - start

    start = time.perf_counter()
    plain = torch.zeros_like(x)
    for i in range(ensemble.size):
        model = materialise(weights, biases, i)
        xi = x.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(model.explained_output(xi).sum(), xi)
        plain += grad
    plain /= ensemble.size
    plain_s = time.perf_counter() - start

    torch.testing.assert_close(batched, looped, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(batched, plain, rtol=1e-4, atol=1e-6)
    print(f"batched: {batched_s:.2f} s; looped with Captum: {looped_s:.2f} s; looped, plain autograd: {plain_s:.2f} s")
    print(f"ratio looped/batched: {looped_s / batched_s:.1f} (plain-autograd loop: {plain_s / batched_s:.1f})")
    print(json.dumps({
        "ratio": looped_s / batched_s, "batched_s": batched_s, "looped_s": looped_s,
        "looped_plain_autograd_s": plain_s, "ratio_vs_plain_autograd_loop": plain_s / batched_s,
        "models": ensemble.size, "inputs": N_INPUTS,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
