"""Explaining Ley et al.'s table models: seconds per ``explain`` call of each method.

    python bench/tabular_explain.py

A ``PopulationMLP`` of ``M`` members, an ``average`` ``MLPEnsemble`` of them, a ``combine``
ensemble of 2,500 members (2 curves x 25 points x 50 perturbations) and one ``MLPClassifier``, on ``N``
standard-normal rows of ``D`` features (HELOC's 23); each method with its registry defaults
(SmoothGrad 50 samples, Integrated Gradients 50 steps, GradientShap 50 samples, DeepSHAP and
GradientShap over a background of ``B`` rows). The perturbation methods (LIME, KernelSHAP,
Shapley value sampling) on ``N_SLOW`` rows. Median of ``REPEATS`` calls.

The naive way, for the population: its members explained one after another (``ratio``: their
seconds over the population's, summed over the methods). Check (``check``): each member's maps
inside the population equal the member's alone, to 1e-4 of the map's largest |value| (the
stacked products round otherwise than ``nn.Linear``'s; a gate flip within float32 rounding moves
a value by more, so at most 1 % of the values may differ). The last line is one JSON object:
``ratio`` and seconds per (model, method).

Measured (machine D, 2 cores shared with other jobs, 2026-11-28): docs/performance.md.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from evaluators.maps import explain  # noqa: E402
from foundation.files import json_text  # noqa: E402
from lightning_modules import MLPClassifier, PopulationMLP  # noqa: E402
from lightning_modules.curves import MLPCurve  # noqa: E402
from lightning_modules.ensembles import build_ensemble  # noqa: E402

M, N, D, B, N_SLOW, REPEATS = 20, 200, 23, 20, 4, 1
N_T, N_PERTURB = 25, 50  # the combine ensemble: 2 curves x N_T points x N_PERTURB perturbations
FAST = ("saliency", "smoothgrad", "vargrad", "gradient_shap", "integrated_gradients", "input_x_gradient",
        "guided_backprop", "deeplift", "deepshap", "feature_ablation")
SLOW = ("lime", "kernel_shap", "shapley_value_sampling")


def seconds(model, x, method, **options) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        explain(model, x, method, seed=0, **options)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def check(population_maps: torch.Tensor, member_maps: torch.Tensor, method: str) -> None:
    """The module docstring's check (AssertionError where it fails)."""
    scale = member_maps.abs().amax(dim=(1, 2), keepdim=True).clamp_min(1e-12)
    off = ((population_maps - member_maps).abs() > 1e-4 * scale).double().mean().item()
    assert off <= 0.01, f"{method}: {off:.2%} of the population's values differ from its members' alone"


def main() -> None:
    torch.manual_seed(0)
    population = PopulationMLP(in_features=D, seeds=list(range(M))).eval()
    curves = [MLPCurve(in_features=D, start_seed=s, end_seed=s + 1) for s in (0, 2)]
    models = {
        "mlp": MLPClassifier(in_features=D, seed=0).eval(),
        "population": population,
        "average": build_ensemble(population, "average", list(range(M))),
        "combine": build_ensemble(PopulationMLP(in_features=D, seeds=[0, 1, 2, 3]), "combine", [0, 1, 2, 3], curves,
                                  n_t=N_T, n_perturb=N_PERTURB, sigma=0.2),
    }
    x, background = torch.randn(N, D), torch.randn(B, D)
    out, looped, batched = {}, 0.0, 0.0
    for name, model in models.items():
        for method in FAST + (SLOW if name != "combine" else ()):
            if name == "combine" and method not in ("saliency", "smoothgrad", "deepshap"):
                continue
            options = {"baselines": background} if method in ("deepshap", "gradient_shap") else {}
            rows = x[:N_SLOW] if method in SLOW else x
            out[f"{name}/{method}"] = round(seconds(model, rows, method, **options), 4)
            print(f"{name:10s} {method:24s} {out[f'{name}/{method}']:.3f} s", flush=True)
            if name == "population" and method in FAST:
                start = time.perf_counter()
                members = torch.stack([explain(population.member(i), rows, method, seed=0, **options)
                                       for i in range(population.size)])  # fmt: skip
                looped += time.perf_counter() - start
                batched += out[f"{name}/{method}"]
                check(explain(population, rows, method, seed=0, **options), members, method)
    print(f"population, members one by one / in one call: {looped:.2f} s / {batched:.2f} s")
    print(json_text({"ratio": looped / batched, "looped_s": looped, "batched_s": batched, "seconds": out}))


if __name__ == "__main__":
    main()
