"""ROAR core: remove_top against a naive float64 loop, the controls, estimator defaults,
the cached dataset maps and the remove-and-retrain datamodule (images and tabular)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from skimage.filters import sobel

from datamodules.images import FashionMNISTDataModule, _ArraysDataModule
from datamodules.roar import RemoveAndRetrainDataModule, model_inputs, remove_top, removed_count
from datamodules.tabular import FinancialDataModule
from foundation.errors import InputError
from evaluators.maps import explain
from evaluators.protocols.roar.estimators import estimator_maps, random_scores, sobel_scores
from lightning_modules.image_classifier import ImageClassifier, create_image_model
from lightning_modules.mlp import MLPClassifier

M32 = 0xFFFFFFFF


def numpy_uniform_hash(seed: int, index: np.ndarray, n: int, stream: int) -> np.ndarray:
    """An independent uint64 NumPy statement of datamodules.roar.uniform_hash."""
    def mix(x):
        x = x ^ (x >> np.uint64(16))
        x = (x * np.uint64(0x7FEB352D)) & np.uint64(M32)
        x = x ^ (x >> np.uint64(15))
        x = (x * np.uint64(0x846CA68B)) & np.uint64(M32)
        return x ^ (x >> np.uint64(16))

    h = np.uint64((seed * 0x9E3779B1 + stream) & M32)
    h = mix(h ^ (index.astype(np.uint64)[:, None] & np.uint64(M32)))
    return mix(h ^ np.arange(n, dtype=np.uint64)[None, :]) / 2.0**32


def naive_remove_top(x, scores, fraction, fill, unit, square, keep, seed=0, index=None):
    """One example at a time in float64: rank, ties by the example's hash order, replace."""
    x, scores = np.array(x, dtype=np.float64), np.asarray(scores, dtype=np.float64)
    index = np.arange(len(x)) if index is None else np.asarray(index)
    out = x.copy()
    for i in range(len(x)):
        s = scores[i] ** 2 if square else scores[i].copy()
        if unit == "pixel":
            s = s.sum(0)
        flat = s.reshape(-1)
        n = flat.size
        tie = numpy_uniform_hash(seed, index[i:i + 1], n, 0)[0]
        order = sorted(range(n), key=lambda j: (-flat[j], tie[j]))
        k = math.floor(fraction * n + 0.5)
        top = np.zeros(n, dtype=bool)
        top[order[:k]] = True
        replace = ~top if keep else top
        if unit == "pixel":
            replace = np.broadcast_to(replace.reshape(1, *s.shape), x[i].shape)
        replace = replace.reshape(x[i].shape)
        filler = np.broadcast_to(np.reshape(fill, (-1, 1, 1)) if x.ndim == 4 else fill, x[i].shape)
        out[i][replace] = filler[replace]
    return out


# --- remove_top ----------------------------------------------------------------------
@pytest.mark.parametrize("unit", ["element", "pixel"])
@pytest.mark.parametrize("square", [True, False])
@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.5, 1.0])
def test_remove_top_images_match_naive_loop(unit, square, keep, fraction):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 3, 5, 6, generator=gen, dtype=torch.float64)
    scores = torch.randn(4, 3, 5, 6, generator=gen, dtype=torch.float64)
    fill = torch.tensor([10.0, 20.0, 30.0], dtype=torch.float64)
    got = remove_top(x, scores, fraction, fill, unit=unit, square=square, keep=keep)
    np.testing.assert_array_equal(got.numpy(), naive_remove_top(x, scores, fraction, fill.numpy(), unit, square, keep))


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.45, 1.0])
def test_remove_top_rows_match_naive_loop(keep, fraction):
    gen = torch.Generator().manual_seed(2)
    x, scores = torch.randn(6, 11, generator=gen, dtype=torch.float64), torch.randn(6, 11, generator=gen)
    fill = torch.arange(11, dtype=torch.float64) + 100
    got = remove_top(x, scores, fraction, fill, square=False, keep=keep)
    np.testing.assert_array_equal(got.numpy(), naive_remove_top(x, scores, fraction, fill.numpy(), "element",
                                                                False, keep))  # fmt: skip


def test_remove_top_squares_before_ranking():
    x = torch.zeros(1, 4, dtype=torch.float64)
    scores = torch.tensor([[-3.0, 2.0, 1.0, 0.5]])
    assert remove_top(x, scores, 0.25, 1.0, square=True)[0].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert remove_top(x, scores, 0.25, 1.0, square=False)[0].tolist() == [0.0, 1.0, 0.0, 0.0]


def test_remove_top_ties_are_seeded_and_chunk_free():
    x = torch.arange(10 * 50, dtype=torch.float64).view(10, 50)
    constant = torch.ones_like(x)
    a = remove_top(x, constant, 0.3, -1.0, seed=5)
    assert torch.equal(a, remove_top(x, constant, 0.3, -1.0, seed=5))
    assert not torch.equal(a, remove_top(x, constant, 0.3, -1.0, seed=6))
    assert ((a == -1).sum(1) == removed_count(0.3, 50)).all()
    assert len({tuple((row == -1).nonzero().view(-1).tolist()) for row in a}) == 10  # a different draw per example
    part = remove_top(x[3:7], constant[3:7], 0.3, -1.0, seed=5, index=torch.arange(3, 7))
    assert torch.equal(part, a[3:7])
    np.testing.assert_array_equal(a.numpy(), naive_remove_top(x, constant, 0.3, np.full(50, -1.0), "element",
                                                              True, False, seed=5))  # fmt: skip


def test_remove_top_rounds_half_up_and_rejects_bad_input():
    assert [removed_count(t, 10) for t in (0.0, 0.04, 0.05, 0.25, 0.35, 1.0)] == [0, 0, 1, 3, 4, 10]
    x = torch.zeros(2, 4)
    with pytest.raises(InputError, match="fraction"):
        remove_top(x, x, 1.5, 0.0)
    with pytest.raises(InputError, match="pixel"):
        remove_top(x, x, 0.5, 0.0, unit="pixel")
    with pytest.raises(InputError, match="same shape"):
        remove_top(x, x[:, :3], 0.5, 0.0)
    with pytest.raises(InputError, match="fill"):
        remove_top(x, x, 0.5, torch.zeros(3))
    with pytest.raises(InputError, match="finite"):
        remove_top(x, torch.full((2, 4), float("nan")), 0.5, 0.0)


# --- controls and estimators --------------------------------------------------------
def test_hash_matches_numpy_and_random_scores_are_uniform():
    from datamodules.roar import uniform_hash

    index = torch.tensor([0, 7, 123456, 2**31 + 5])
    np.testing.assert_array_equal(uniform_hash(9, index, 300, 1).numpy(), numpy_uniform_hash(9, index.numpy(), 300, 1))
    u = random_scores(torch.zeros(2000, 1, 8, 8), torch.arange(2000), 0).double()
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005


def test_random_control_ignores_model_input_and_chunking():
    torch.manual_seed(0)
    x = torch.randn(12, 1, 6, 6)
    one, other = create_image_model("small_cnn", 3, 1), create_image_model("small_cnn", 3, 1)
    maps = estimator_maps(one, x, "random", chunk=5, seed=3)
    assert torch.equal(maps, estimator_maps(other, torch.randn(12, 1, 6, 6), "random", chunk=100, seed=3))
    assert not torch.equal(maps, estimator_maps(one, x, "random", seed=4))
    assert torch.equal(maps[4:9], estimator_maps(one, x[4:9], "random", seed=3, index=torch.arange(4, 9)))


def test_sobel_equals_skimage():
    x = torch.rand(2, 3, 9, 11, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    expected = np.stack([[sobel(x[i, c].numpy()) for c in range(3)] for i in range(2)])
    np.testing.assert_allclose(sobel_scores(x, torch.arange(2), 0).numpy(), expected, rtol=0, atol=1e-12)
    with pytest.raises(InputError, match="sobel"):
        estimator_maps(MLPClassifier(in_features=4), torch.zeros(2, 4), "sobel")


def test_estimators_explain_the_predicted_class_with_the_papers_defaults():
    torch.manual_seed(0)
    model = create_image_model("small_cnn", 4, 1).eval()
    x = torch.randn(6, 1, 8, 8)
    np.testing.assert_allclose(estimator_maps(model, x, "saliency"), explain(model, x, "saliency"), atol=1e-7)
    maps = estimator_maps(model, x, "smoothgrad_sq", seed=2)
    assert torch.equal(maps, estimator_maps(model, x, "smoothgrad_sq", seed=2))
    expected = explain(model, x, "smoothgrad_sq", nt_samples=15, seed=2)  # the paper's 15 samples
    fifty = explain(model, x, "smoothgrad_sq", seed=2)
    np.testing.assert_allclose(maps, expected, atol=1e-7)
    assert not torch.allclose(maps, fifty)


def test_image_estimates_do_not_depend_on_the_chunking():
    """Each image's noise comes from (seed, its index): chunks of 3, one chunk, or a part of
    the split with its indices give the same maps (before, the noise was drawn per chunk)."""
    torch.manual_seed(0)
    model = create_image_model("small_cnn", 4, 1).eval()
    x, background = torch.randn(7, 1, 8, 8), torch.randn(5, 1, 8, 8)
    for name, options in (("smoothgrad", {}), ("vargrad", {"nt_samples": 4}),
                          ("gradient_shap", {"baselines": background, "n_samples": 3})):  # fmt: skip
        whole = estimator_maps(model, x, name, seed=5, **options)
        torch.testing.assert_close(estimator_maps(model, x, name, chunk=3, seed=5, **options), whole,
                                   rtol=1e-5, atol=1e-6)  # fmt: skip
        torch.testing.assert_close(estimator_maps(model, x[3:], name, seed=5, index=torch.arange(3, 7), **options),
                                   whole[3:], rtol=1e-5, atol=1e-6)  # fmt: skip
        assert not torch.allclose(estimator_maps(model, x, name, seed=6, **options), whole)


def test_mean_aggregate_is_the_mean_of_z_scored_absolute_maps():
    torch.manual_seed(0)
    model = create_image_model("small_cnn", 4, 1).eval()
    x = torch.randn(5, 1, 8, 8)
    base = [explain(model, x, "saliency"), explain(model, x, "integrated_gradients", n_steps=25),
            explain(model, x, "guided_backprop")]  # fmt: skip
    z = []
    for m in base:
        flat = m.abs().double().flatten(1).numpy()
        z.append((flat - flat.mean(1, keepdims=True)) / flat.std(1, keepdims=True))
    got = estimator_maps(model, x, "agg:mean").double().flatten(1).numpy()
    np.testing.assert_allclose(got, np.mean(z, axis=0), atol=1e-5)


# --- a tiny in-memory image set ------------------------------------------------------
class TinyImages(_ArraysDataModule):
    name = "tiny"
    image_names = ["a", "b", "c"]

    def _arrays(self):
        rng = np.random.default_rng(0)
        return {s: (rng.integers(0, 256, (n, 3, 8, 8), dtype=np.uint8), rng.integers(0, 3, n))
                for s, n in (("train", 40), ("test", 24))}  # fmt: skip


def test_image_datamodule_modifies_train_and_test_and_trains(tmp_path):
    dm = TinyImages(batch_size=8, random_crop_padding=1, horizontal_flip=True)
    gen = torch.Generator().manual_seed(0)
    train_scores, test_scores = torch.randn(40, 3, 8, 8, generator=gen), torch.randn(24, 3, 8, 8, generator=gen)
    same = RemoveAndRetrainDataModule(dm, train_scores, test_scores, 0.0)
    for split in ("train", "test"):
        assert torch.equal(same.modified_split(split)[0], model_inputs(dm, split)[0])
    roar = RemoveAndRetrainDataModule(dm, train_scores, test_scores, 0.3)
    images = dm._uint8_split("train")[0]
    fill = images.double().mean((0, 2, 3)).round().to(torch.uint8)
    assert torch.equal(roar.fill, fill)
    for split, scores in (("train", train_scores), ("test", test_scores)):
        stored, _ = roar.stored_split(split)
        expected = naive_remove_top(dm._uint8_split(split)[0], scores, 0.3, fill.numpy(), "element", True, False)
        np.testing.assert_array_equal(stored.numpy(), expected)
    x, y = roar.modified_split("test")
    batch = next(iter(roar.test_dataloader()))
    assert torch.equal(batch[0], x[:len(batch[0])]) and torch.equal(batch[1], y[:len(batch[1])])
    assert roar.num_classes == 3 and roar.in_channels == 3
    model = ImageClassifier(arch="small_cnn", num_classes=3, in_channels=3)
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model, datamodule=roar)
    trainer.test(model, datamodule=roar, verbose=False)


def test_tabular_datamodule_replaces_features_by_the_training_mean():
    dm = FinancialDataModule("german")
    x_train, _ = dm.train_tensors
    x_test, _ = dm.test_tensors
    gen = torch.Generator().manual_seed(0)
    train_scores, test_scores = torch.randn(x_train.shape, generator=gen), torch.randn(x_test.shape, generator=gen)
    assert torch.equal(RemoveAndRetrainDataModule(dm, train_scores, test_scores, 0.0).test_tensors[0], x_test)
    kar = RemoveAndRetrainDataModule(dm, train_scores, test_scores, 0.5, keep=True)
    modified, _ = kar.test_tensors
    mean = x_train.double().mean(0).float()
    changed = modified != x_test
    n = x_test.shape[1]
    assert (changed.sum(1) <= n - removed_count(0.5, n)).all()
    expected = naive_remove_top(x_test, test_scores, 0.5, mean.double().numpy(), "element", True, True)
    np.testing.assert_allclose(modified.numpy(), expected, atol=1e-6)
    assert kar.num_features == dm.num_features and len(next(iter(kar.train_dataloader()))[0]) == dm.batch_size


@pytest.mark.slow
def test_fashion_mnist_datamodule(tmp_path):
    """Fashion-MNIST: fraction 0 leaves it unchanged; 30 % replaces 235 of 784 values per image
    by the training mean rounded to uint8 (72.94 -> 73: 0.06/255, 0.0007 in normalised units)."""
    dm = FashionMNISTDataModule(batch_size=256)
    x_test, _ = model_inputs(dm, "test")
    gen = torch.Generator().manual_seed(0)
    train_scores = torch.rand(60000, 1, 28, 28, generator=gen)
    test_scores = torch.rand(10000, 1, 28, 28, generator=gen)
    assert torch.equal(RemoveAndRetrainDataModule(dm, train_scores, test_scores, 0.0).modified_split("test")[0],
                       x_test)  # fmt: skip
    roar = RemoveAndRetrainDataModule(dm, train_scores, test_scores, 0.3)
    exact = dm._uint8_split("train")[0].double().mean()
    assert roar.fill.tolist() == [round(float(exact))]
    mean, std = dm.normalization
    assert abs(float(roar.fill) / 255 - mean[0]) / std[0] < 0.5 / 255 / std[0]
    stored, _ = roar.stored_split("test")
    top = test_scores.flatten(1).argsort(1, descending=True)[:, :235]
    assert (stored.flatten(1).gather(1, top) == roar.fill).all()
    assert ((stored.flatten(1) == roar.fill).sum(1) >= 235).all()
    x, _ = next(iter(roar.train_dataloader()))
    assert x.shape == (256, 1, 28, 28)


class StoredTwice(pl.LightningDataModule):
    """A datamodule kind ROAR has no branch for: rows stored as they are, served doubled."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(1)
        sizes = {"train": 21, "test": 9}
        self.splits = {s: (torch.randn(n, 6, generator=gen), torch.arange(n) % 2) for s, n in sizes.items()}

    def stored_split(self, split):
        return self.splits[split]

    def as_model_inputs(self, x, y):
        return 2 * x, y

    def stored_fill(self, x):
        return x.median(0).values


def test_any_datamodule_owning_its_stored_splits_is_removed_from():
    """ROAR reads the splits, model inputs and fill through methods the datamodule owns, so a
    kind it does not know needs no edit in datamodules.roar; an object without them is named."""
    dm = StoredTwice()
    gen = torch.Generator().manual_seed(2)
    scores = {s: torch.randn(dm.splits[s][0].shape, generator=gen) for s in ("train", "test")}
    roar = RemoveAndRetrainDataModule(dm, scores["train"], scores["test"], 0.5)
    x_test, y_test = dm.splits["test"]
    fill = np.median(dm.splits["train"][0].numpy().astype(np.float64), axis=0)  # 21 rows: one middle value
    expected = naive_remove_top(x_test, scores["test"], 0.5, fill, "element", True, False)
    x, y = roar.modified_split("test")
    np.testing.assert_allclose(x.numpy(), 2 * expected, atol=1e-6)
    assert torch.equal(y, y_test) and torch.equal(model_inputs(dm, "test")[0], 2 * x_test)
    with pytest.raises(InputError, match="datamodule object; expected one that serves its splits"):
        model_inputs(object(), "test")
