"""Decker et al.'s AGG_faith and AGG_robust weights: the reference code's per-sample loop vs the batched aggregators.

    python bench/optimised_aggregation.py

Seconds per input to obtain the convex weights ω = argmin_{ω ∈ Ω} ωᵀΓω (Decker et al. 2024,
§4, App. C.2; ``evaluators.aggregators.optimised_aggregators``) of Γ_faith and of Γ_robust, on
m_agg = ``M_AGG`` fitting samples, for the seven explainers of Decker et al.'s Table 1
(``EXPLAINERS``: Saliency, GuidedBackprop, DeepLift, IntGrad with 20 steps, InputxGrad,
SmoothGrad and VarGrad with 10 noise samples), each map post-processed as the
aggregators do (channel sum, |·|, min-max, Gaussian σ = 1), for:

(CIFAR-10) ``N_BATCHED`` test images of CIFAR-10 (the datamodule's ``probe``) with the reference
           ResNet-8 (``REFERENCE_RUN``, ``make cifar10-resnet8``, loaded with ``load_run``; a random ResNet-8
           (``random_model``) on random images where that run folder is missing, said so);
(224)      ``N_BATCHED_224`` images of the ImageNet-style validation folder at 224 × 224
           (``DATA_DIR``/images; random images where it is missing, said so) with a random
           torchvision ResNet-18 (``random_model``: ``create_image_model``'s initialisation
           plus random batch-norm offsets, see there), at settings reduced to keep the bench
           to minutes on a CPU: ``M_ROBUST_224`` samples for Γ_robust (Γ_faith keeps
           ``M_AGG``), ``STEPS_224`` IG steps and noise samples, and no DeepLift (left out when
           Captum's DeepLift refused torchvision's reused ReLU modules; the registry now explains
           a copy with one module per use, evaluators/maps/hooks.py, and the settings stay as measured).

(a) the reference code's way (``thomdeck/aggopt``), written here with the framework's
    public pieces: one input at a time; Γ_robust from each of the m noisy copies x + ε_s
    (``uniform_noise``) explained separately by each explainer (``explainer_maps`` on one
    copy: k m calls per input) and (E − E_s)ᵀ(E − E_s) summed sample by sample in NumPy
    float64; Γ_faith from m forward passes one at a time (``superpixels``,
    ``subset_choices``, ``unit_masks``, ``explained_scores``), Iᵀφ and Yeh's β in NumPy
    float64; one cvxpy problem per input (``solve_simplex_qp(method="cvxpy")`` on B = 1);
    on the first ``N_NAIVE`` (``N_NAIVE_224``) inputs;
(b) ``optimised_aggregation(model, x, "agg_faith" / "agg_robust", explainers, n_samples=m)``
    (``MAX_BATCH`` rows per forward pass; Γ batched; the batched exact simplex solver),
    timed on each of (a)'s inputs alone, then on the other inputs in one call. The robust
    Γ is explained max(1, ⌊max_batch / m⌋) inputs per call anyway, so the split costs (b)
    nothing measurable; it gives (b) on (a)'s inputs the same input index (0) as (a).

Each way computes the input's own maps at x once per method.

Check (``check``): (a) and (b) give the same weights on (a)'s inputs, to ``TOLERANCE`` (1e-5). Both
draw the same fitting samples (same seed and input index) and the same noise-tunnel noise
(each map's from its own seed: an input's from (``SEED``, 0), its noisy copy s's from
(``derived_seed(SEED, 1)``, s), ``foundation.seeds``), on any device. Explainers tied
on every sample (``tied_groups``: GuidedBackprop and Saliency, DeepLift and InputxGrad on the ResNet-8,
whose ReLUs are functions Captum cannot hook) leave the minimiser free along their
difference (cvxpy's interior point splits the weight, Wolfe's method puts it on one):
their weights are summed before comparing, and the groups are listed in the JSON. Where
the maps of (a) and (b) differ by float32 rounding (on a GPU, other kernels for other batch
sizes) a nearly singular Γ can turn that into visible weight changes: weights that differ
by more than ``TOLERANCE`` pass if their objectives under (a)'s Γ agree to
``OBJECTIVE_TOLERANCE`` relative (``max_objective_gap``), as the GPU test of the solver
checks objectives rather than weights. That holds on any CPU and GPU: where other kernels
flip a few ReLU gates, a map changes at a few values by a few per cent of its largest
(``bench/_agreement.py``) and Γ with it, and the gap |ω_bᵀΓ_aω_b − ω_aᵀΓ_aω_a| is at most
2 max_ω |ωᵀ(Γ_b − Γ_a)ω| over the simplex (each ω minimises its own Γ), first order in Γ's
change, not amplified by a nearly singular Γ as the weights are: measured 1.2e-5 of the
objective on an H100, against 1e-4 allowed. Weights that are not the minimiser (permuted,
another vertex) are off by far more.

``gradient_floor_s_per_input``: the model's forward and backward passes alone on as many
rows as AGG_robust explains per input ((m + 1) times ``rows_per_image``), the floor of
any way that explains them, batched or not.

The last line is one JSON object: ``ratio`` = time (a) / time (b) per input for AGG_faith
and AGG_robust together on CIFAR-10, (t_faith + t_robust)_a / (t_faith + t_robust)_b with
each t per input, ``ratio_faith`` and ``ratio_robust`` each alone, ``ratio_224`` (and its
two parts) at 224 × 224, the batched seconds per input (``agg_faith_s_per_input``,
``agg_robust_s_per_input``, their ``_224`` counterparts), (a)'s, the floors, the check's
largest weight differences, ``device``, the settings, and Decker et al.'s Table 7 figures
(0.75 s / 7.54 s per ImageNet ResNet-18 input on an RTX A5000) for reference.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._gradient_floor import rows_per_image, seconds_per_row  # noqa: E402
from datamodules.images import ImageFolderDataModule  # noqa: E402
from evaluators.aggregators.optimised_aggregators import explainer_maps, optimised_aggregation  # noqa: E402
from evaluators.aggregators.simplex_qp import solve_simplex_qp  # noqa: E402
from evaluators.metrics.model_scores import explained_scores  # noqa: E402
from evaluators.metrics.perturbations import (  # noqa: E402
    BLUR_SIGMA, RADIUS, SHARE, gaussian_blur, subset_choices, superpixels, uniform_noise, unit_masks,
)  # fmt: skip
from foundation.devices import resolve_device  # noqa: E402
from foundation.files import json_text  # noqa: E402
from foundation.seeds import derived_seed  # noqa: E402
from lightning_modules.image_classifier import create_image_model  # noqa: E402
from lightning_modules.interface import default_classes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("RELIABLE_EXPLANATIONS_DATA", ROOT.parent / "shared" / "data"))
REFERENCE_RUN = Path(os.environ.get("RELIABLE_EXPLANATIONS_CIFAR10_RUN",
                                    ROOT / "runs" / "cifar10-jpeg" / "resnet8-seed0"))
EXPLAINERS = {
    "saliency": {}, "guided_backprop": {}, "deeplift": {}, "integrated_gradients": {"n_steps": 20},
    "input_x_gradient": {}, "smoothgrad": {"nt_samples": 10}, "vargrad": {"nt_samples": 10},
}  # fmt: skip
M_AGG, N_NAIVE, N_BATCHED = 50, 1, 16
M_ROBUST_224, STEPS_224, N_NAIVE_224, N_BATCHED_224, SIZE_224 = 10, 4, 1, 2, 224
MAX_BATCH, MAX_BATCH_224, FLOOR_PASSES, SEED, TOLERANCE, TIE, BN_OFFSET = 256, 32, 2, 0, 1e-5, 1e-8, 0.1
OBJECTIVE_TOLERANCE = 1e-4  # relative; float32 maps' rounding reaches Γ (measured on an H100: 1.2e-5)
METHODS = ("agg_faith", "agg_robust")
PAPER = {"agg_faith_s_per_input": 0.75, "agg_robust_s_per_input": 7.54,
         "setting": "ImageNet ResNet-18 at 224 x 224, RTX A5000 (Decker et al. 2024, Table 7)"}  # fmt: skip


def cifar_model_and_images(n: int) -> tuple[nn.Module, torch.Tensor, str]:
    """The reference ResNet-8 and ``n`` test images spread over the split, or a random
    ResNet-8 on random images (and what was used)."""
    if (REFERENCE_RUN / "checkpoints" / "last.ckpt").is_file():
        from evaluators.inputs.runs import load_run

        model, data, _ = load_run(REFERENCE_RUN)
        data.setup("test")
        return model.eval(), data.probe(n, "test")[0], f"reference run {REFERENCE_RUN.name}"
    source = "random ResNet-8 (random_model) on random images (reference run folder missing)"
    return random_model("resnet8", 10), torch.randn(n, 3, 32, 32), source


def random_model(name: str, num_classes: int) -> nn.Module:
    """``create_image_model(name)`` with random weights (seed 0) and random batch-norm offsets
    (bias and running mean ~ N(0, ``BN_OFFSET``²)). At initialisation (identity batch norms,
    bias-free convolutions) the network is positively homogeneous, f(αx) = α f(x) up to the
    final bias, so IG's path gradients all equal the input gradient and IG's maps equal
    InputxGrad's exactly (and DeepLift's, where it reduces to InputxGrad), a tie a trained
    network lacks; on the ResNet-8's Γ_robust, rank 4 of 7 then, cvxpy's Clarabel stopped
    at 'optimal_inaccurate'. The offsets change no layer's arithmetic, so no timing."""
    torch.manual_seed(0)
    model = create_image_model(name, num_classes=num_classes, in_channels=3).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.bias.normal_(0, BN_OFFSET)
                module.running_mean.normal_(0, BN_OFFSET)
    return model


def folder_images(n: int, size: int) -> tuple[torch.Tensor, str]:
    """The first ``n`` images of the ImageNet-style folder at size × size (random ones without it)."""
    path = DATA_DIR / "images" / "imagenet-samples-val.tar.gz"
    if not path.exists():
        return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(0)), "random images (no folder)"
    data = ImageFolderDataModule(root=str(path), image_size=size, eval_batch_size=n)
    data.setup("test")
    return next(iter(data.test_dataloader()))[0][:n], str(path)


def naive_robust_gamma(model, x, target, explainers: dict, maps: torch.Tensor, m: int,
                       max_batch: int) -> np.ndarray:  # fmt: skip
    """(k, k) Γ_robust of one input x (1, C, H, W) with maps (1, k, H, W): every noisy copy
    explained alone by every explainer (explainer by explainer), (E − E_s)ᵀ(E − E_s) summed
    sample by sample."""
    noisy = uniform_noise(x, m, RADIUS, SEED, "fitting")[0]
    clean = maps[0].flatten(1).double().cpu().numpy()  # (k, d)
    copy_seed = derived_seed(SEED, 1)  # as optimised_aggregators.robust_gamma's noisy copies
    perturbed = np.stack([  # (m, k, d)
        np.stack([explainer_maps(model, noisy[s:s + 1], target, {name: options}, max_batch=max_batch,
                                 seed=copy_seed, index=torch.tensor([s]))
                  [0, 0].flatten().double().cpu().numpy() for s in range(m)])
        for name, options in explainers.items()
    ], 1)  # fmt: skip
    gamma = np.zeros((len(clean), len(clean)))
    for sample in perturbed:
        difference = clean - sample
        gamma += difference @ difference.T
    return gamma / m


def naive_faith_gamma(model, x, target, maps: torch.Tensor, m: int) -> np.ndarray:
    """(k, k) Γ_faith of one input x (1, C, H, W): m forward passes one at a time, Iᵀφ
    per sample and explainer, Yeh's β per explainer, G = β a − Δ, Γ = GᵀG / m."""
    groups = superpixels(x)
    chosen = subset_choices(groups, m, SHARE, SEED, "fitting")
    blurred = gaussian_blur(x, BLUR_SIGMA)
    flat_maps = maps[0].flatten(1).double().cpu().numpy()
    sums, deltas = [], []
    with torch.no_grad():
        clean = explained_scores(model, x, target).item()
        for s in range(m):
            removed = unit_masks(groups, chosen[:, s])
            deltas.append(clean - explained_scores(model, torch.where(removed[:, None], blurred, x), target).item())
            sums.append(flat_maps @ removed.flatten().double().cpu().numpy())
    sums, deltas = np.array(sums), np.array(deltas)  # (m, k), (m,)
    energy = (sums**2).sum(0)
    beta = np.divide(sums.T @ deltas, energy, out=np.zeros_like(energy), where=energy > 0)
    columns = beta * sums - deltas[:, None]
    return columns.T @ columns / m


def naive_weights(model, x: torch.Tensor, explainers: dict, method: str, m: int,
                  max_batch: int) -> tuple[torch.Tensor, torch.Tensor, float]:  # fmt: skip
    """(N, k) weights of ``method`` for the inputs x one at a time as the reference code, their
    Γ (N, k, k) and the seconds it took."""
    weights, gammas, start = [], [], time.perf_counter()
    for i in range(len(x)):
        xi = x[i:i + 1]
        target = default_classes(model, xi)
        maps = explainer_maps(model, xi, target, explainers, max_batch=max_batch, seed=SEED)
        gamma = (naive_faith_gamma(model, xi, target, maps, m) if method == "agg_faith"
                 else naive_robust_gamma(model, xi, target, explainers, maps, m, max_batch))  # fmt: skip
        gammas.append(torch.from_numpy(gamma))
        weights.append(solve_simplex_qp(gammas[-1][None], method="cvxpy")[0])
    return torch.stack(weights), torch.stack(gammas), time.perf_counter() - start


def batched_weights(model, x: torch.Tensor, explainers: dict, method: str, m: int,
                    max_batch: int) -> tuple[torch.Tensor, float]:  # fmt: skip
    """(N, k) weights of ``method`` from ``optimised_aggregation`` on all of x, and the seconds."""
    start = time.perf_counter()
    weights = optimised_aggregation(model, x, method, explainers, n_samples=m, seed=SEED, max_batch=max_batch)[1]
    if x.device.type == "cuda":
        torch.cuda.synchronize()
    return weights.cpu(), time.perf_counter() - start


def tied_groups(gamma: torch.Tensor) -> list[list[int]]:
    """Groups of explainers i, j with (e_i − e_j)ᵀΓ(e_i − e_j) ≈ 0 (below ``TIE`` times Γ's largest
    diagonal entry: their maps and their changes differ only by float32 rounding): the
    objective does not change when weight moves between them, so the split is arbitrary."""
    diag = gamma.diagonal()
    tie = (diag[:, None] + diag[None] - 2 * gamma) <= TIE * diag.max().clamp(min=1e-300)
    groups, seen = [], set()
    for i in range(len(gamma)):
        if i not in seen:
            groups.append([j for j in range(len(gamma)) if tie[i, j] and j not in seen])
            seen.update(groups[-1])
    return groups


def objective_gap(naive: torch.Tensor, batched: torch.Tensor, gammas: torch.Tensor) -> float:
    """The largest |ω_aᵀΓω_a − ω_bᵀΓω_b| / ω_aᵀΓω_a over the inputs, Γ (a)'s (float64)."""
    gammas = gammas.double()

    def objective(w: torch.Tensor) -> torch.Tensor:
        w = w.double()
        return torch.einsum("bi,bij,bj->b", w, gammas, w)

    reference = objective(naive)
    return ((objective(batched) - reference).abs() / reference.abs().clamp(min=1e-300)).max().item()


def weight_difference(naive: torch.Tensor, batched: torch.Tensor, gammas: torch.Tensor,
                      names: list[str]) -> tuple[float, list[list[str]]]:  # fmt: skip
    """The largest |ω_a − ω_b| over the inputs, the weights of tied explainers (``tied_groups``
    of (a)'s Γ ``gammas``) summed; and the tied groups met."""
    worst, tied = 0.0, []
    for w_naive, w_batched, gamma in zip(naive, batched, gammas):
        for group in tied_groups(gamma):
            worst = max(worst, (w_naive[group].sum() - w_batched[group].sum()).abs().item())
            if len(group) > 1 and [names[j] for j in group] not in tied:
                tied.append([names[j] for j in group])
    return worst, tied


def check(naive: torch.Tensor, batched: torch.Tensor, gammas: torch.Tensor, names: list[str],
          label: str) -> tuple[float, float, list[list[str]]]:  # fmt: skip
    """The module docstring's check of (b)'s weights against (a)'s (N, k) with (a)'s Γ (N, k, k):
    AssertionError where it fails, else ``weight_difference`` and ``objective_gap``."""
    if naive.shape != batched.shape:
        raise AssertionError(f"{label}: (a)'s weights have shape {tuple(naive.shape)}, (b)'s {tuple(batched.shape)}")
    difference, tied = weight_difference(naive, batched, gammas, names)
    gap = objective_gap(naive, batched, gammas)
    if not (difference <= TOLERANCE or gap <= OBJECTIVE_TOLERANCE):
        raise AssertionError(f"{label}: (a) and (b) weights differ by {difference:.2e} (> {TOLERANCE}), "
                             f"objectives by {gap:.2e} of (a)'s (> {OBJECTIVE_TOLERANCE})")  # fmt: skip
    return difference, gap, tied


def measure(model, x: torch.Tensor, n_naive: int, explainers: dict, samples: dict[str, int], max_batch: int,
            label: str) -> dict:  # fmt: skip
    """Per method: (b) timed on each of the first ``n_naive`` inputs alone (the same input
    index as (a) there), then on the rest in one call; (a) on the first ``n_naive``; the check."""
    explainer_maps(model, x[:1], default_classes(model, x[:1]), explainers, max_batch=max_batch)  # warm-up
    alone = [x[i:i + 1] for i in range(n_naive)]
    result = {}
    for method in METHODS:
        m = samples[method]
        parts = [batched_weights(model, part, explainers, method, m, max_batch)
                 for part in alone + ([x[n_naive:]] if len(x) > n_naive else [])]  # fmt: skip
        t_batched = sum(seconds for _, seconds in parts)
        w_batched = torch.cat([weights for weights, _ in parts])
        w_naive, gammas, t_naive = naive_weights(model, x[:n_naive], explainers, method, m, max_batch)
        w_check = w_batched[:n_naive]
        difference, gap, tied = check(w_naive, w_check, gammas, list(explainers), f"{label} {method}")
        per_input = {"naive_s_per_input": t_naive / n_naive, "batched_s_per_input": t_batched / len(x)}
        print(f"{label:8s} {method:10s} (a) {per_input['naive_s_per_input']:8.3f} s/input  "
              f"(b) {per_input['batched_s_per_input']:8.3f} s/input  "
              f"x{per_input['naive_s_per_input'] / per_input['batched_s_per_input']:5.1f}  "
              f"max |w_a - w_b| {difference:.1e}", flush=True)  # fmt: skip
        result[method] = {**{k: round(v, 4) for k, v in per_input.items()}, "max_weight_difference": difference,
                          "max_objective_gap": gap,
                          "tied_explainers": tied,
                          "mean_weights": dict(zip(explainers, w_batched.mean(0).round(decimals=4).tolist()))}
    rows = (samples["agg_robust"] + 1) * rows_per_image(explainers)
    floor = rows * seconds_per_row(model, x, max_batch, FLOOR_PASSES)
    print(f"{label:8s} agg_robust's {rows} gradient rows per input, the model alone: {floor:.3f} s/input", flush=True)
    result["agg_robust"].update({"gradient_rows_per_input": rows, "gradient_floor_s_per_input": round(floor, 4)})
    return result


def ratios(result: dict, suffix: str = "") -> dict:
    def ratio(methods) -> float:
        return (sum(result[m]["naive_s_per_input"] for m in methods)
                / sum(result[m]["batched_s_per_input"] for m in methods))  # fmt: skip

    return {f"ratio{suffix}": round(ratio(METHODS), 2), f"ratio_faith{suffix}": round(ratio(["agg_faith"]), 2),
            f"ratio_robust{suffix}": round(ratio(["agg_robust"]), 2),
            f"agg_faith_s_per_input{suffix}": result["agg_faith"]["batched_s_per_input"],
            f"agg_robust_s_per_input{suffix}": result["agg_robust"]["batched_s_per_input"]}  # fmt: skip


def reduced_explainers(steps: int) -> dict:
    """``EXPLAINERS`` at 224 × 224: ``steps`` IG steps and noise samples, no DeepLift."""
    return {name: ({"n_steps": steps} if name == "integrated_gradients" else
                   {"nt_samples": steps} if name in ("smoothgrad", "vargrad") else options)
            for name, options in EXPLAINERS.items() if name != "deeplift"}  # fmt: skip


def main() -> dict:
    warnings.filterwarnings("ignore", module="captum")  # Captum's notes on hooks and gradients, once per call
    device = resolve_device("auto")
    if device.type == "cuda":  # float32 everywhere, so that (a)'s and (b)'s Γ can be compared
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    small, x32, source32 = cifar_model_and_images(N_BATCHED)
    cifar = measure(small.to(device), x32.to(device), N_NAIVE, EXPLAINERS, dict.fromkeys(METHODS, M_AGG),
                    MAX_BATCH, "cifar10")  # fmt: skip
    big = random_model("resnet18", 1000).to(device)
    x224, source224 = folder_images(N_BATCHED_224, SIZE_224)
    explainers_224 = reduced_explainers(STEPS_224)
    at224 = measure(big, x224.to(device), N_NAIVE_224, explainers_224,
                    {"agg_faith": M_AGG, "agg_robust": M_ROBUST_224}, MAX_BATCH_224, "224")  # fmt: skip
    result = {**ratios(cifar), **ratios(at224, "_224"),
              "naive_agg_faith_s_per_input": cifar["agg_faith"]["naive_s_per_input"],
              "naive_agg_robust_s_per_input": cifar["agg_robust"]["naive_s_per_input"],
              "naive_agg_faith_s_per_input_224": at224["agg_faith"]["naive_s_per_input"],
              "naive_agg_robust_s_per_input_224": at224["agg_robust"]["naive_s_per_input"],
              "gradient_floor_agg_robust_s_per_input": cifar["agg_robust"]["gradient_floor_s_per_input"],
              "gradient_floor_agg_robust_s_per_input_224": at224["agg_robust"]["gradient_floor_s_per_input"],
              "device": str(device), "threads": torch.get_num_threads(), "paper": PAPER,
              "cifar10": {"model_and_images": source32, "n_naive": N_NAIVE, "n_batched": len(x32), "m_agg": M_AGG,
                          "explainers": EXPLAINERS, "max_batch": MAX_BATCH, **cifar},
              "224": {"model": f"resnet18, random, batch-norm offsets ~ N(0, {BN_OFFSET}²)",
                      "images": source224, "size": SIZE_224, "n_naive": N_NAIVE_224, "n_batched": len(x224),
                      "m_agg": {"agg_faith": M_AGG, "agg_robust": M_ROBUST_224}, "explainers": explainers_224,
                      "max_batch": MAX_BATCH_224, "reduced": f"AGG_robust's m_agg {M_ROBUST_224} (not {M_AGG}), IG "
                      f"steps and noise samples {STEPS_224} (not 20 and 10), no DeepLift", **at224}}  # fmt: skip
    print(json_text(result))
    return result


if __name__ == "__main__":
    main()
