"""Explaining image models: one image per Captum call vs ``evaluators.maps.explain`` batched.

    python bench/image_explainers.py [--checkpoint <run>/checkpoints/last.ckpt] [--device auto]

The seven gradient explainers of Decker et al.'s Table 1 (Saliency, GuidedBP, DeepLift,
IntGrad, InputxGrad, SmoothGrad, VarGrad) and GradCAM, each explaining the predicted
class of:

(CIFAR-10) ``N_CIFAR`` test images of CIFAR-10 with a ResNet-8: the reference model's
           weights when ``--checkpoint`` names its run's checkpoint, else a random
           initialisation (same arithmetic, same speed);
(224)      ``N_224`` images of the ImageNet-style validation folder at 224x224 with a
           randomly initialised ResNet-18, with ``STEPS_224`` IG steps and noise
           samples (``STEPS`` at 32x32) to keep the bench to minutes on a CPU.

(i) one image per Captum call, as the public reference code of the aggregation papers
    explains (a loop over images, each ``attribute`` on a batch of one);
(ii) ``evaluators.maps.explain`` on the whole batch (``max_batch``
    rows per forward pass: on a CPU its default, ``resolve_max_batch``: 256 rows at 32x32,
    5 at 224x224);
(floor) the model's forward and backward passes alone on as many rows as each method's
    maps take (``bench/_gradient_floor.py``: one per image, two for DeepLift, the steps or
    noise samples for IG and the noise tunnels), in passes of (ii)'s size: no way that
    computes those rows is faster, so ``ratio_bound`` = time (i) / floor caps any batched
    way's ``ratio`` on this device (GradCAM's backward pass stops at the last block, so
    its one row per image overstates its floor: 1 of 156 rows per image at 32x32, of 30 at
    224x224).
Both run on ``--device`` (default ``auto``: the GPU where one exists; TF32 off there, so
both paths compute in float32).

Check (``check``, on every device), for the deterministic methods (SmoothGrad and VarGrad
draw their noise per call, so (i) and (ii) draw other samples of the same estimator): (i)
and (ii) must compute the same maps, and a last-bit difference between the kernels for one
image and for ``max_batch`` rows flips a few ReLU gates of the network, each moving a
gradient by up to a few per cent of the largest |map| value (``bench/_agreement.py``). So
(a) both ways run again in float64, untimed, on the first ``N_CHECK`` (``N_CHECK_224``)
images, (ii) in passes of ``CHECK_MAX_BATCH`` = 3 rows (images and IG steps straddle
passes), and must agree to 1e-10 of each image's largest |map| value (measured: 4e-16);
(b) the timed float32 maps of all images may differ beyond rtol 1e-3 (atol 1e-3 of the
image's largest |value|) at no more than 1 % of the values (measured up to 0.26 % with
(i) on inputs 1 ulp away, ``bench/_gate_flips.py``; see bench/README.md). Both figures are
in the JSON per method (``share_outside``, ``float64_max_diff_relative``). Without the data
folder (``RELIABLE_EXPLANATIONS_DATA``, default ../shared/data), random images stand in.
The last line is one JSON object: ``ratio`` = time (i) / time (ii) summed over the
methods on CIFAR-10, ``ratio_224`` the same at 224x224, ``ratio_bound`` and
``ratio_bound_224`` (time (i) / floor), and the times per method.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

import torch
from captum import attr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._agreement import check_float32, check_float64  # noqa: E402
from bench._gradient_floor import rows_per_image, seconds_per_row  # noqa: E402
from datamodules.images import ImageFolderDataModule  # noqa: E402
from evaluators.maps import explain  # noqa: E402
from evaluators.maps.gradients import last_conv_block  # noqa: E402
from foundation.batching import resolve_max_batch  # noqa: E402
from foundation.devices import resolve_device  # noqa: E402
from foundation.files import json_text  # noqa: E402
from lightning_modules.image_classifier import ImageClassifier, create_image_model  # noqa: E402
from lightning_modules.interface import default_classes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("RELIABLE_EXPLANATIONS_DATA", ROOT.parent / "shared" / "data"))
METHODS = ["saliency", "guided_backprop", "deeplift", "integrated_gradients", "input_x_gradient", "smoothgrad",
           "vargrad", "gradcam"]  # fmt: skip
DETERMINISTIC = {"saliency", "guided_backprop", "deeplift", "integrated_gradients", "input_x_gradient", "gradcam"}
N_CIFAR, N_224, STEPS, STEPS_224 = 64, 16, 50, 8
N_CHECK, N_CHECK_224, CHECK_MAX_BATCH = 4, 2, 3  # images and rows per pass of the float64 check
# rows per forward pass of (ii): explain's default (None) on a CPU; on a GPU, where 256
# rows of a ResNet-8 leave it idle between launches, every image's steps in one pass at 32x32
# (the H100 figures of 2026-11-26 used 256 for both; these are not yet measured)
MAX_BATCH = {"cpu": {"cifar10": None, "224": None}, "cuda": {"cifar10": 4096, "224": 256}}


def images(archive: str, n: int, image_size: int | None, shape: tuple[int, int, int]) -> tuple[torch.Tensor, str]:
    path = DATA_DIR / "images" / archive
    if not path.exists():
        return torch.randn(n, *shape, generator=torch.Generator().manual_seed(0)), "random images (no data folder)"
    data = ImageFolderDataModule(root=str(path), image_size=image_size, eval_batch_size=n)
    data.setup("test")
    x, _ = next(iter(data.test_dataloader()))
    return x[:n], str(path)


def one_per_call(model, x: torch.Tensor, target: torch.Tensor, method: str, steps: int) -> torch.Tensor:
    """The reference codes' loop: a Captum explainer called on one image at a time."""
    classes = {"saliency": attr.Saliency, "guided_backprop": attr.GuidedBackprop, "deeplift": attr.DeepLift,
               "integrated_gradients": attr.IntegratedGradients, "input_x_gradient": attr.InputXGradient}  # fmt: skip
    maps = []
    for xi, ti in zip(x.split(1), target.split(1)):
        if method == "gradcam":
            gradcam = attr.LayerGradCam(model, last_conv_block(model))
            layer_map = gradcam.attribute(xi, target=ti, relu_attributions=True)
            maps.append(attr.LayerAttribution.interpolate(layer_map, xi.shape[-2:], "bilinear").expand_as(xi))
        elif method in ("smoothgrad", "vargrad"):
            maps.append(attr.NoiseTunnel(attr.Saliency(model)).attribute(
                xi, target=ti, nt_type=method, nt_samples=steps, stdevs=0.15, abs=False))  # fmt: skip
        elif method == "saliency":
            maps.append(classes[method](model).attribute(xi, target=ti, abs=False))
        elif method == "integrated_gradients":
            maps.append(classes[method](model).attribute(xi, target=ti, n_steps=steps))
        else:
            maps.append(classes[method](model).attribute(xi, target=ti))
    return torch.cat(maps)


def method_options(method: str, steps: int) -> dict:
    return {"integrated_gradients": {"n_steps": steps}, "smoothgrad": {"nt_samples": steps},
            "vargrad": {"nt_samples": steps}}.get(method, {})  # fmt: skip


def batched(model, x: torch.Tensor, target: torch.Tensor, method: str, steps: int, max_batch: int) -> torch.Tensor:
    return explain(model, x, method, target=target, max_batch=max_batch, **method_options(method, steps))


def timed(run, device: torch.device) -> tuple[torch.Tensor, float]:
    torch.manual_seed(0)
    start = time.perf_counter()
    out = run().detach()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - start


def check(model, x: torch.Tensor, target: torch.Tensor, method: str, steps: int, naive: torch.Tensor,
          ours: torch.Tensor, n_check: int, label: str) -> dict:  # fmt: skip
    """The module docstring's check of ``method``'s timed maps ``naive`` (i) and ``ours`` (ii) of
    images x: (b) on them, (a) both ways again in float64 on x[:n_check] (AssertionError if
    either fails); their figures."""
    stats = check_float32(naive, ours, f"{label} {method}")
    model64 = copy.deepcopy(model).double()
    x64, t64 = x[:n_check].double(), target[:n_check]
    naive64 = one_per_call(model64, x64, t64, method, steps)
    ours64 = batched(model64, x64, t64, method, steps, CHECK_MAX_BATCH)
    return {**stats, **check_float64(naive64, ours64, f"{label} {method}")}


def compare(model, x: torch.Tensor, steps: int, label: str, methods: list[str], max_batch: int, n_check: int) -> dict:
    model.eval()
    target = default_classes(model, x)
    per_row = seconds_per_row(model, x, max_batch)
    times = {}
    for method in methods:
        naive, t_naive = timed(lambda: one_per_call(model, x, target, method, steps), x.device)
        ours, t_ours = timed(lambda: batched(model, x, target, method, steps, max_batch), x.device)
        checked = check(model, x, target, method, steps, naive, ours, n_check, label) if method in DETERMINISTIC else {}
        floor = len(x) * rows_per_image({method: method_options(method, steps)}) * per_row
        times[method] = {"one_per_call_s": round(t_naive, 3), "batched_s": round(t_ours, 3), "floor_s": round(floor, 3),
                         **checked, "maps_per_s_one_per_call": round(len(x) / t_naive, 1),
                         "maps_per_s_batched": round(len(x) / t_ours, 1)}  # fmt: skip
        print(f"{label:8s} {method:22s} (i) {t_naive:7.2f} s  (ii) {t_ours:7.2f} s  x{t_naive / t_ours:5.1f}  "
              f"floor {floor:7.2f} s", flush=True)  # fmt: skip
    return times


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", help="a ResNet-8 ImageClassifier checkpoint (reference model (a))")
    parser.add_argument("--device", default="auto", help="auto (the GPU where one exists), cpu, cuda, cuda:<i>")
    parser.add_argument("--max_batch", type=int, help="rows per forward pass of (ii) (default: MAX_BATCH)")
    args = parser.parse_args(argv if argv is not None else [])
    device = resolve_device(args.device)
    max_batch = {k: args.max_batch or v for k, v in MAX_BATCH["cpu" if device.type == "cpu" else "cuda"].items()}
    if device.type == "cuda":  # float32 on both paths, so that (i) and (ii) can be compared
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    if args.checkpoint:
        small = ImageClassifier.load_from_checkpoint(args.checkpoint, weights_only=True).net
        weights = args.checkpoint
    else:
        small, weights = create_image_model("resnet8", num_classes=10, in_channels=3), "random initialisation"
    x32, source32 = images("cifar10-jpeg.tar.gz", N_CIFAR, None, (3, 32, 32))
    x32 = x32.to(device)
    max_batch["cifar10"] = resolve_max_batch(max_batch["cifar10"], x32)
    cifar = compare(small.to(device), x32, STEPS, "cifar10", METHODS, max_batch["cifar10"], N_CHECK)
    big = create_image_model("resnet18", num_classes=1000, in_channels=3)
    x224, source224 = images("imagenet-samples-val.tar.gz", N_224, 224, (3, 224, 224))
    x224 = x224.to(device)
    max_batch["224"] = resolve_max_batch(max_batch["224"], x224)
    at224 = compare(big.to(device), x224, STEPS_224, "224", METHODS, max_batch["224"], N_CHECK_224)

    def ratio(times: dict, key: str = "batched_s") -> float:
        return sum(t["one_per_call_s"] for t in times.values()) / sum(t[key] for t in times.values())

    result = {"ratio": round(ratio(cifar), 2), "ratio_224": round(ratio(at224), 2),
              "ratio_bound": round(ratio(cifar, "floor_s"), 2), "ratio_bound_224": round(ratio(at224, "floor_s"), 2),
              "resnet8_weights": weights,
              "cifar_images": source32, "images_224": source224, "n_cifar": len(x32), "n_224": len(x224),
              "steps": STEPS, "steps_224": STEPS_224, "max_batch": max_batch, "device": str(device),
              "threads": torch.get_num_threads(), "times_cifar": cifar, "times_224": at224}  # fmt: skip
    print(json_text(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
