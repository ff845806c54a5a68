"""Which on-disk format ROAR's modified datasets are written in (docs/roar.md, "ImageNet-scale:
modified datasets as shards"): the candidates measured on the same modified uint8 images.

    python tools/roar_shard_formats.py --images imgs.pt --out /tmp/formats [--n 1000]

``imgs.pt``: ``{"x": uint8 (N, C, H, W), "y": int64 (N,)}`` (e.g. the 1,000 ImageNet-style
validation images decoded at 224 × 224 by ``ImageFolderDataModule(..., image_size=224)``).
Every image is first modified as a ROAR cell would: the top half of its Sobel-ranked elements
(the ``sobel`` control's maps) replaced by the images' mean. Candidates, each written once and
read back in full with one and two loader workers (batches of 64):

* ``npy``: fixed-size uint8 arrays, one ``.npy`` per shard of 256 images, read through
  ``np.load(mmap_mode="r")`` (the project's choice, ``datamodules.roar_shards``);
* ``litdata``: Lightning's ``optimize`` (64 MB chunks, raw and ``zstd`` when installed) read by
  ``StreamingDataset`` + ``StreamingDataLoader``;
* ``webdataset``: tar shards of 256 samples holding the image as ``.npy`` (raw) or lossless ``.png``;
* lossless sizes alone: zlib (levels 1 and 6) and PNG per image, to compare bytes per image.

Candidates whose package is not installed are skipped (litdata and webdataset are not project
dependencies; see the docs for how they were measured). Prints one JSON line per candidate: write
and read images/s, bytes per image, and whether the exact bytes came back.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from datamodules.roar import remove_top  # noqa: E402
from evaluators.protocols.roar.estimators import sobel_scores  # noqa: E402
from foundation.files import json_text  # noqa: E402

SHARD = 256
BATCH = 64


def modified_images(path: str, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    data = torch.load(path, weights_only=True)
    x, y = data["x"][:n], data["y"][:n]
    fill = x.double().mean((0, 2, 3)).round().to(torch.uint8)
    out = torch.cat([remove_top(x[a : a + 100], sobel_scores(x[a : a + 100].float(), None, 0), 0.5, fill,
                                index=torch.arange(a, min(a + 100, len(x)))) for a in range(0, len(x), 100)])
    return out.numpy(), y.numpy(), fill.numpy()


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def timed_read(loader, n: int) -> tuple[float, list]:
    start, got = time.perf_counter(), []
    for batch in loader:
        got.append(batch)
    return n / (time.perf_counter() - start), got


class NpyShards(torch.utils.data.Dataset):
    def __init__(self, folder: Path, count: int) -> None:
        self.folder, self.count, self.maps = folder, count, {}

    def __len__(self) -> int:
        return self.count

    def __getitems__(self, indices):
        out = []
        for i in indices:
            s = i // SHARD
            if s not in self.maps:
                self.maps[s] = np.load(self.folder / f"{s:05d}.npy", mmap_mode="r")
            out.append(np.asarray(self.maps[s][i % SHARD]))
        return torch.from_numpy(np.stack(out))


def bench_npy(x, y, out: Path) -> dict:
    folder = out / "npy"
    folder.mkdir(parents=True)
    start = time.perf_counter()
    for s in range(0, len(x), SHARD):
        np.save(folder / f"{s // SHARD:05d}.npy", x[s : s + SHARD])
    np.save(folder / "labels.npy", y)
    write = len(x) / (time.perf_counter() - start)
    result = {"format": "npy", "write_img_s": round(write), "bytes_per_image": folder_bytes(folder) / len(x)}
    for workers in (1, 2):
        loader = torch.utils.data.DataLoader(NpyShards(folder, len(x)), batch_size=BATCH, num_workers=workers,
                                             collate_fn=lambda b: b)
        speed, got = timed_read(loader, len(x))
        result[f"read_img_s_{workers}w"] = round(speed)
    result["exact"] = bool(np.array_equal(torch.cat(got).numpy(), x))
    return result


class _Sample:
    """litdata's ``fn``: image i of a saved array (picklable, for its worker processes)."""

    def __init__(self, path: str, labels: np.ndarray) -> None:
        self.path, self.labels, self.images = path, labels, None

    def __call__(self, i: int) -> dict:
        if self.images is None:
            self.images = np.load(self.path, mmap_mode="r")
        return {"index": i, "x": np.array(self.images[i]), "y": int(self.labels[i])}


def bench_litdata(x, y, out: Path, compression: str | None) -> dict:
    import litdata

    folder = out / f"litdata-{compression}"
    start = time.perf_counter()
    source = out / "source.npy"
    out.mkdir(parents=True, exist_ok=True)
    if not source.is_file():
        np.save(source, x)
    litdata.optimize(fn=_Sample(str(source), y), inputs=list(range(len(x))),
                     output_dir=str(folder), chunk_bytes="64MB", num_workers=1, compression=compression,
                     verbose=False)  # fmt: skip
    write = len(x) / (time.perf_counter() - start)
    result = {"format": f"litdata-{compression or 'raw'}", "write_img_s": round(write),
              "bytes_per_image": folder_bytes(folder) / len(x)}  # fmt: skip
    for workers in (1, 2):
        dataset = litdata.StreamingDataset(str(folder), shuffle=False)
        loader = litdata.StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers)
        speed, got = timed_read(loader, len(x))
        result[f"read_img_s_{workers}w"] = round(speed)
    index = torch.cat([b["index"] for b in got]).numpy()
    images = torch.cat([torch.as_tensor(b["x"]) for b in got]).numpy()
    result["exact"] = bool(np.array_equal(images, x[index]) and sorted(index.tolist()) == list(range(len(x))))
    return result


def bench_webdataset(x, y, out: Path, extension: str) -> dict:
    import webdataset as wds

    folder = out / f"wds-{extension}"
    folder.mkdir(parents=True)
    start = time.perf_counter()
    for s in range(0, len(x), SHARD):
        with wds.TarWriter(str(folder / f"{s // SHARD:05d}.tar")) as sink:
            for i in range(s, min(s + SHARD, len(x))):
                image = x[i] if extension == "npy" else x[i].transpose(1, 2, 0)
                sink.write({"__key__": f"{i:07d}", extension: image, "cls": int(y[i])})
    write = len(x) / (time.perf_counter() - start)
    result = {"format": f"webdataset-{extension}", "write_img_s": round(write),
              "bytes_per_image": folder_bytes(folder) / len(x)}  # fmt: skip
    urls = [str(p) for p in sorted(folder.glob("*.tar"))]
    for workers in (1, 2):
        dataset = wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode("rgb8").to_tuple(
            "__key__", extension, "cls")  # fmt: skip
        loader = torch.utils.data.DataLoader(dataset.batched(BATCH), batch_size=None, num_workers=workers)
        speed, got = timed_read(loader, len(x))
        result[f"read_img_s_{workers}w"] = round(speed)
    keys = np.array([int(k) for b in got for k in b[0]])
    images = np.concatenate([np.asarray(b[1]) for b in got])
    images = images if extension == "npy" else images.transpose(0, 3, 1, 2)
    result["exact"] = bool(np.array_equal(images, x[keys]) and sorted(keys.tolist()) == list(range(len(x))))
    return result


def lossless_sizes(x) -> dict:
    from PIL import Image

    sizes = {}
    for name, encode in (("zlib1", lambda a: zlib.compress(a.tobytes(), 1)),
                         ("zlib6", lambda a: zlib.compress(a.tobytes(), 6)),
                         ("png", lambda a: _png(Image.fromarray(a.transpose(1, 2, 0))))):  # fmt: skip
        start = time.perf_counter()
        total = sum(len(encode(a)) for a in x)
        sizes[name] = {"bytes_per_image": total / len(x), "encode_img_s": round(len(x) / (time.perf_counter() - start))}
    return {"format": "lossless-per-image", "raw_bytes": int(x[0].nbytes), **sizes}


def _png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--only", default=None, help="one candidate: npy, webdataset or litdata")
    args = parser.parse_args()
    torch.set_num_threads(1)
    x, y, fill = modified_images(args.images, args.n)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    filled = float((x == fill[:, None, None]).mean())
    print(json_text({"images": len(x), "shape": list(x.shape[1:]), "filled": filled}))
    if args.only is None:
        print(json_text(lossless_sizes(x)), flush=True)
    if args.only in (None, "npy"):
        print(json_text(bench_npy(x, y, out)), flush=True)
    for extension in ("npy", "png") if args.only in (None, "webdataset") else ():
        try:
            print(json_text(bench_webdataset(x, y, out, extension)), flush=True)
        except ImportError:
            print(json_text({"format": f"webdataset-{extension}", "skipped": "webdataset is not installed"}))
    for compression in (None, "zstd") if args.only in (None, "litdata") else ():
        try:
            print(json_text(bench_litdata(x, y, out, compression)), flush=True)
        except (ImportError, ValueError) as err:
            print(json_text({"format": f"litdata-{compression or 'raw'}", "skipped": str(err)[:200]}))


if __name__ == "__main__":
    main()
