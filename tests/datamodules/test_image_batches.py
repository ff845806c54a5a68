"""Training order, augmentation and in-memory batches (datamodules/image_batches.py): an epoch's
generator from NumPy's ``SeedSequence([seed, epoch, stream])``, its order a ``randperm`` of it,
the crops and flips against a per-image NumPy loop, the channel statistics against NumPy's
float64 mean and std whatever the chunking, and batches normalised by hand. The datamodules'
loaders through them: test_images.py."""

from __future__ import annotations

import numpy as np
import torch

from datamodules.image_batches import (AUGMENT_STREAM, ORDER_STREAM, EpochShuffle, InMemoryImageBatches,
                                       augment_batch, channel_stats, epoch_generator)  # fmt: skip
from tests.datamodules.test_images import seeded as by_hand  # the generator the docstring promises


def test_an_epochs_order_is_a_randperm_of_its_own_generator():
    assert torch.equal(torch.rand(3, generator=epoch_generator(4, 2, AUGMENT_STREAM)),
                       torch.rand(3, generator=by_hand(4, 2, AUGMENT_STREAM)))  # fmt: skip
    told = []
    sampler = EpochShuffle(9, 4, told.append)
    assert len(sampler) == 9 and list(sampler) == torch.randperm(9, generator=by_hand(4, 0, ORDER_STREAM)).tolist()
    sampler.set_epoch(3)
    assert told == [3] and list(sampler) == torch.randperm(9, generator=by_hand(4, 3, ORDER_STREAM)).tolist()


def test_augment_batch_equals_a_per_image_loop():
    images = torch.randint(0, 256, (6, 3, 5, 7), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    out = augment_batch(images, padding=2, flip=True, generator=torch.Generator().manual_seed(11))
    draws = torch.Generator().manual_seed(11)
    oy = torch.randint(0, 5, (6,), generator=draws).tolist()
    ox = torch.randint(0, 5, (6,), generator=draws).tolist()
    flips = (torch.rand(6, generator=draws) < 0.5).tolist()
    assert any(flips) and not all(flips)
    for b in range(6):
        padded = np.pad(images[b].numpy(), ((0, 0), (2, 2), (2, 2)))
        crop = padded[:, oy[b] : oy[b] + 5, ox[b] : ox[b] + 7]
        if flips[b]:
            crop = crop[:, :, ::-1]
        np.testing.assert_array_equal(out[b].numpy(), crop)


def test_channel_statistics_are_numpys_whatever_the_chunking():
    images = torch.randint(0, 256, (10, 3, 4, 5), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    scaled = images.numpy().astype(np.float64) / 255
    for chunk in (3, 4096):
        mean, std = channel_stats(images, chunk)
        np.testing.assert_allclose(mean, scaled.mean(axis=(0, 2, 3)), rtol=1e-12)
        np.testing.assert_allclose(std, scaled.std(axis=(0, 2, 3)), rtol=1e-10)


def test_batches_are_normalised_and_augmented_from_the_epochs_stream():
    images = torch.randint(0, 256, (5, 2, 3, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    labels = torch.arange(5)
    plain = InMemoryImageBatches(images, labels, [0.5, 0.25], [0.2, 0.4])
    x, y = plain.__getitems__([4, 1])
    expected = (images[[4, 1]].double() / 255 - torch.tensor([0.5, 0.25]).double()[:, None, None]) / \
        torch.tensor([0.2, 0.4]).double()[:, None, None]  # fmt: skip
    torch.testing.assert_close(x.double(), expected, rtol=0, atol=1e-5)
    assert y.tolist() == [4, 1] and len(plain) == 5 and torch.equal(plain[1][0], x[1])
    augmented = InMemoryImageBatches(images, labels, [0.0, 0.0], [1.0, 1.0], padding=1, flip=True, seed=2)
    augmented.set_epoch(1)
    got = augmented.__getitems__([0, 1, 2])[0]
    torch.testing.assert_close(got, augment_batch(images[:3], 1, True, by_hand(2, 1, AUGMENT_STREAM)).float() / 255)
