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
decoded once, before timing, and one untimed fit warms up each way. Also checked: the
members of (b) and (c) equal the models of (a) (largest parameter difference). The last
line is one JSON object; ``ratio`` = (a) / the way ``stacking="auto"`` picks on this device
((b) on a GPU, (c) on a CPU), ``ratio_vmap`` = (a) / (b), ``ratio_loop`` = (a) / (c).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytorch_lightning as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from datamodules import FashionMNISTDataModule  # noqa: E402
from evaluators.config import read_yaml  # noqa: E402
from lightning_modules import ImageClassifier, ImagePopulation  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "images" / "fashion_mnist_cnn.yaml"
K = 16
STEPS = 10  # per fit on a CPU
STEPS_GPU = 200  # per fit on a GPU, where a step takes milliseconds


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


def main() -> dict:
    config = read_yaml(CONFIG)
    model_options = {k: v for k, v in config["model"]["init_args"].items() if k != "seed"}
    for name in ("lr", "weight_decay"):  # YAML 1.1 reads 3e-3 as a string; jsonargparse converts it in train.py
        model_options[name] = float(model_options[name])
    data_options = {**config["data"]["init_args"]}
    device = "gpu" if torch.cuda.is_available() else "cpu"
    steps = STEPS_GPU if device == "gpu" else STEPS
    data = FashionMNISTDataModule(**data_options)
    data.setup("fit")  # decoded before any timing
    shape = {"num_classes": data.num_classes, "in_channels": data.in_channels}

    timed_fit(ImageClassifier(**model_options, **shape, seed=K), data, device, steps)  # warm-up
    alone = [ImageClassifier(**model_options, **shape, seed=i) for i in range(K)]
    sequential_s = sum(timed_fit(model, data, device, steps) for model in alone)
    print(f"(a) {K} ImageClassifier fits one after another: {sequential_s:.2f} s", flush=True)

    seconds, difference = {}, {}
    for stacking in ("vmap", "loop"):
        timed_fit(ImagePopulation(**model_options, **shape, seeds=[K, K + 1], stacking=stacking), data, device, steps)
        population = ImagePopulation(**model_options, **shape, size=K, stacking=stacking)
        seconds[stacking] = timed_fit(population, data, device, steps)
        difference[stacking] = max(
            (p.detach().cpu() - q.detach().cpu()).abs().max().item()
            for i, model in enumerate(alone)
            for p, q in zip(population.nets[i].parameters(), model.net.parameters())
        )
        print(f"({'b' if stacking == 'vmap' else 'c'}) ImagePopulation(stacking={stacking!r}): "
              f"{seconds[stacking]:.2f} s; largest member difference from (a) {difference[stacking]:.1e}", flush=True)
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
        "max_member_difference_vmap": difference["vmap"],
        "max_member_difference_loop": difference["loop"],
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
