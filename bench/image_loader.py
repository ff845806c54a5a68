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
        tensor, augmented and normalised as whole batches (``datamodules/images.py``);
(naive) the torchvision way: a Dataset turning one image at a time into a PIL image
        (as ``torchvision.datasets.CIFAR10`` does with its decoded arrays), then
        ``RandomCrop(32, padding=4)``, ``RandomHorizontalFlip``, ``ToTensor``,
        ``Normalize``, collated by a ``DataLoader`` with ``num_workers=0``;
(folder) with CIFAR-10 also ``torchvision.datasets.ImageFolder`` over the unpacked JPEG
        files with the same transforms (decoding every image every epoch).

The decoding into the cache (once, about 20 s for CIFAR-10) is not timed; a run with
the cache filled reads it back in ``setup_s``. The last line is one JSON object:
``loader_s_per_batch``, ``step_s_per_batch``, ``loader_share`` (loader / (loader +
step)) of ours, ``naive_loader_s_per_batch``, ``ratio`` = naive / ours loader time,
``folder_loader_s_per_batch`` (null without CIFAR-10), the shares of the other two and
the setting.
"""

from __future__ import annotations

import json
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
from datamodules.images import FashionMNISTDataModule, ImageFolderDataModule  # noqa: E402
from lightning_modules.image_classifier import SGD_MOMENTUM, ImageClassifier, parameter_groups  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("RELIABLE_EXPLANATIONS_DATA", ROOT.parent / "shared" / "data"))
CONFIG = ROOT / "configs" / "images" / "cifar10_resnet8.yaml"
WARMUP, N_BATCHES = 5, 30


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
        "threads": torch.get_num_threads(),
    }  # fmt: skip
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
