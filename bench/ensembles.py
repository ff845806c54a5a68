"""Explaining a `combine` ensemble: batched vs materialising each model and looping.

    python bench/ensembles.py

The ensemble: 2 curves x 25 points x 50 first-layer weight perturbations (sigma 0.2)
= 2,500 German Credit MLPs (61 inputs); the explanation: Saliency (input gradient of
the ensemble's explained output, its members' mean positive-class logit) on 1,000 inputs.

(batched) ``evaluators.maps.explain(ensemble, x, "saliency")``: the registry's
          Saliency on the ``MLPEnsemble`` module, members stacked in chunks of
          cache-sized activations, each chunk one forward and backward pass;
(looped)  what a user does without stacking: build each of the 2,500 models as its
          own ``MLPClassifier``, explain it with ``Saliency`` and average;
(looped, plain autograd) the same loop without Captum, to show where the time goes.

Check (``check``): the three attributions must be the same numbers. The batched way
multiplies stacked members in other kernels than one model at a time, and where a hidden
pre-activation sits within float32 rounding of 0 a last-bit difference flips that member's
ReLU gate for that input, moving its gradient by far more than rounding (diluted by the
2,500 members); so (a) the timed float32 attributions may differ beyond rtol 1e-3 (atol 1e-5
of the input's largest |value|) at no more than 1 % of the values, and (b) batched and plain
loop run again in float64 on the first ``N_CHECK`` inputs, where no gate flips, and agree
to 1e-10 of the input's largest |value| (``bench/_agreement.py``). The last line is one
JSON object.
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

import torch
from captum.attr import Saliency

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._agreement import check_float32, check_float64  # noqa: E402
from evaluators.maps import explain  # noqa: E402
from foundation.files import json_text  # noqa: E402
from lightning_modules import MLPClassifier, PopulationMLP  # noqa: E402
from lightning_modules.curves import MLPCurve  # noqa: E402
from lightning_modules.ensembles import build_ensemble  # noqa: E402

D, N_INPUTS, N_T, N_PERTURB, N_CHECK = 61, 1000, 25, 50, 8


def materialise(weights, biases, i: int) -> MLPClassifier:
    model = MLPClassifier(in_features=D).to(weights[0].dtype)
    linears = [m for m in model.net if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for lin, w, b in zip(linears, weights, biases):
            lin.weight.copy_(w[i])
            lin.bias.copy_(b[i, 0])
    return model


def looped_captum(ensemble, x: torch.Tensor) -> torch.Tensor:
    """(looped): each member materialised and explained by Captum's Saliency, averaged."""
    weights, biases = ensemble.stacked
    looped = torch.zeros_like(x)
    for i in range(ensemble.size):
        model = materialise(weights, biases, i)
        looped += Saliency(model.explained_output).attribute(x, abs=False)
    return looped / ensemble.size


def looped_plain(ensemble, x: torch.Tensor) -> torch.Tensor:
    """(looped, plain autograd): each member materialised, its input gradient by autograd, averaged."""
    weights, biases = ensemble.stacked
    plain = torch.zeros_like(x)
    for i in range(ensemble.size):
        model = materialise(weights, biases, i)
        xi = x.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(model.explained_output(xi).sum(), xi)
        plain += grad
    return plain / ensemble.size


def check(ensemble, x: torch.Tensor, batched: torch.Tensor, looped: torch.Tensor, plain: torch.Tensor,
          n_check: int) -> dict:  # fmt: skip
    """The module docstring's check (AssertionError where it fails) and its figures."""
    stats = {"looped": check_float32(looped, batched, "batched vs looped"),
             "plain": check_float32(plain, batched, "batched vs plain loop")}
    ensemble64, x64 = copy.deepcopy(ensemble).double(), x[:n_check].double()
    stats["float64"] = check_float64(looped_plain(ensemble64, x64), explain(ensemble64, x64, "saliency"),
                                     "batched vs plain loop")  # fmt: skip
    return stats


def main() -> None:
    torch.manual_seed(0)
    curves = [MLPCurve(in_features=D, start_seed=s, end_seed=s + 1) for s in (0, 2)]
    with torch.no_grad():  # a bent curve, as after training
        for curve in curves:
            for name, p in curve.named_parameters():
                if name.endswith("_1"):
                    p.add_(0.1 * torch.randn_like(p))
    population = PopulationMLP(in_features=D, seeds=[0, 1, 2, 3])  # the curves' end points' seeds
    ensemble = build_ensemble(population, "combine", [0, 1, 2, 3], curves, n_t=N_T, n_perturb=N_PERTURB, sigma=0.2)
    x = torch.randn(N_INPUTS, D)
    print(f"combine ensemble: {ensemble.size} MLPs, {N_INPUTS} inputs x {D} features")

    start = time.perf_counter()
    batched = explain(ensemble, x, "saliency")
    batched_s = time.perf_counter() - start
    start = time.perf_counter()
    looped = looped_captum(ensemble, x)
    looped_s = time.perf_counter() - start
    start = time.perf_counter()
    plain = looped_plain(ensemble, x)
    plain_s = time.perf_counter() - start

    agreement = check(ensemble, x, batched, looped, plain, N_CHECK)
    print(f"batched: {batched_s:.2f} s; looped with Captum: {looped_s:.2f} s; looped, plain autograd: {plain_s:.2f} s")
    print(f"ratio looped/batched: {looped_s / batched_s:.1f} (plain-autograd loop: {plain_s / batched_s:.1f})")
    print(json_text({
        "ratio": looped_s / batched_s, "batched_s": batched_s, "looped_s": looped_s,
        "looped_plain_autograd_s": plain_s, "ratio_vs_plain_autograd_loop": plain_s / batched_s,
        "models": ensemble.size, "inputs": N_INPUTS, "agreement": agreement,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
