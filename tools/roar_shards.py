"""One ROAR cell of an image folder through written shards: the modified splits written once
(any number of processes, ``--shard i/k``), then K = 1 retraining read from them by one
process or by Lightning DDP across processes, GPUs and nodes (the recipes
docs/roar_torchrun.sh and docs/roar_slurm.sh; docs/roar.md, "ImageNet-scale: modified
datasets as shards").

    python tools/roar_shards.py write --root DATA --out SHARDS --estimator random --fraction 0.5 --shard 0/4
    torchrun --nproc_per_node=4 tools/roar_shards.py fit --root DATA --out SHARDS --estimator random \\
        --fraction 0.5 --devices 4 --strategy ddp --max_epochs 90 --result cell.json

The estimator is a model-free control of ``evaluators.protocols.roar.estimators`` (``random``,
``sobel``), ranked on the images as the model sees them (normalised); the explainers' maps
come from a trained model's map pass. The fill is the stored training split's per-channel
mean rounded to uint8 (the evaluation split's where a folder has no ``train/``), summed a
chunk at a time. ``fit`` writes what is missing first (once per node), trains
``ImageClassifier(arch, seed)`` for ``--max_epochs``/``--max_steps``, and rank 0 writes
``--result``: the accuracy of the trained model on the modified test split, the images each
rank trained on per epoch (``seen``: their indices, from the loader's sampler) and the
sampler's world size, and a SHA-256 of the trained weights.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from functools import partial
from pathlib import Path

import pytorch_lightning as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from the checkout
from datamodules.images import ImageFolderDataModule  # noqa: E402
from datamodules.roar import remove_top  # noqa: E402
from datamodules.roar_shards import SHARD_IMAGES, ShardedDataModule, stored_size  # noqa: E402
from evaluators.protocols.roar.estimators import ROAR_CONTROLS  # noqa: E402
from evaluators.protocols.roar.grid import parse_shard  # noqa: E402
from evaluators.protocols.roar.rankings import streamed_fill  # noqa: E402
from foundation.errors import InputError, run_entry_point  # noqa: E402
from foundation.files import json_text, write_json  # noqa: E402
from lightning_modules.image_classifier import ImageClassifier  # noqa: E402


def control_modify(datamodule, estimator: str, fraction: float, fill, keep: bool, seed: int, x, index):
    """``remove_top`` of images ``x`` (uint8) ranked by the control's scores of their model inputs."""
    inputs, _ = datamodule.as_model_inputs(x, torch.zeros(len(x), dtype=torch.int64))
    scores = ROAR_CONTROLS[estimator](inputs, index, seed)
    return remove_top(x, scores, fraction, fill, keep=keep, seed=seed, index=index)


def sharded_cell(args) -> ShardedDataModule:
    if args.estimator not in ROAR_CONTROLS:
        raise InputError(f"option --estimator {args.estimator!r}; expected one of {sorted(ROAR_CONTROLS)}")
    data = ImageFolderDataModule(root=args.root, image_size=args.image_size, in_memory=False,
                                 batch_size=args.batch_size, random_crop_padding=args.random_crop_padding,
                                 horizontal_flip=args.horizontal_flip, cache_dir=args.cache_dir)  # fmt: skip
    data.prepare_data()
    fill = streamed_fill(data, args.chunk or 256, "train" if "train" in data.split_sizes else "test")
    modify = partial(control_modify, data, args.estimator, args.fraction, fill, args.keep, args.seed)
    name = f"{args.estimator}|t={args.fraction}|keep={args.keep}|seed={args.seed}|element|square"
    return ShardedDataModule(data, {"train": modify, "test": modify}, {"train": name, "test": name}, args.out,
                             shard_images=args.shard_images, chunk=args.chunk)  # fmt: skip


class SeenIndices(pl.Callback):
    """Each epoch's indices that this rank's training loader draws (its distributed sampler's)."""

    def __init__(self) -> None:
        self.epochs: list[list[int]] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.epochs.append([int(i) for i in trainer.train_dataloader.sampler])


def fit(args, data: ShardedDataModule) -> None:
    """Train one cell from the shards (:func:`fit_cell`), then leave the process group: a gloo
    group still alive at interpreter exit can abort the process after its work is done
    ("terminate called without an active exception", SIGABRT), seen under load."""
    try:
        fit_cell(args, data)
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def fit_cell(args, data: ShardedDataModule) -> None:
    model = ImageClassifier(arch=args.arch, num_classes=data.num_classes, in_channels=data.in_channels, seed=args.seed,
                            optimizer="adamw", lr=args.lr, schedule="none")  # fmt: skip
    seen = SeenIndices()
    trainer = pl.Trainer(accelerator=args.accelerator, devices=args.devices, num_nodes=args.num_nodes,
                         strategy=args.strategy, max_epochs=args.max_epochs, max_steps=args.max_steps, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[seen], default_root_dir=str(args.out))  # fmt: skip
    trainer.fit(model, datamodule=data)
    gathered = trainer.strategy.all_gather(torch.tensor(seen.epochs))  # (world, epochs, per rank) under DDP
    if trainer.global_rank != 0:
        return
    correct = total = 0
    model.eval()
    with torch.no_grad():
        for x, y in data.test_dataloader():
            correct += (model(x.to(model.device)).argmax(1).cpu() == y).sum().item()
            total += len(y)
    seen_ranks = gathered.tolist() if gathered.dim() == 3 else [gathered.tolist()]
    weights = hashlib.sha256(b"".join(v.cpu().numpy().tobytes() for v in model.state_dict().values())).hexdigest()
    record = {"accuracy": correct / total, "test_images": total, "world_size": trainer.world_size,
              "seen": seen_ranks, "weights_sha256": weights}  # fmt: skip
    if args.result:
        write_json(Path(args.result), record, indent=None)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["write", "fit"])
    parser.add_argument("--root", required=True, help="image folder or .tar.gz archive (ImageNet layout)")
    parser.add_argument("--out", required=True, help="folder of the written shards")
    parser.add_argument("--estimator", default="random")
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--keep", action="store_true", help="KAR: keep the top fraction, replace the rest")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--image_size", type=int, default=None)
    parser.add_argument("--cache_dir", default=None)
    parser.add_argument("--shard", default=None, help="write: i/k, shards i, i+k, ... of each split")
    parser.add_argument("--splits", nargs="+", default=["train", "test"], help="write: the splits")
    parser.add_argument("--shard_images", type=int, default=SHARD_IMAGES)
    parser.add_argument("--chunk", type=int, default=None, help="images modified at a time (default: 2^22 values)")
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--random_crop_padding", type=int, default=0)
    parser.add_argument("--horizontal_flip", action="store_true")
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--devices", default="auto")
    parser.add_argument("--num_nodes", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--max_epochs", type=int, default=1)
    parser.add_argument("--max_steps", type=int, default=-1)
    parser.add_argument("--result", default=None, help="fit: JSON file rank 0 writes")
    args = parser.parse_args(argv)
    data = sharded_cell(args)
    if args.command == "write":
        shard = parse_shard(args.shard) if args.shard else None
        for split in args.splits:
            start = time.perf_counter()
            folder = data.write(split, shard)
            print(json_text({"split": split, "folder": str(folder), "seconds": round(time.perf_counter() - start, 2),
                             "images": stored_size(data.datamodule, split)}))  # fmt: skip
    else:
        fit(args, data)


if __name__ == "__main__":
    run_entry_point(main)
