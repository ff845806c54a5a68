"""Cascading model parameter randomisation: Quantus 0.6 ``MPRT`` against ``model_randomisation``.

    python bench/sanity_checks.py [--device auto]   (Quantus: pip install quantus==0.6.0, see setup.cfg)

Adebayo et al.'s cascading test (docs/sanity_checks.md#definitions) for ``N_IMAGES`` CIFAR-10
test images (the archive ``cifar10-jpeg.tar.gz`` through ``ImageFolderDataModule``'s decoded
cache; random images where the data folder is missing, said so in the JSON), their labels
explained, with a randomly initialised ResNet-8 (``create_image_model``): the time and the
scores' equality need no training (a trained model runs the same arithmetic; its scores
differ, not their agreement). Three explainers: Saliency, Integrated Gradients (10 steps, zero
baseline) and Input × Gradient, maps summed over channels; Spearman's rank correlation of
absolute maps, per layer (15 layers, top down) and image.
The random ResNet-8's BatchNorm layers are at their initial
state (no shift) and its convolutions have no bias, so its logits are positively homogeneous
in the input and Integrated Gradients from a zero baseline equals Input × Gradient: their
printed scores agree; the timing and the check do not depend on that.

(i)  Quantus 0.6 ``MPRT(layer_order="top_down", seed=SEED, normalise=False)``, otherwise its
     defaults (Spearman of absolute maps), ``batch_size`` = all images, and as
     ``explain_func`` Captum's ``Saliency(abs=False)``, ``IntegratedGradients(n_steps=10)``
     and ``InputXGradient`` summed over channels, as ``quantus.explain`` calls them but for
     IG's rule: ``quantus.explain`` fixes ``method="riemann_trapezoid"``, which the project's
     ``explain`` cannot pass (its own ``method`` argument names the explainer), so both use
     Captum's default (Gauss-Legendre);
(ii) ``evaluators.sanity.model_randomisation(..., "cascading", ["spearman_abs"],
     seed=SEED + 1, same_seed=True)``: Quantus draws every layer from ``torch.manual_seed(seed
     + 1)``, so these are the same re-initialised layers; all images and IG steps in one pass
     (``max_batch`` = ``N_IMAGES`` × 10 rows), as Captum takes them in (i);
(floor) the model's forward pass and the input gradient of one logit alone, in the passes
     (ii) makes: for the original model and each of the 15 randomised ones, one pass of
     ``N_IMAGES`` rows (Saliency), one of ``N_IMAGES`` × 10 (IG), one of ``N_IMAGES``
     (Input × Gradient), timed whole (``floor_passes``). No way that computes those maps is
     faster; Quantus also explains the original model twice (its ``a_batch`` and its
     "original" scores).

Quantus's default ``normalise=True`` divides each batch of maps by its largest |value| in
float32, which can round two neighbouring values of a map to one, a tie its ranks then average:
with it, one such tie in one image moved a score by 4.6e-6 here (a Spearman correlation over
d pixels moves by up to about 0.5 d / (d (d² − 1) / 12) per merged pair), so a few could pass
1e-5. The division by a positive number otherwise leaves ranks as they are, so the bench turns
it off and compares the definition, not float32 rounding.

Check (``check``): every score of (ii) equals Quantus's within ``TOLERANCE`` = 1e-5. That holds
on any CPU and GPU: both ways make the same Captum calls on the same batches in one process,
so their maps agree to the last bit (measured: scores equal to 1e-16); the 1e-5 is room for a
kernel that rounds one batch otherwise, where two values within rounding of each other swap
ranks, each swap moving a Spearman correlation over d = 1,024 pixels by at most about 1e-6
(12 (d − 1) / (d (d² − 1))). A score of another layer, image or explainer differs by far more
(the scores move by 0.01-0.4 between layers here).

The last line is one JSON object: ``ratio`` = time (i) / time (ii); ``max_abs_diff``;
``floor_s``; ``ours_over_floor`` = time (ii) / floor (target 1.2) and ``ratio_bound`` = time
(i) / floor (what no way can beat, as ``image_explainers.py`` names it); the same ratios of the
process's CPU seconds (``ratio_cpu``, ``ours_over_floor_cpu``, ``cpu_s``), which on a CPU shared
with other jobs move less than wall-clock times (with one thread, as ``make bench`` runs).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from captum import attr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from datamodules.images import ImageFolderDataModule  # noqa: E402
from evaluators.sanity import model_randomisation, randomisable_layers  # noqa: E402
from foundation.devices import resolve_device  # noqa: E402
from foundation.files import json_text  # noqa: E402
from lightning_modules.image_classifier import create_image_model  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("RELIABLE_EXPLANATIONS_DATA", ROOT.parent / "shared" / "data"))
N_IMAGES, SEED, IG_STEPS = 64, 0, 10
# registry name -> (Quantus's explain_func: Captum's attribute(model, inputs, targets), our options)
EXPLAINERS = {"saliency": (lambda m, x, t: attr.Saliency(m).attribute(x, target=t, abs=False), {}),
              "integrated_gradients": (lambda m, x, t: attr.IntegratedGradients(m).attribute(
                  x, target=t, baselines=torch.zeros_like(x), n_steps=IG_STEPS), {"n_steps": IG_STEPS}),
              "input_x_gradient": (lambda m, x, t: attr.InputXGradient(m).attribute(x, target=t), {})}  # fmt: skip
TOLERANCE = 1e-5


def images(n: int) -> tuple[torch.Tensor, torch.Tensor, str]:
    """The first ``n`` CIFAR-10 test images and labels, or random ones (and what was used)."""
    path = DATA_DIR / "images" / "cifar10-jpeg.tar.gz"
    if not path.exists():
        generator = torch.Generator().manual_seed(0)
        return torch.randn(n, 3, 32, 32, generator=generator), torch.randint(0, 10, (n,), generator=generator), \
            "random images (no data folder)"  # fmt: skip
    data = ImageFolderDataModule(root=str(path), eval_batch_size=n)
    data.setup("test")
    x, y = next(iter(data.test_dataloader()))
    return x[:n], y[:n], str(path)


def quantus_mprt(model, x: torch.Tensor, y: torch.Tensor, attribute) -> dict[str, list[float]]:
    import quantus

    def explain_func(model, inputs, targets, **kwargs):
        inputs = torch.as_tensor(inputs, device=x.device)
        targets = torch.as_tensor(targets, device=x.device)
        return attribute(model, inputs, targets).sum(1, keepdim=True).detach().cpu().numpy()

    metric = quantus.MPRT(layer_order="top_down", seed=SEED, normalise=False, disable_warnings=True)
    return metric(model=model, x_batch=x.cpu().numpy(), y_batch=y.cpu().numpy(), a_batch=None,
                  explain_func=explain_func, device=str(x.device), batch_size=len(x))  # fmt: skip


def ours(model, x: torch.Tensor, y: torch.Tensor, max_batch: int):
    options = {name: {**opts, "max_batch": max_batch} for name, (_, opts) in EXPLAINERS.items()}
    return model_randomisation(model, x, y, options, "cascading", ["spearman_abs"], seed=SEED + 1, same_seed=True)


def check(scores: torch.Tensor, layers: list[str], quantus: dict[str, dict[str, list[float]]]) -> float:
    """The module docstring's check: the largest |ours − Quantus| over layers, explainers and
    images (``scores`` (L, E, 1, N) in ``EXPLAINERS`` order); AssertionError above ``TOLERANCE``,
    on other layers or on a score missing."""
    difference = 0.0
    for e, name in enumerate(EXPLAINERS):
        theirs = quantus[name]
        if set(theirs) - {"original"} != set(layers):
            raise AssertionError(f"{name}: Quantus randomised {sorted(set(theirs) - {'original'})}, ours {layers}")
        for step, layer in enumerate(layers):
            gap = np.abs(scores[step, e, 0].cpu().numpy() - np.asarray(theirs[layer], dtype=np.float64))
            if gap.shape != (scores.shape[-1],) or not gap.max() <= TOLERANCE:
                raise AssertionError(f"{name} after randomising {layer}: ours and Quantus's scores differ by "
                                     f"{gap.max():.2e} (> {TOLERANCE})")  # fmt: skip
            difference = max(difference, float(gap.max()))
    return difference


def floor_passes(model, x: torch.Tensor, states: int) -> None:
    """The model's forward pass and input gradient of one logit in the passes (ii) makes."""
    for _ in range(states):
        for rows in (x, x.repeat(IG_STEPS, 1, 1, 1), x):
            rows = rows.clone().requires_grad_(True)
            torch.autograd.grad(model(rows)[:, 0].sum(), rows)


def timed(run, device: torch.device) -> tuple[object, float, float]:
    """``run()``, its wall-clock seconds and this process's CPU seconds."""
    start, start_cpu = time.perf_counter(), time.process_time()
    out = run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - start, time.process_time() - start_cpu


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto (the GPU where one exists), cpu, cuda, cuda:<i>")
    args = parser.parse_args(argv if argv is not None else [])
    device = resolve_device(args.device)
    if device.type == "cuda":  # float32 on both ways, so that their scores can be compared
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        import quantus  # noqa: F401
    except ImportError:
        result = {"ratio": None, "error": "quantus is not installed (pip install quantus==0.6.0)"}
        print(json_text(result))
        return result
    torch.manual_seed(0)
    model = create_image_model("resnet8", num_classes=10, in_channels=3).to(device).eval()
    x, y, source = images(N_IMAGES)
    x, y = x.to(device), y.to(device)
    max_batch = len(x) * IG_STEPS
    layers = randomisable_layers(model)
    floor_passes(model, x, 1)  # warm-up, untimed
    _, floor, floor_cpu = timed(lambda: floor_passes(model, x, len(layers) + 1), device)
    theirs, t_quantus, cpu_quantus = {}, 0.0, 0.0
    for name, (attribute, _) in EXPLAINERS.items():
        theirs[name], t, cpu = timed(lambda: quantus_mprt(model, x, y, attribute), device)
        t_quantus, cpu_quantus = t_quantus + t, cpu_quantus + cpu
    mine, t_ours, cpu_ours = timed(lambda: ours(model, x, y, max_batch), device)
    difference = check(mine.scores, mine.layers, theirs)
    means = mine.mean()[0][:, :, 0]
    print(f"(i) Quantus {t_quantus:.2f} s  (ii) ours {t_ours:.2f} s  floor {floor:.2f} s  max |diff| {difference:.1e}"
          f"  (CPU seconds: {cpu_quantus:.2f}, {cpu_ours:.2f}, {floor_cpu:.2f})")  # fmt: skip
    for e, name in enumerate(EXPLAINERS):
        print(f"{name:22s} mean Spearman (abs) top layer {means[0, e]:.3f}, all layers {means[-1, e]:.3f}")
    result = {"ratio": round(t_quantus / t_ours, 2), "max_abs_diff": difference, "floor_s": round(floor, 3),
              "ours_over_floor": round(t_ours / floor, 2), "ratio_bound": round(t_quantus / floor, 2),
              "quantus_s": round(t_quantus, 3), "ours_s": round(t_ours, 3),
              "cpu_s": {"quantus": round(cpu_quantus, 3), "ours": round(cpu_ours, 3), "floor": round(floor_cpu, 3)},
              "ratio_cpu": round(cpu_quantus / cpu_ours, 2), "ours_over_floor_cpu": round(cpu_ours / floor_cpu, 2),
              "n_images": len(x),
              "layers": len(layers), "explainers": list(EXPLAINERS), "ig_steps": IG_STEPS, "max_batch": max_batch,
              "images": source, "model": "random ResNet-8 (create_image_model, torch.manual_seed(0))",
              "device": str(device), "threads": torch.get_num_threads()}  # fmt: skip
    print(json_text(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
