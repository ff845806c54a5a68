"""ImagePopulation: member i trained in the population equals ImageClassifier(seed=s_i)
trained alone on the same batches (float64: 1e-10; float32: the stated tolerance), BatchNorm
running statistics included, with shared and per-member data orders and per-member learning
rates; the one-file save/load round trip; train.py on the Fashion-MNIST population config."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

import train
from datamodules import ImageFolderDataModule, InputError
from lightning_modules import (
    ImageClassifier,
    ImagePopulation,
    load_image_member,
    load_image_population,
    save_image_population,
)
from tests.datamodules.test_images import make_folder

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
SEEDS = [3, 0, 7]
# The largest difference between a member and the model alone after 6 steps of ResNet-8
# (BatchNorm) on 8x8 images: vmap's grouped convolutions sum in another order than a model's
# own (stacking="loop": none at all). float64: measured ~4e-16; float32 (SGD): measured ~2e-7.
TOLERANCE = {"64-true": 1e-10, "32-true": 2e-5}


def trainer(precision: str, **kwargs) -> pl.Trainer:
    return pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                      precision=precision, **kwargs)  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """12 random 8x8 RGB images (3 classes) in train/ and test/."""
    root = tmp_path_factory.mktemp("images")
    make_folder(root / "data")
    return root


def datamodule(folder: Path, seed: int = 0, augment: bool = False) -> ImageFolderDataModule:
    return ImageFolderDataModule(root=str(folder / "data"), cache_dir=str(folder / "cache"), batch_size=4,
                                 eval_batch_size=6, seed=seed, random_crop_padding=int(augment),
                                 horizontal_flip=augment)  # fmt: skip


def largest_difference(a: torch.nn.Module, b: torch.nn.Module) -> float:
    """Over every parameter and buffer (BatchNorm running statistics and counts included)."""
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return max((sa[k].double() - sb[k].double()).abs().max().item() for k in sa)


CASES = {  # name: (precision, population options)
    "vmap-float64": ("64-true", {"stacking": "vmap"}),
    "loop-float64": ("64-true", {"stacking": "loop"}),
    "vmap-float32": ("32-true", {"stacking": "vmap"}),
    "member-lrs-adamw": ("64-true", {"stacking": "vmap", "optimizer": "adamw", "member_lrs": [1e-3, 3e-3, 1e-2]}),
    "per-member-order-augmented": ("64-true", {"stacking": "vmap", "data_order": "per_member"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_member_equals_the_classifier_trained_alone(folder, case):
    precision, options = CASES[case]
    per_member = options.get("data_order") == "per_member"
    population = ImagePopulation(arch="resnet8", num_classes=3, seeds=SEEDS, lr=0.05, weight_decay=1e-3,
                                 warmup_epochs=0.5, **options)  # fmt: skip
    start = [population.member(i) for i in range(len(SEEDS))]
    trainer(precision, max_epochs=2).fit(population, datamodule=datamodule(folder, augment=per_member))
    for i, seed in enumerate(SEEDS):
        alone = ImageClassifier(**population.member_kwargs(i))
        assert largest_difference(alone, start[i]) == 0.0  # initialised as ImageClassifier(seed=s_i)
        order_seed = seed if per_member else 0
        trainer(precision, max_epochs=2).fit(alone, datamodule=datamodule(folder, order_seed, per_member))
        member = population.member(i)
        assert largest_difference(member, start[i]) > 1e-3  # it trained
        difference = largest_difference(member.net.double(), alone.net.double())
        if options["stacking"] == "loop":  # computed as alone, operation for operation
            assert difference == 0.0, (case, i)
        assert difference < TOLERANCE[precision], (case, i)


def test_members_differ_from_another_members_training(folder):
    """The test above can fail: member 0 is far from member 1's seed trained alone, and from
    itself trained with another member's learning rate."""
    population = ImagePopulation(arch="resnet8", num_classes=3, seeds=SEEDS, lr=0.05, member_lrs=[0.05, 0.1, 0.2])
    trainer("64-true", max_epochs=1).fit(population, datamodule=datamodule(folder))
    other_lr = ImageClassifier(**{**population.member_kwargs(0), "lr": 0.1})
    trainer("64-true", max_epochs=1).fit(other_lr, datamodule=datamodule(folder))
    assert largest_difference(population.member(0).net.double(), other_lr.net.double()) > 1e-4


def test_vmap_and_loop_give_the_same_logits():
    population = ImagePopulation(arch="resnet8", num_classes=4, seeds=[1, 2], stacking="vmap").double().eval()
    x = torch.randn(2, 5, 3, 8, 8, dtype=torch.float64)  # one batch per member
    stacked = population(x)
    population.hparams.stacking = "loop"
    assert torch.allclose(stacked, population(x), rtol=0, atol=1e-12)
    assert torch.allclose(population(x[0])[1], population.member(1).double().eval()(x[0]), rtol=0, atol=1e-12)


def test_save_load_round_trip(tmp_path):
    population = ImagePopulation(arch="resnet8", num_classes=3, seeds=[5, 1], member_lrs=[0.1, 0.2], stacking="loop")
    with torch.no_grad():  # running statistics that are not the initial ones
        population.train()(torch.randn(4, 3, 8, 8))
    path = tmp_path / "population.pt"
    save_image_population(path, population, [0.5, 0.75], {"note": "round trip"})
    loaded, payload = load_image_population(path)
    assert loaded.seeds == [5, 1] and loaded.init_kwargs() == population.init_kwargs()
    assert payload["member_test_acc"] == [0.5, 0.75] and payload["metadata"]["note"] == "round trip"
    assert largest_difference(loaded, population) == 0.0
    member = load_image_member(path, 1)
    assert isinstance(member, ImageClassifier) and member.hparams.seed == 1 and member.hparams.lr == 0.2
    assert largest_difference(member, population.member(1)) == 0.0
    with pytest.raises(InputError, match="member index 2"):
        load_image_member(path, 2)
    torch.save({"format": "something else"}, tmp_path / "other.pt")
    with pytest.raises(InputError, match="not a population file"):
        load_image_population(tmp_path / "other.pt")


def test_from_classifiers_trained_apart():
    models = [ImageClassifier(arch="small_cnn", num_classes=3, in_channels=1, seed=s, lr=lr)
              for s, lr in ((4, 0.1), (9, 0.3))]  # fmt: skip
    population = ImagePopulation.from_classifiers(models, stacking="loop")
    assert population.seeds == [4, 9] and population.lrs == [0.1, 0.3]
    for i, model in enumerate(models):
        assert largest_difference(population.member(i), model) == 0.0
    with pytest.raises(InputError, match="expected one architecture"):
        ImagePopulation.from_classifiers([models[0], ImageClassifier(arch="resnet8", num_classes=3, in_channels=1)])


@pytest.mark.parametrize("options, message", [
    ({"seeds": [1, 1]}, "repeated seeds"),
    ({"size": 0}, "option size=0"),
    ({"size": 2, "member_lrs": [0.1]}, "option member_lrs"),
    ({"stacking": "grouped"}, "option stacking"),
    ({"data_order": "random"}, "option data_order"),
    ({"optimizer": "adam"}, "option optimizer"),
])  # fmt: skip
def test_bad_options_name_the_option(options, message):
    with pytest.raises(InputError, match=message):
        ImagePopulation(arch="small_cnn", **options)


def test_gradient_clipping_is_refused(folder):
    population = ImagePopulation(arch="small_cnn", num_classes=3, size=2)
    with pytest.raises(InputError, match="gradient_clip_val"):
        trainer("32-true", max_epochs=1, gradient_clip_val=1.0).fit(population, datamodule=datamodule(folder))


@pytest.mark.skipif(not FASHION_MNIST.is_dir(), reason="Fashion-MNIST (Debian package dataset-fashion-mnist) absent")
def test_train_py_runs_the_fashion_mnist_population_config(tmp_path):
    metrics = train.main([
        "--config", "configs/images/fashion_mnist_population.yaml", "--model.size", "2", "--trainer.max_epochs",
        "1", "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "0", "--trainer.limit_test_batches",
        "1", "--log_to", "none", "--output_dir", str(tmp_path), "--run_name", "pop",
        "--trainer.enable_progress_bar", "false",
    ])  # fmt: skip
    run_dir = tmp_path / "fashion_mnist" / "pop"
    population, payload = load_image_population(run_dir / "population.pt")
    assert population.seeds == [0, 1] and population.hparams.in_channels == 1  # linked from the data
    assert payload["member_test_acc"] == metrics["member_test_acc"] and len(metrics["member_test_acc"]) == 2
    assert (run_dir / "members.csv").read_text().count("\n") == 3
    member = load_image_member(run_dir / "population.pt", 1)
    assert member(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
