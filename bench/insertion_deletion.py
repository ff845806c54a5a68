"""Insertion and deletion curves: a forward pass per step per image, Quantus, and the batched core.

    python bench/insertion_deletion.py [--device auto]   (Quantus: pip install quantus==0.6.0, see setup.cfg)

``N_IMAGES`` CIFAR-10 test images, the CIFAR-10 reference ResNet-8 (``REFERENCE_RUN``, ``make cifar10-resnet8``; a
randomly initialised ResNet-8 on random images where that run folder is missing, said
so in the JSON), maps: Saliency of the predicted class from ``evaluators.maps.explain``, reduced
per pixel with ``reduce_map(maps, "abs_sum")``. Mahlau et al.'s random-normal baseline
(each image's own channel means and standard deviations, the default), ``STEPS`` = 32
increments of 32 pixels: a step that divides the 1,024 pixels, as Quantus requires.

(i)   loop: for each image, one forward pass per step, the image perturbed in place step
      by step (RISE's reference evaluation of one image), for insertion and deletion;
(ii)  Quantus 0.6.0 ``PixelFlipping``, the deletion curve;
(iii) ``evaluators.metrics.insertion_deletion.insertion_deletion_curves`` (``max_batch``
      rows per forward pass, images and steps mixed), insertion and deletion, the images
      in channels-last memory format (the faster layout for the CPU's convolutions).

Quantus's pixel flipping differs from the curve here, and is matched to it so:

* it perturbs *elements*, not pixels: the map is broadcast to the input's shape
  (N, C, H, W) and flattened, each channel of a pixel one feature, ``features_in_step``
  elements per step; and it asserts that the step divides H·W (the spatial size only),
  so for C = 3 no step of whole pixels passes. Matched by handing it each image as one
  channel (N, 1, H, W·C) that holds the pixels' channels side by side (channels last),
  with the map repeated C times along the row and ``features_in_step`` = C x 32, and a
  model wrapper that folds the view back to (N, C, H, W) (with channels-last strides, as
  (iii)'s inputs). A pixel's C equal scores sit next to each other
  in Quantus's descending sort, so each step moves 32 whole pixels; its sort
  (``np.argsort`` of the negated map) is not stable, so where two pixels tie across a
  step boundary it may move the other one (``tied_map_values`` in the JSON counts the
  repeated values; a handful among 102,400 on the reference run, none changing a point);
* its baseline is a constant per image ("black" is the image's minimum, "mean" its mean,
  both re-read from the already perturbed image at every step; "uniform" one draw per
  image) or an array of one step's shape: no random-normal image. Matched by its
  ``perturb_func`` option: a function that copies the moved elements from our baseline
  (laid out as the image), given all images in one batch (``batch_size`` = N);
* it returns probabilities (``softmax=True``, its default; ``False`` gives logits) of
  the given labels, here our targets (the predicted class), in float32;
* its curve holds the S points after each step; ours also has the unperturbed input at
  s = 0, so Quantus's curve is compared with ours[:, 1:];
* it normalises the map by its maximum by default (``normalise=False`` here; the order
  is unchanged either way).

The last line is one JSON object: ``ratio`` = time (ii) / time (iii) for the deletion
curves, ``ratio_vs_loop`` = time (i) / time (iii) for both curves, the times, the
largest differences of (iii) from Quantus and from the loop, and ``forward_only_s``: the
model alone on as many rows (N (S+1), ``max_batch`` at a time), the floor for any
method that scores every point. Quantus already scores all N images of a step in one
forward pass, so on a CPU, where the network's arithmetic dominates, (ii) and (iii) both
sit near that floor; batching steps matters where calls are cheap and many (a GPU).
All three run on ``--device`` (default ``auto``: the GPU where one exists, TF32 off; the
random draws are made on the CPU and moved). Without Quantus the script says so in its
JSON and measures nothing.

Check (``check``): every point of (iii)'s curves equals the loop's and Quantus's within
``TOLERANCE`` (1e-5 on a CPU, 1e-4 on a GPU). That holds on any CPU: the three ways score
the same perturbed images, in the same pixel order (one map tensor, one permutation), with
forward passes only, and a forward pass is continuous in its inputs (a ReLU gate that flips
at 0 changes nothing), so other kernels for other batch sizes move a probability by float32
rounding times the network's gain (``max_diff_vs_loop`` in the JSON); on a GPU, whose
batched and one-image convolutions may take different algorithms, 1e-4. A point computed
from another image, step or pixel order differs by far more: a random ResNet-8's
probabilities on random images move by 6e-4 per step (median over 100 images and 32 steps).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from evaluators.maps import explain  # noqa: E402
from foundation.modality import reduce_map  # noqa: E402
from evaluators.metrics.insertion_deletion import insertion_deletion_curves  # noqa: E402
from foundation.devices import resolve_device  # noqa: E402
from foundation.files import json_text  # noqa: E402
from lightning_modules.image_classifier import create_image_model  # noqa: E402
from lightning_modules.interface import class_probabilities  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_RUN = Path(os.environ.get("RELIABLE_EXPLANATIONS_CIFAR10_RUN",
                                    ROOT / "runs" / "cifar10-jpeg" / "resnet8-seed0"))
N_IMAGES, STEPS, SEED = 100, 32, 0
# rows per forward pass: 64 on a CPU (the CPU figures of docs/performance.md); on a GPU all 100 x 33 rows
# in one pass, since a ResNet-8 at 32x32 is launch-bound there (the H100 figure of 2026-11-26
# used 64; 4096 is not yet measured)
MAX_BATCH = {"cpu": 64, "cuda": 4096}
TOLERANCE = {"cpu": 1e-5, "cuda": 1e-4}


def model_and_images(n: int) -> tuple[nn.Module, torch.Tensor, str]:
    """The reference ResNet-8 and the first ``n`` CIFAR-10 test images, or a random
    ResNet-8 on random images (and what was used)."""
    if (REFERENCE_RUN / "checkpoints" / "last.ckpt").is_file():
        from evaluators.inputs.runs import load_run

        model, data, _ = load_run(REFERENCE_RUN, data_options={"eval_batch_size": n})
        data.setup("test")
        return model.eval(), next(iter(data.test_dataloader()))[0][:n], f"reference run {REFERENCE_RUN.name}"
    torch.manual_seed(0)
    model = create_image_model("resnet8", num_classes=10, in_channels=3).eval()
    return model, torch.randn(n, 3, 32, 32), "random ResNet-8 on random images (reference run folder missing)"


def documented_draws(x: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The core's random draws, as its docstring states them: one permutation of the H·W
    pixels per image, then N(0, 1) noise of x's shape, scaled by each image's channel means
    and standard deviations (the random-normal baseline)."""
    generator = torch.Generator().manual_seed(seed)
    perms = torch.stack([torch.randperm(x.shape[2] * x.shape[3], generator=generator) for _ in range(len(x))])
    noise = torch.randn(x.shape, generator=generator, dtype=x.dtype)
    return perms, x.mean((2, 3), keepdim=True) + x.std((2, 3), correction=0, keepdim=True) * noise


def loop_curves(model, x, maps, target, perms, baseline, mode: str, steps: int) -> torch.Tensor:
    """One image at a time, one forward pass per step, the image changed in place; pixels
    in descending order of the map, ties in the order of the image's permutation."""
    n = maps[0].numel()
    curves = torch.zeros(len(x), steps + 1)
    with torch.no_grad():
        for i in range(len(x)):
            perm = perms[i].numpy()
            order = torch.from_numpy(perm[np.argsort(-maps[i].flatten().numpy()[perm], kind="stable")])
            current, source = (baseline[i].clone(), x[i]) if mode == "insertion" else (x[i].clone(), baseline[i])
            current, source = current.view(x.shape[1], n), source.view(x.shape[1], n)
            for s in range(steps + 1):
                if s > 0:
                    moved = order[(s - 1) * n // steps: s * n // steps]
                    current[:, moved] = source[:, moved]
                curves[i, s] = class_probabilities(model, current.view(1, *x.shape[1:]))[0, target[i]].item()
    return curves


class ChannelsLastView(nn.Module):
    """The model seen through Quantus's one-channel view (N, 1, H, W·C) of images (N, C, H, W)."""

    def __init__(self, model: nn.Module, channels: int) -> None:
        super().__init__()
        self.model, self.channels = model, channels

    def forward(self, view: torch.Tensor) -> torch.Tensor:
        n, _, h, wc = view.shape
        return self.model(view.view(n, h, wc // self.channels, self.channels).permute(0, 3, 1, 2))


def copy_from_baseline(arr: np.ndarray, indices: np.ndarray, perturb_baseline: np.ndarray, **kwargs) -> np.ndarray:
    """Quantus ``perturb_func``: the elements at ``indices`` (N, I) of the flat images ``arr``
    (N, F) take the baseline's values (N, F), all images in one batch."""
    out = arr.copy()
    rows = np.arange(len(arr))[:, None]
    out[rows, indices] = perturb_baseline[rows, indices]
    return out


def quantus_deletion(model, x, maps, target, baseline, steps: int) -> torch.Tensor:
    import quantus

    n, c, h, w = x.shape

    def view(t: torch.Tensor) -> np.ndarray:
        return t.permute(0, 2, 3, 1).reshape(n, 1, h, w * c).cpu().numpy()

    metric = quantus.PixelFlipping(
        features_in_step=c * h * w // steps, normalise=False, abs=False, perturb_func=copy_from_baseline,
        perturb_baseline=view(baseline).reshape(n, -1), disable_warnings=True, display_progressbar=False,
    )  # fmt: skip
    scores = metric(model=ChannelsLastView(model, c).eval(), x_batch=view(x), y_batch=target.cpu().numpy(),
                    a_batch=view(maps[:, None].expand(-1, c, -1, -1)), channel_first=True, softmax=True,
                    device=str(x.device), batch_size=n)  # fmt: skip
    return torch.tensor(np.asarray(scores), dtype=torch.float32)


def check(ours: torch.Tensor, reference: torch.Tensor, tolerance: float, label: str) -> float:
    """The module docstring's check: the largest |ours - reference| over the curves' points,
    AssertionError where it is above ``tolerance`` (or not finite)."""
    if ours.shape != reference.shape:
        raise AssertionError(f"{label}'s curves have shape {tuple(reference.shape)}, ours {tuple(ours.shape)}")
    difference = (ours - reference).abs().max().item()
    if not difference <= tolerance:
        raise AssertionError(f"{label}'s curves differ from ours by {difference:.2e} (> {tolerance})")
    return difference


def forward_only(model, x: torch.Tensor, points: int, max_batch: int) -> None:
    """The model on ``points`` copies of every image, ``max_batch`` rows per pass, channels last."""
    rows = x[torch.arange(len(x) * points) % len(x)].contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        for chunk in rows.split(max_batch):
            class_probabilities(model, chunk)


def timed(run):
    start = time.perf_counter()
    out = run()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto (the GPU where one exists), cpu, cuda, cuda:<i>")
    parser.add_argument("--max_batch", type=int, help="rows per forward pass (default: 64 on a CPU, 4096 on a GPU)")
    args = parser.parse_args(argv if argv is not None else [])
    device = resolve_device(args.device)
    max_batch = args.max_batch or MAX_BATCH["cpu" if device.type == "cpu" else "cuda"]
    if device.type == "cuda":  # float32 everywhere, so that the three curves can be compared
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    tolerance = TOLERANCE["cpu" if device.type == "cpu" else "cuda"]
    try:
        import quantus  # noqa: F401
    except ImportError:
        result = {"ratio": None, "skipped": "quantus is not installed: pip install quantus==0.6.0 and the test "
                                            "extra's opencv-python-headless, scikit-image, cachetools (setup.cfg)"}
        print(json_text(result))
        return result
    torch.manual_seed(0)
    model, x, source = model_and_images(N_IMAGES)
    model, x = model.to(device), x.to(device)
    target = class_probabilities(model, x).argmax(-1).detach()
    maps = reduce_map(explain(model, x, "saliency", target=target).detach(), "abs_sum").cpu()
    n_pixels = maps[0].numel()
    ties = len(x) * n_pixels - sum(len(torch.unique(m)) for m in maps)
    perms, baseline = documented_draws(x.cpu(), SEED)
    baseline = baseline.to(device)
    options = {"target": target, "steps": STEPS, "seed": SEED, "max_batch": max_batch}
    x_fast = x.contiguous(memory_format=torch.channels_last)  # the faster layout for CPU convolutions

    ours, t_ours = {}, {}
    for mode in ("insertion", "deletion"):
        (_, ours[mode]), t_ours[mode] = timed(lambda: insertion_deletion_curves(model, x_fast, maps, mode, **options))
    loop, t_loop = {}, {}
    for mode in ("insertion", "deletion"):
        loop[mode], t_loop[mode] = timed(lambda: loop_curves(model, x, maps, target, perms, baseline, mode, STEPS))
    _, t_forward = timed(lambda: forward_only(model, x, STEPS + 1, max_batch))
    ours = {m: curves.cpu() for m, curves in ours.items()}
    diff_loop = max(check(ours[m], loop[m], tolerance, f"the loop's {m}") for m in ours)
    print(f"(i) loop {sum(t_loop.values()):.2f} s  (iii) ours {sum(t_ours.values()):.2f} s  max |diff| {diff_loop:.2e}")

    result = {"n_images": len(x), "steps": STEPS, "pixels_per_step": n_pixels // STEPS, "max_batch": max_batch,
              "model_and_images": source, "tied_map_values": int(ties), "device": str(device),
              "threads": torch.get_num_threads(),
              "loop_s": {m: round(t, 3) for m, t in t_loop.items()},
              "ours_s": {m: round(t, 3) for m, t in t_ours.items()},
              "forward_only_s": round(t_forward, 3),
              "ratio_vs_loop": round(sum(t_loop.values()) / sum(t_ours.values()), 2),
              "max_diff_vs_loop": diff_loop}  # fmt: skip
    theirs, t_quantus = timed(lambda: quantus_deletion(model, x, maps, target, baseline, STEPS))
    diff_quantus = check(ours["deletion"][:, 1:], theirs, tolerance, "Quantus's deletion")
    print(f"(ii) quantus deletion {t_quantus:.2f} s  (iii) ours deletion {t_ours['deletion']:.2f} s  "
          f"max |diff| {diff_quantus:.2e}")  # fmt: skip
    result.update({"ratio": round(t_quantus / t_ours["deletion"], 2), "quantus_s": round(t_quantus, 3),
                   "max_diff_vs_quantus": diff_quantus})  # fmt: skip
    print(json_text(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
