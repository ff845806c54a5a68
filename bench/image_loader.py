"""Training on 32x32 images: time spent getting the next augmented batch vs in the step
(issue 15: the small sets are decoded once into a uint8 tensor cache and augmented in
batches in the training process, so that on 2 cores the loader does not steal the
model's compute).

    OMP_NUM_THREADS=2 python bench/image_loader.py

The reference ResNet-8 config (configs/images/cifar10_resnet8.yaml: batch 128, random
crops with 4 pixels of padding, horizontal flips; random initial weights) on CIFAR-10's
training split (``cifar10-jpeg.tar.gz`` under ``RELIABLE_EXPLANATIONS_DATA``, default
../shared/data; without it Fashion-MNIST with the same model, augmentation and batch
size, which the JSON's ``data`` says). For ``N_BATCHES`` batches after ``WARMUP``, each
batch is timed twice, as training interleaves them: getting it from the loader, then the
training step (forward, cross-entropy, backward, SGD step) of one model, for the loaders
below in turn, batch by batch (so that other work on a shared machine slows them alike);
the figures are medians over the batches, for

(ours)  ``ImageFolderDataModule.train_dataloader()``: batches cut from the decoded uint8
        tensor, augmented and normalised as whole batches (``datamodules/image_batches.py``);
(naive) the torchvision way: a Dataset turning one image at a time into a PIL image
        (as ``torchvision.datasets.CIFAR10`` does with its decoded arrays), then
        ``RandomCrop(32, padding=4)``, ``RandomHorizontalFlip``, ``ToTensor``,
        ``Normalize``, collated by a ``DataLoader`` with ``num_workers=0``;
(folder) with CIFAR-10 also ``torchvision.datasets.ImageFolder`` over the unpacked JPEG
        files with the same transforms (decoding every image every epoch).

Check (``check``), before timing: our first training batch equals the naive way's
transforms of the same images with the same draws. The datamodule documents its draws
(``EpochShuffle``: the order is ``randperm`` of ``epoch_generator(seed, 0, ORDER_STREAM)``;
``augment_batch``: vertical offsets, horizontal offsets, then flips from ``epoch_generator(seed,
0, AUGMENT_STREAM)``); ``replayed_draws`` makes them again and ``per_image_batch`` applies
them with torchvision's functional pad, crop, hflip, ``to_tensor`` and ``normalize``, one
PIL image at a time. Both compute (x / 255 - mean) / std in float32 elementwise, correctly
rounded on any CPU, so they agree exactly; 1e-6 leaves room for a fused multiply-add. A
crop one pixel off, a flip missed or a wrong normalisation is off by far more.

The decoding into the cache (once, about 20 s for CIFAR-10) is not timed; a run with
the cache filled reads it back in ``setup_s``. The last line is one JSON object:
``loader_s_per_batch``, ``step_s_per_batch``, ``loader_share`` (loader / (loader +
step)) of ours, ``naive_loader_s_per_batch``, ``ratio`` = naive / ours loader time,
``folder_loader_s_per_batch`` (null without CIFAR-10), the shares of the other two and
the setting.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch
import yaml
from PIL import Image
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from datamodules.image_batches import AUGMENT_STREAM, ORDER_STREAM, epoch_generator  # noqa: E402
from datamodules.images import FashionMNISTDataModule, ImageFolderDataModule  # noqa: E402
from foundation.files import json_text  # noqa: E402
from lightning_modules.image_classifier import SGD_MOMENTUM, ImageClassifier, parameter_groups  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("RELIABLE_EXPLANATIONS_DATA", ROOT.parent / "shared" / "data"))
CONFIG = ROOT / "configs" / "images" / "cifar10_resnet8.yaml"
WARMUP, N_BATCHES, TOLERANCE = 5, 30, 1e-6


def reference_datamodule() -> tuple[ImageFolderDataModule | FashionMNISTDataModule, dict, str]:
    """The config's datamodule on CIFAR-10, or its options on Fashion-MNIST; the model's options."""
    config = yaml.safe_load(CONFIG.read_text())
    options, model = dict(config["data"]["init_args"]), config["model"]["init_args"]
    archive = DATA_DIR / "images" / "cifar10-jpeg.tar.gz"
    if archive.is_file():
        return ImageFolderDataModule(**{**options, "root": str(archive)}), model, str(archive)
    del options["root"]
    return FashionMNISTDataModule(**options), model, "fashion_mnist (CIFAR-10 archive absent)"


class PerImage(Dataset):
    """uint8 images (N, C, H, W) and labels, one PIL image at a time through ``transform``."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform) -> None:
        self.images, self.labels, self.transform = images.permute(0, 2, 3, 1).numpy(), labels, transform
        self.mode = "L" if images.shape[1] == 1 else "RGB"

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        pixels = self.images[i]
        image = Image.fromarray(pixels[..., 0] if self.mode == "L" else pixels, mode=self.mode)
        return self.transform(image), int(self.labels[i])


def per_image_transforms(data, height: int, width: int):
    from torchvision import transforms

    mean, std = data.normalization
    return transforms.Compose([
        transforms.RandomCrop((height, width), padding=data.random_crop_padding),
        transforms.RandomHorizontalFlip(), transforms.ToTensor(), transforms.Normalize(mean, std),
    ])  # fmt: skip


def replayed_draws(data, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first training batch's image indices and its crop offsets (rows, columns) and flips,
    drawn again as the module docstring says (epoch 0; ``n`` images in the split)."""
    order = torch.randperm(n, generator=epoch_generator(data.seed, 0, ORDER_STREAM))[:data.batch_size]
    generator, padding, size = epoch_generator(data.seed, 0, AUGMENT_STREAM), data.random_crop_padding, len(order)
    rows, columns = ((torch.randint(0, 2 * padding + 1, (size,), generator=generator) for _ in range(2)) if padding
                     else (torch.zeros(size, dtype=torch.int64),) * 2)  # fmt: skip
    flips = (torch.rand(size, generator=generator) < 0.5 if data.horizontal_flip
             else torch.zeros(size, dtype=torch.bool))  # fmt: skip
    return order, rows, columns, flips


def per_image_batch(data, images: torch.Tensor, draws) -> torch.Tensor:
    """The naive way's transforms of ``images[order]`` with the given draws (``replayed_draws``):
    torchvision's functional pad, crop, hflip, to_tensor and normalize, one PIL image at a time."""
    from torchvision.transforms import functional

    mean, std = data.normalization
    height, width, padding = images.shape[2], images.shape[3], data.random_crop_padding
    pil = PerImage(images, torch.zeros(len(images), dtype=torch.int64), lambda image: image)
    out = []
    for i, row, column, flip in zip(*draws):
        image = functional.crop(functional.pad(pil[int(i)][0], padding), int(row), int(column), height, width)
        out.append(functional.normalize(functional.to_tensor(functional.hflip(image) if flip else image), mean, std))
    return torch.stack(out)


def check(ours: torch.Tensor, naive: torch.Tensor) -> float:
    """The module docstring's check of our first batch against the naive way's: the largest
    |difference|, AssertionError where it is above ``TOLERANCE`` (or the shapes differ)."""
    if ours.shape != naive.shape:
        raise AssertionError(f"our first batch has shape {tuple(ours.shape)}, the naive way's {tuple(naive.shape)}")
    difference = (ours - naive).abs().max().item()
    if not difference <= TOLERANCE:
        raise AssertionError(f"our first batch differs from the naive way's by {difference:.2e} (> {TOLERANCE})")
    return difference


def interleaved(loaders: dict[str, DataLoader], model: ImageClassifier,
                optimizer: torch.optim.Optimizer) -> dict[str, tuple[float, float]]:  # fmt: skip
    """Per loader, the median seconds per batch getting the batch and in the training step
    over ``N_BATCHES`` batches after ``WARMUP``, the loaders taking turns batch by batch."""
    batches = {name: iter(loader) for name, loader in loaders.items()}
    times = {name: ([], []) for name in loaders}
    for i in range(WARMUP + N_BATCHES):
        for name, source in batches.items():
            start = time.perf_counter()
            x, y = next(source)
            fetched = time.perf_counter()
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if i >= WARMUP:
                times[name][0].append(fetched - start)
                times[name][1].append(time.perf_counter() - fetched)
    return {name: (statistics.median(fetch), statistics.median(step)) for name, (fetch, step) in times.items()}


def main() -> dict:
    torch.manual_seed(0)
    data, options, source = reference_datamodule()
    start = time.perf_counter()
    data.setup("fit")
    images, labels = data._uint8_split("train")
    ours_loader = data.train_dataloader()
    ours_loader.sampler.set_epoch(0)
    setup_s = time.perf_counter() - start
    difference = check(next(iter(data.train_dataloader()))[0],
                       per_image_batch(data, images, replayed_draws(data, len(images))))  # fmt: skip
    channels, height, width = data.image_shape
    model = ImageClassifier(arch=options["arch"], num_classes=data.num_classes, in_channels=channels).train()
    # the config's optimiser (ImageClassifier.configure_optimizers without its schedule, which needs a Trainer);
    # float(): YAML reads 5e-4 as a string (jsonargparse converts it for train.py)
    optimizer = torch.optim.SGD(parameter_groups(model.net, float(options["weight_decay"])), lr=float(options["lr"]),
                                momentum=SGD_MOMENTUM, nesterov=True)  # fmt: skip
    transform = per_image_transforms(data, height, width)
    generator = torch.Generator().manual_seed(0)
    loaders = {
        "ours": ours_loader,
        "naive": DataLoader(PerImage(images, labels, transform), batch_size=data.batch_size, shuffle=True,
                            num_workers=0, generator=generator),
    }  # fmt: skip
    if isinstance(data, ImageFolderDataModule):
        from torchvision import datasets

        folder = datasets.ImageFolder(str(data.data_root / "train"), transform=transform)
        loaders["folder"] = DataLoader(folder, batch_size=data.batch_size, shuffle=True, num_workers=0,
                                       generator=generator)  # fmt: skip
    times = interleaved(loaders, model, optimizer)
    for name, (fetch, step) in times.items():
        print(f"{name:6s} loader {fetch * 1e3:7.2f} ms/batch  step {step * 1e3:7.2f} ms/batch", flush=True)
    (loader_s, step_s), (naive_s, naive_step_s) = times["ours"], times["naive"]
    folder_s, folder_step_s = times.get("folder", (None, None))

    def share(fetch: float | None, step: float | None) -> float | None:
        return None if fetch is None else round(fetch / (fetch + step), 4)

    result = {
        "loader_s_per_batch": round(loader_s, 5), "step_s_per_batch": round(step_s, 5),
        "loader_share": share(loader_s, step_s), "naive_loader_s_per_batch": round(naive_s, 5),
        "ratio": round(naive_s / loader_s, 2), "naive_loader_share": share(naive_s, naive_step_s),
        "folder_loader_s_per_batch": None if folder_s is None else round(folder_s, 5),
        "folder_loader_share": share(folder_s, folder_step_s), "data": source, "arch": options["arch"],
        "batch_size": data.batch_size, "n_batches": N_BATCHES, "warmup": WARMUP, "setup_s": round(setup_s, 1),
        "threads": torch.get_num_threads(), "max_first_batch_difference": difference,
    }  # fmt: skip
    print(json_text(result))
    return result


if __name__ == "__main__":
    main()
