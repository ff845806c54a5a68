"""The options and serving shared by the image datamodules (datamodules/image_base.py), on a
minimal in-memory subclass: the served images against (uint8 / 255 − mean) / std by hand in
float64 with NumPy's per-channel statistics, ``subset`` as a seeded ``randperm`` kept in split
order, the probe's evenly spaced images, the evaluation split, and the options refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datamodules.image_base import ImageDataModule
from foundation.errors import InputError


class Arrays(ImageDataModule):
    """Images held in memory: ``splits`` {split: (uint8 (N, C, H, W), labels (N,))}."""

    name = "arrays"

    def __init__(self, splits: dict, **options) -> None:
        super().__init__(**options)
        self.splits = splits

    @property
    def classes(self):
        return ["a", "b", "c"]

    @property
    def full_split_sizes(self):
        return {s: len(y) for s, (_, y) in self.splits.items()}

    @property
    def image_shape(self):
        return tuple(next(iter(self.splits.values()))[0].shape[1:])

    def _uint8_split(self, split):
        return self.splits[split]


def arrays(sizes=(("train", 20), ("test", 9)), seed=0):
    rng = np.random.default_rng(seed)
    return {s: (torch.from_numpy(rng.integers(0, 256, (n, 3, 4, 5), dtype=np.uint8)),
                torch.from_numpy(rng.integers(0, 3, n))) for s, n in sizes}  # fmt: skip


def by_hand(images: torch.Tensor, mean, std) -> np.ndarray:
    return (images.numpy().astype(np.float64) / 255 - np.array(mean)[:, None, None]) / np.array(std)[:, None, None]


def test_served_images_are_normalised_with_the_training_splits_statistics():
    splits = arrays()
    data = Arrays(splits, eval_batch_size=4)
    train = splits["train"][0].numpy().astype(np.float64) / 255
    mean, std = train.mean(axis=(0, 2, 3)), train.std(axis=(0, 2, 3))
    np.testing.assert_allclose(data.normalization[0], mean, rtol=1e-12)
    np.testing.assert_allclose(data.normalization[1], std, rtol=1e-12)
    x, y = (torch.cat(t) for t in zip(*data.test_dataloader()))
    np.testing.assert_allclose(x.numpy(), by_hand(splits["test"][0], mean, std), atol=1e-5)
    assert torch.equal(y, splits["test"][1])
    served_mean, served_std = data.standardisation
    raw = x * served_std + served_mean  # raw = served * std + mean: the pixels / 255
    np.testing.assert_allclose(raw.numpy(), splits["test"][0].numpy() / 255, atol=1e-5)
    assert data.stored_fill(splits["train"][0]).tolist() == [round(m * 255) for m in mean]


def test_the_options_mean_and_std_replace_the_statistics():
    splits = arrays()
    data = Arrays(splits, mean=[0.5, 0.4, 0.3], std=[0.2, 0.25, 0.5])
    (x, _), = [next(iter(data.eval_dataloader("train")))]
    np.testing.assert_allclose(x.numpy(), by_hand(splits["train"][0], [0.5, 0.4, 0.3], [0.2, 0.25, 0.5]), atol=1e-5)
    with pytest.raises(InputError, match=r"option mean=\[0.5\]: 1 values; expected 3 \(one per channel\)"):
        Arrays(splits, mean=[0.5], std=[0.2]).normalization


def test_a_subset_is_a_seeded_choice_kept_in_split_order():
    splits = arrays()
    data = Arrays(splits, subset={"train": 6}, seed=3)
    chosen = torch.randperm(20, generator=torch.Generator().manual_seed(3))[:6].sort().values
    assert torch.equal(data.subset_indices("train"), chosen) and data.subset_indices("test") is None
    images, labels = data.split_images("train")
    assert torch.equal(images, splits["train"][0][chosen]) and torch.equal(labels, splits["train"][1][chosen])
    assert data.split_sizes == {"train": 6, "test": 9}
    assert data.describe() == {"dataset": "arrays", "source": "images", "classes": 3, "train": 6, "val": 0,
                               "test": 9, "image": "3x4x5", "subset_of": {"train": 20}}  # fmt: skip


def test_the_probe_takes_every_kth_image_of_the_evaluation_split():
    splits = arrays()
    data = Arrays(splits, eval_batch_size=2)
    x, y = data.probe(3)  # 9 test images: k = 3, images 0, 3, 6
    mean, std = data.normalization
    np.testing.assert_allclose(x.numpy(), by_hand(splits["test"][0][[0, 3, 6]], mean, std), atol=1e-5)
    assert torch.equal(y, splits["test"][1][[0, 3, 6]])


def test_the_evaluation_split_is_test_else_val_and_missing_splits_are_named():
    only_val = Arrays(arrays((("train", 4), ("val", 3))))
    assert only_val.eval_split == "val" and only_val.val_dataloader is not None
    assert Arrays(arrays()).val_dataloader is None
    no_train = Arrays(arrays((("test", 3),)))
    assert no_train.stats_split == "test"
    with pytest.raises(InputError, match="no train/ split for stage 'fit'"):
        no_train.setup("fit")
    with pytest.raises(InputError, match="no test/ or val/ split for stage 'test'"):
        Arrays(arrays((("train", 3),))).setup("test")
    with pytest.raises(InputError, match=r"no 'val' split; it has \['test', 'train'\]"):
        Arrays(arrays()).eval_dataloader("val")


@pytest.mark.parametrize("options, message", [
    ({"batch_size": 0}, "option batch_size=0; expected a positive integer"),
    ({"seed": -1}, "option seed=-1; expected a non-negative integer"),
    ({"mean": [0.5, 0.5, 0.5]}, "options mean and std: give both"),
    ({"mean": [0.5] * 3, "std": [0.1, 0.0, 0.1]}, "option std=.*expected positive numbers"),
    ({"subset": {"training": 3}}, "option subset="),
])  # fmt: skip
def test_bad_options_are_named(options, message):
    with pytest.raises(InputError, match=message):
        Arrays(arrays(), **options)
