"""Measure ROAR's ranking pass on an image folder (docs/roar.md, "ImageNet-scale: maps and rankings").

    python tools/roar_rankings.py pass --root ../shared/data/images/imagenet-samples-val.tar.gz --images 1000 \
        --out /tmp/rankings [--kill-after-shards 1]
    python tools/roar_rankings.py formats --root ../shared/data/images/imagenet-samples-val.tar.gz --images 32

``pass``: a randomly initialised torchvision-layout ResNet-18 (timm ``resnet18``, 1,000 classes,
eval mode, seed 0), the folder's evaluation split at 224 × 224 (``image_size=224``: shorter side
resized to 256, centre crop), ``ranking_pass`` of ``--estimator`` for both units; prints one JSON
line (images/s, seconds, shard files computed, bytes per image on disk). ``--kill-after-shards n``:
the process sends itself SIGKILL once n shard files of this run exist (a crash mid-pass).
``formats``: the maps of ``--images`` images, and the bytes per image and exactness of each way of
storing what ROAR needs (float32 maps, float16 maps, uint8 levels, the order as integers,
compressed levels); float16's new ties and the masks it changes on the grid's fractions.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import torch

from datamodules.images import ImageFolderDataModule
from datamodules.roar import FRACTIONS, removed_count
from evaluators.protocols.roar.estimators import estimator_maps
from evaluators.protocols.roar.rankings import order_levels, ranking_pass, removal_order
from foundation.files import json_text
from lightning_modules.image_classifier import create_image_model


def _setup(args):
    torch.manual_seed(0)
    model = create_image_model("resnet18", 1000, 3).eval()
    data = ImageFolderDataModule(args.root, image_size=224, in_memory=False, cache_dir=args.cache,
                                 subset={"val": args.images})  # fmt: skip
    data.prepare_data()
    return model, data


def _watch(folder: Path, n: int, before: set) -> None:
    while True:
        if len(set(folder.glob("*.rankings/shard-*.pt")) - before) >= n:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.05)


def run_pass(args) -> dict:
    model, data = _setup(args)
    out = Path(args.out)
    before = set(out.glob("*.rankings/shard-*.pt"))
    if args.kill_after_shards:
        threading.Thread(target=_watch, args=(out, args.kill_after_shards, before), daemon=True).start()
    start = time.perf_counter()
    store = ranking_pass(model, data, args.estimator, "test", out, chunk=args.chunk, shard_size=args.shard_size,
                         units=("element", "pixel"), store=args.store)  # fmt: skip
    seconds = time.perf_counter() - start
    computed = sum(min(store.shard_size, store.count - j * store.shard_size) for j in store.computed)
    disk = sum(p.stat().st_size for p in store.root.glob("shard-*.pt"))
    return {"images": store.count, "computed_shards": store.computed, "computed_images": computed,
            "seconds": round(seconds, 1), "images_per_s": round(computed / seconds, 2) if computed else None,
            "bytes_per_image_on_disk": round(disk / store.count), "float32_map_bytes": 4 * 3 * 224 * 224,
            "threads": torch.get_num_threads(), "folder": str(store.root)}  # fmt: skip


def _float16_changes(maps: torch.Tensor, index: torch.Tensor, unit: str) -> dict:
    """Units in ties that float16 maps create (absent in float32), and grid masks they change."""
    exact = removal_order(maps, unit, True, 0, index)
    half = removal_order(maps.half().float(), unit, True, 0, index)
    n = exact.shape[1]
    from datamodules.roar import ranked_scores

    new_ties = []
    for r32, r16 in zip(ranked_scores(maps, unit), ranked_scores(maps.half().float(), unit)):
        tied32 = torch.unique(r32, return_counts=True)[1]
        tied16 = torch.unique(r16, return_counts=True)[1]
        new_ties.append(float((tied16[tied16 > 1].sum() - tied32[tied32 > 1].sum()) / n))
    changed = []
    for f in FRACTIONS[1:]:
        k = removed_count(f, n)
        a = torch.zeros(len(maps), n, dtype=torch.bool).scatter(1, exact[:, :k], True)
        b = torch.zeros(len(maps), n, dtype=torch.bool).scatter(1, half[:, :k], True)
        changed.append(float((a != b).sum(1).float().mean() / n))
    zero16 = float((maps.half() == 0).float().mean() - (maps == 0).float().mean())
    return {"units_in_new_ties": round(float(np.mean(new_ties)), 4), "flushed_to_zero": round(zero16, 4),
            "mask_units_changed_per_fraction": [round(c, 5) for c in changed]}  # fmt: skip


def run_formats(args) -> dict:
    model, data = _setup(args)
    index = torch.arange(args.images)
    x, _ = data.as_model_inputs(*data.stored_images("test", index))
    maps = estimator_maps(model, x, args.estimator, chunk=args.chunk, index=index).float()
    report = {"images": args.images, "estimator": args.estimator, "float32_map": maps[0].numel() * 4,
              "float16_map": maps[0].numel() * 2, "abs_max": float(maps.abs().max()),
              "abs_median": float(maps.abs().median())}  # fmt: skip
    for unit in ("element", "pixel"):
        order = removal_order(maps, unit, True, 0, index)
        n = order.shape[1]
        levels = order_levels(order, FRACTIONS[1:]).numpy()
        top = removed_count(FRACTIONS[-1], n)
        packed_bits = int(np.ceil(np.log2(n)))
        report[unit] = {
            "units": n,
            "levels_uint8": n,
            "levels_zlib": round(float(np.mean([len(zlib.compress(row.tobytes(), 6)) for row in levels]))),
            "levels_3bit_packed": -(-n * 3 // 8),
            "order_top90_int32": top * 4,
            "order_top90_smallest_int": top * (2 if n <= 2**16 else 4),
            f"order_top90_{packed_bits}bit_packed": -(-top * packed_bits // 8),
            "float16": _float16_changes(maps, index, unit),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["pass", "formats"])
    parser.add_argument("--root", default="../shared/data/images/imagenet-samples-val.tar.gz")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--estimator", default="saliency")
    parser.add_argument("--out", default="/tmp/roar-rankings")
    parser.add_argument("--cache", default=None, help="the image cache (unpacked archive)")
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--shard-size", type=int, default=256)
    parser.add_argument("--store", default="levels")
    parser.add_argument("--kill-after-shards", type=int, default=0)
    args = parser.parse_args()
    print(json_text(run_pass(args) if args.what == "pass" else run_formats(args)), flush=True)


if __name__ == "__main__":
    main()
