"""Training K = 16 seed-varied Fashion-MNIST small CNNs (the ``fashion_mnist_cnn`` config's
model and optimiser): one after another vs as one ``ImagePopulation`` (issue 19, item 5).

    python bench/image_population.py      # device auto-detected (a GPU where there is one)

(a) what a user would do: ``Trainer.fit`` on ``ImageClassifier(seed=i)`` for i < K;
(b) ``ImagePopulation(stacking="vmap")``: the members stacked, one ``functional_call`` under
    ``vmap`` per step, under one Trainer;
(c) ``ImagePopulation(stacking="loop")``: the members one after another within each step,
    under one Trainer.
Every fit runs the same ``STEPS`` optimiser steps of batch 128 (one epoch of the first
``STEPS * 128`` training images in the datamodule's shuffled order): the same epochs for
every member, shortened so the bench takes a few minutes on a 2-core CPU. The data is
decoded once, before timing, and one untimed fit warms up each way.

Check (``check``): each member of (b) and (c) is the model of (a) with its seed. Stacked
convolutions (vmap's grouped ones) round otherwise than one model's, and AdamW turns a
gradient's last bits into a step of up to the learning rate where that gradient is near 0
(measured: members 7.6e-4 from their models after 10 steps with vmap on a CPU, 0 with the
loop), so equality is not asked for. Asked instead: every member is nearer its own model
than any member is to another seed's, by ``MAX_OWN_TO_OTHER`` (0.1): the largest parameter
difference from its own model at most 0.1 times the least over pairs of different seeds
(``min_other_seed_difference``, other initial weights). So a member trained from another
seed fails, as does a layer zeroed or scaled. The check compares fits of ``STEPS`` steps on
every device: over a GPU's ``STEPS_GPU`` timed steps, the last-bit differences grow as in any
chaotic training (measured on an H200, float32 without TF32: a vmap member 0.14 from its own
model after 200 steps, seeds 0.65 apart), so on a GPU the check fits again for ``STEPS``.
The last line is one JSON object; ``ratio`` = (a) / the way ``stacking="auto"`` picks on
this device ((b) on a GPU, (c) on a CPU), ``ratio_vmap`` = (a) / (b), ``ratio_loop`` = (a) / (c).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytorch_lightning as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from datamodules import FashionMNISTDataModule  # noqa: E402
from foundation.files import json_text, read_yaml  # noqa: E402
from lightning_modules import ImageClassifier, ImagePopulation  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "images" / "fashion_mnist_cnn.yaml"
K = 16
STEPS = 10  # per fit on a CPU
STEPS_GPU = 200  # per fit on a GPU, where a step takes milliseconds
MAX_OWN_TO_OTHER = 0.1


def trainer(device: str, steps: int) -> pl.Trainer:
    return pl.Trainer(accelerator=device, devices=1, max_epochs=1, limit_train_batches=steps, limit_val_batches=0,
                      logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=0)  # fmt: skip


def timed_fit(model: pl.LightningModule, data, device: str, steps: int) -> float:
    if device == "gpu":
        torch.cuda.synchronize()
    started = time.perf_counter()
    trainer(device, steps).fit(model, datamodule=data)
    if device == "gpu":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def largest_difference(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max((p.detach().cpu() - q.detach().cpu()).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def check(alone: list[torch.nn.Module], members: list[torch.nn.Module], label: str) -> dict:
    """The module docstring's check of the population's ``members`` against the networks trained
    ``alone`` (same order, K >= 2); AssertionError where it fails. ``max_member_difference``: the
    largest parameter difference of a member from its own model; ``min_other_seed_difference``:
    the least between a member and another seed's model."""
    if len(alone) != len(members) or len(alone) < 2:
        raise AssertionError(f"{label}: {len(members)} members against {len(alone)} models (expected K >= 2 each)")
    own = max(largest_difference(member, model) for member, model in zip(members, alone))
    other = min(largest_difference(member, model) for i, member in enumerate(members)
                for j, model in enumerate(alone) if i != j)  # fmt: skip
    if not own <= MAX_OWN_TO_OTHER * other:
        raise AssertionError(f"{label}: a member is {own:.2e} from its own model, more than {MAX_OWN_TO_OTHER} "
                             f"times the least difference between other seeds' ({other:.2e})")  # fmt: skip
    return {"max_member_difference": own, "min_other_seed_difference": other}


def main() -> dict:
    config = read_yaml(CONFIG)
    model_options = {k: v for k, v in config["model"]["init_args"].items() if k != "seed"}
    for name in ("lr", "weight_decay"):  # YAML 1.1 reads 3e-3 as a string; jsonargparse converts it in train.py
        model_options[name] = float(model_options[name])
    data_options = {**config["data"]["init_args"]}
    device = "gpu" if torch.cuda.is_available() else "cpu"
    if device == "gpu":  # float32 everywhere (cuDNN's default TF32 rounds each convolution to 10 bits)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    steps = STEPS_GPU if device == "gpu" else STEPS
    data = FashionMNISTDataModule(**data_options)
    data.setup("fit")  # decoded before any timing
    shape = {"num_classes": data.num_classes, "in_channels": data.in_channels}

    timed_fit(ImageClassifier(**model_options, **shape, seed=K), data, device, steps)  # warm-up
    alone = [ImageClassifier(**model_options, **shape, seed=i) for i in range(K)]
    sequential_s = sum(timed_fit(model, data, device, steps) for model in alone)
    print(f"(a) {K} ImageClassifier fits one after another: {sequential_s:.2f} s", flush=True)

    seconds, checked = {}, {}
    for stacking in ("vmap", "loop"):
        timed_fit(ImagePopulation(**model_options, **shape, seeds=[K, K + 1], stacking=stacking), data, device, steps)
        population = ImagePopulation(**model_options, **shape, size=K, stacking=stacking)
        seconds[stacking] = timed_fit(population, data, device, steps)
        if steps != STEPS:  # the check's own fits (module docstring)
            alone_checked = [ImageClassifier(**model_options, **shape, seed=i) for i in range(K)]
            for model in alone_checked:
                timed_fit(model, data, device, STEPS)
            population = ImagePopulation(**model_options, **shape, size=K, stacking=stacking)
            timed_fit(population, data, device, STEPS)
        else:
            alone_checked = alone
        checked[stacking] = check([model.net for model in alone_checked], list(population.nets), stacking)
        print(f"({'b' if stacking == 'vmap' else 'c'}) ImagePopulation(stacking={stacking!r}): "
              f"{seconds[stacking]:.2f} s; largest member difference from (a) "
              f"{checked[stacking]['max_member_difference']:.1e} (other seeds: at least "
              f"{checked[stacking]['min_other_seed_difference']:.1e})", flush=True)  # fmt: skip
    chosen = "vmap" if device == "gpu" else "loop"  # what ImagePopulation(stacking="auto") does here
    result = {
        "bench": "image_population",
        "device": torch.cuda.get_device_name() if device == "gpu" else f"cpu ({torch.get_num_threads()} threads)",
        "members": K,
        "steps": steps,
        "batch_size": data.batch_size,
        "train_images_per_member": steps * data.batch_size,
        "note": f"each fit: one epoch of {steps} steps (a subset of the 60,000 training images), same for every member",
        "stacking": chosen,
        "sequential_s": round(sequential_s, 3),
        "stacked_s": round(seconds[chosen], 3),
        "vmap_s": round(seconds["vmap"], 3),
        "loop_s": round(seconds["loop"], 3),
        "ratio": round(sequential_s / seconds[chosen], 3),
        "ratio_vmap": round(sequential_s / seconds["vmap"], 3),
        "ratio_loop": round(sequential_s / seconds["loop"], 3),
        "checked_after_steps": STEPS,
        "max_member_difference_vmap": checked["vmap"]["max_member_difference"],
        "max_member_difference_loop": checked["loop"]["max_member_difference"],
        "min_other_seed_difference": checked["loop"]["min_other_seed_difference"],
    }
    print(json_text(result))
    return result


if __name__ == "__main__":
    main()
