"""Training order and augmentation drawn per epoch, and batches served from uint8 images in memory."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

ORDER_STREAM, AUGMENT_STREAM = 0, 1  # the two generators of an epoch (see epoch_generator)


# --- per-epoch draws -----------------------------------------------------------------
def epoch_generator(seed: int, epoch: int, stream: int) -> torch.Generator:
    """A CPU generator for one epoch's draws of one kind (``ORDER_STREAM``, ``AUGMENT_STREAM``),
    seeded with the first 64-bit word of NumPy's ``SeedSequence([seed, epoch, stream])``:
    a pure function of the three, and distinct triples give unrelated streams (``seed + epoch``
    would give seed 1's epoch 0 to seed 0's epoch 1)."""
    state = np.random.SeedSequence([seed, epoch, stream]).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


class EpochShuffle(Sampler[int]):
    """A random order of ``size`` items, epoch e's being ``randperm(size)`` from
    ``epoch_generator(seed, e, ORDER_STREAM)``.

    Lightning calls ``set_epoch(e)`` at the start of every training epoch (under DDP through
    the ``DistributedSamplerWrapper`` it puts around this sampler, which forwards it), on a
    resumed run too; ``on_epoch(e)`` is then called, for draws that must follow the epoch
    (the in-memory batches' augmentation). Without ``set_epoch`` every pass is epoch 0's,
    as with torch's ``DistributedSampler``."""

    def __init__(self, size: int, seed: int, on_epoch=None) -> None:
        self.size, self.seed, self.on_epoch = size, seed, on_epoch
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if self.on_epoch is not None:
            self.on_epoch(epoch)

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        yield from torch.randperm(self.size, generator=epoch_generator(self.seed, self.epoch, ORDER_STREAM)).tolist()


# --- batches from memory -------------------------------------------------------------
def augment_batch(
    images: torch.Tensor, padding: int, flip: bool, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Random crop with zero ``padding`` and horizontal flip of a (B, C, H, W) batch, per image.

    Draws, in this order from ``generator``: the vertical offsets ``randint(0, 2p + 1,
    (B,))``, the horizontal offsets likewise (when ``padding > 0``), then ``rand(B) < 0.5``
    for the flips (when ``flip``). Image b is cropped from the padded image at rows
    ``oy[b]:oy[b] + H`` and columns ``ox[b]:ox[b] + W`` (torchvision's ``RandomCrop(size,
    padding=p)``), then mirrored left-right if drawn. Works on any dtype (uint8 here).

    The crops are one indexing of a view holding every crop of every image, (B, C, 2p + 1,
    2p + 1, H, W) by ``unfold``: each image's crop is copied as whole rows (a gather of
    single pixels was 2-3 times slower on one thread, and 10 times slower on two threads of
    a busy machine).
    """
    batch, height, width = images.shape[0], images.shape[2], images.shape[3]
    if padding > 0:
        padded = torch.nn.functional.pad(images, (padding, padding, padding, padding))
        oy = torch.randint(0, 2 * padding + 1, (batch,), generator=generator)
        ox = torch.randint(0, 2 * padding + 1, (batch,), generator=generator)
        crops = padded.unfold(2, height, 1).unfold(3, width, 1)  # a view: no copy
        images = crops[torch.arange(batch), :, oy, ox]
    if flip:
        flips = torch.rand(batch, generator=generator) < 0.5
        images = torch.where(flips[:, None, None, None], images.flip(-1), images)
    return images


def channel_stats(images: torch.Tensor, chunk: int = 4096) -> tuple[list[float], list[float]]:
    """Per-channel mean and standard deviation (population, ddof=0) of uint8 images / 255.

    Sums of pixels and of their squares are exact integers, so the float64 result does
    not depend on the order or the chunking."""
    channels = images.shape[1]
    total = torch.zeros(channels, dtype=torch.int64)
    squares = torch.zeros(channels, dtype=torch.int64)
    for start in range(0, len(images), chunk):
        part = images[start : start + chunk].to(torch.int64)
        total += part.sum(dim=(0, 2, 3))
        squares += (part * part).sum(dim=(0, 2, 3))
    count = images.numel() // channels
    mean = total.double() / (255.0 * count)
    var = squares.double() / (255.0**2 * count) - mean * mean
    return mean.tolist(), var.clamp_min(0).sqrt().tolist()


class InMemoryImageBatches(Dataset):
    """uint8 images (N, C, H, W) and labels served a batch at a time, in the calling process.

    ``__getitems__`` indexes the whole batch at once, augments it (``augment_batch``) and
    normalises it to float32: ``(x / 255 - mean) / std`` per channel. The augmentation of
    epoch e draws, batch after batch, from ``epoch_generator(seed, e, AUGMENT_STREAM)``,
    restarted by ``set_epoch(e)`` (called by the loader's :class:`EpochShuffle`)."""

    def __init__(self, images, labels, mean, std, padding: int = 0, flip: bool = False, seed: int = 0) -> None:
        self.images, self.labels = images, labels
        self.mean = torch.tensor(mean, dtype=torch.float32)[:, None, None]
        self.std = torch.tensor(std, dtype=torch.float32)[:, None, None]
        self.padding, self.flip, self.seed = padding, flip, seed
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        self.generator = epoch_generator(self.seed, epoch, AUGMENT_STREAM)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.as_tensor(indices, dtype=torch.int64)
        x = self.images[index]
        if self.padding or self.flip:
            x = augment_batch(x, self.padding, self.flip, self.generator)
        return (x.to(torch.float32) / 255.0 - self.mean) / self.std, self.labels[index]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.__getitems__([i])
        return x[0], y[0]


def _whole_batch(batch):
    return batch
