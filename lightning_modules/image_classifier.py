"""Image classifiers: a registry of networks by name and one LightningModule that trains them.

``create_image_model(name, num_classes, in_channels, small_input_stem)`` builds, with
random weights (never a download):

* ``resnet8``, ``resnet20``: the CIFAR residual networks of He et al. 2016, §4.2 (a 3x3
  stem with 16 channels, three stages of n basic blocks of widths 16/32/64 with stride 2
  at the start of stages 2 and 3, global average pool, linear; n=1 for ResNet-8, n=3
  for ResNet-20). Shortcuts are option A, the paper's choice for CIFAR: the identity,
  and where the shape changes the input subsampled by 2 and zero-padded in channels, so
  shortcuts add no parameters (ResNet-20: 269,722 parameters for 10 classes, the
  paper's 0.27 M).
* ``small_cnn``: two 3x3 convolutions (32 and 64 channels, each followed by ReLU and
  2x2 max-pooling), an adaptive average pool to 7x7 (skipped for 28x28 inputs, see
  :class:`AvgPoolTo`) and a linear layer: for quick MNIST / Fashion-MNIST runs.
* ``mlp``: a multilayer perceptron on the flattened pixels (hidden layers of 256 and 128
  ReLU units, inputs pooled to 28x28 by :class:`AvgPoolTo`): Watson et al.'s MNIST MLPs.
* ``resnet18``, ``resnet34``, ``resnet50``: torchvision's ImageNet ResNets
  (``weights=None``; each ReLU of a block a module of its own, for Captum's DeepLift).
  ``small_input_stem`` makes the first convolution 3x3 with stride 1 and drops the
  max-pool, for 32x32 inputs such as CIFAR-10. Their average pool is a plain mean over
  the spatial dimensions (deterministic on CUDA, unlike ``AdaptiveAvgPool2d(1)``).
* any other name: ``timm.create_model(name, pretrained=False, num_classes=..., in_chans=...)``;
  names with a ``:`` (``hf-hub:...``, ``local-dir:...``: a download or a folder) are refused.

Mixed precision is the Trainer's option, not the model's: ``--trainer.precision
bf16-mixed`` runs the forward pass under autocast (the loss and the metrics are computed
in float32).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Literal

import pytorch_lightning as pl
from pytorch_lightning.utilities import rank_zero_warn
import torch
from torch import nn
from torch.nn import functional as F
from torchvision.models import resnet as tv_resnet

from foundation.errors import InputError
from foundation.modality import IMAGES
from foundation.registry import Registry
from lightning_modules.finite import check_outputs

Optimizer = Literal["sgd", "adamw"]
Schedule = Literal["onecycle", "cosine", "none"]
OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("onecycle", "cosine", "none")
SGD_MOMENTUM = 0.9
ONECYCLE_DIV_FACTOR = 25.0  # the first learning rate is lr / 25 (torch's OneCycleLR default)
ONECYCLE_FINAL_DIV_FACTOR = 1e4  # the last is lr / 25 / 1e4


# --- the networks ----------------------------------------------------------------------
class GlobalAvgPool(nn.Module):
    """The mean over the spatial dimensions, keeping them as 1x1 (as ``AdaptiveAvgPool2d(1)``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(-2, -1), keepdim=True)


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers and an option-A shortcut (He et al. 2016, §4.2): the identity,
    or where the block halves the resolution and widens the channels, the input taken at
    every second pixel and zero-padded to the new width. Each ReLU is its own ``nn.ReLU``
    module, so that Captum's GuidedBackprop and DeepLift, which act through module hooks
    and refuse a module used twice, apply their rules there."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.relu1, self.relu2 = nn.ReLU(), nn.ReLU()
        self.stride, self.pad = stride, out_channels - in_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        shortcut = x[:, :, :: self.stride, :: self.stride] if self.stride > 1 else x
        if self.pad:
            shortcut = F.pad(shortcut, (0, 0, 0, 0, 0, self.pad))
        return self.relu2(out + shortcut)


class CifarResNet(nn.Module):
    """He et al.'s CIFAR ResNet with ``blocks`` basic blocks per stage (depth 6n + 2)."""

    def __init__(self, blocks: int, num_classes: int, in_channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU()
        stages, width = [], 16
        for stage, out in enumerate((16, 32, 64)):
            for b in range(blocks):
                stages.append(BasicBlock(width, out, 2 if stage > 0 and b == 0 else 1))
                width = out
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():  # He et al.'s initialisation (their ref. [13])
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.relu(self.bn1(self.conv1(x))))
        return self.fc(x.mean(dim=(-2, -1)))


class AvgPoolTo(nn.Module):
    """``AdaptiveAvgPool2d(size)``, skipped where the input is already ``size`` x ``size``:
    PyTorch has no deterministic CUDA backward for adaptive pooling, so 28x28 inputs to
    ``small_cnn`` train on a GPU under ``trainer.deterministic: true`` (other sizes do not)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2:] == (self.size, self.size):
            return x
        return F.adaptive_avg_pool2d(x, self.size)


def small_cnn(num_classes: int, in_channels: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        AvgPoolTo(7), nn.Flatten(), nn.Linear(64 * 7 * 7, num_classes),
    )  # fmt: skip


def image_mlp(num_classes: int, in_channels: int) -> nn.Sequential:
    return nn.Sequential(
        AvgPoolTo(28), nn.Flatten(), nn.Linear(in_channels * 28 * 28, 256), nn.ReLU(),
        nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, num_classes),
    )  # fmt: skip


class SeparateReluBasicBlock(tv_resnet.BasicBlock):
    """torchvision's ``BasicBlock`` with its second ReLU a module of its own (torchvision
    calls one ``self.relu`` twice, which Captum's DeepLift refuses): the same parameters,
    the same random draws, the same outputs."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.relu_out = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.relu_out(out + identity)


class SeparateReluBottleneck(tv_resnet.Bottleneck):
    """torchvision's ``Bottleneck`` with each of its three ReLUs a module of its own (see
    :class:`SeparateReluBasicBlock`)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.relu_mid, self.relu_out = nn.ReLU(inplace=True), nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu_mid(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))))
        return self.relu_out(self.bn3(self.conv3(out)) + identity)


def torchvision_resnet(depth: int) -> Callable[[int, int, bool], nn.Module]:
    def build(num_classes: int, in_channels: int, small_input_stem: bool) -> nn.Module:
        block = SeparateReluBottleneck if depth == 50 else SeparateReluBasicBlock
        layers = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3]}[depth]  # torchvision's resnet<depth>
        net = tv_resnet.ResNet(block, layers, num_classes=num_classes)
        if small_input_stem or in_channels != 3:
            kernel, stride, padding = (3, 1, 1) if small_input_stem else (7, 2, 3)
            net.conv1 = nn.Conv2d(in_channels, 64, kernel, stride=stride, padding=padding, bias=False)
            nn.init.kaiming_normal_(net.conv1.weight, mode="fan_out", nonlinearity="relu")  # as torchvision's
        if small_input_stem:
            net.maxpool = nn.Identity()
        net.avgpool = GlobalAvgPool()
        return net

    return build


# name -> build(num_classes, in_channels, small_input_stem); built by factories and lambdas here, so added, not
# decorated; ``small_stem``: whether ``small_input_stem`` applies (False unless given)
ARCHITECTURES = Registry("architecture", page="training_images.md", traits={"small_stem": False})
ARCHITECTURES.add("resnet8", lambda num_classes, in_channels, _: CifarResNet(1, num_classes, in_channels),
                  help="CIFAR ResNet-8 (He et al. 2016, §4.2)", modalities=("images",))
ARCHITECTURES.add("resnet20", lambda num_classes, in_channels, _: CifarResNet(3, num_classes, in_channels),
                  help="CIFAR ResNet-20 (He et al. 2016, §4.2)", modalities=("images",))
ARCHITECTURES.add("small_cnn", lambda num_classes, in_channels, _: small_cnn(num_classes, in_channels),
                  help="two 3x3 convolutions and a linear layer (MNIST, Fashion-MNIST)", modalities=("images",))
ARCHITECTURES.add("mlp", lambda num_classes, in_channels, _: image_mlp(num_classes, in_channels),
                  help="an MLP on the flattened pixels (Watson et al.'s MNIST MLPs)", modalities=("images",))
ARCHITECTURES.add("resnet18", torchvision_resnet(18), help="torchvision's ResNet-18", modalities=("images",),
                  small_stem=True)  # fmt: skip
ARCHITECTURES.add("resnet34", torchvision_resnet(34), help="torchvision's ResNet-34", modalities=("images",),
                  small_stem=True)  # fmt: skip
ARCHITECTURES.add("resnet50", torchvision_resnet(50), help="torchvision's ResNet-50", modalities=("images",),
                  small_stem=True)  # fmt: skip


def create_image_model(name: str, num_classes: int, in_channels: int = 3, small_input_stem: bool = False) -> nn.Module:
    """The network ``name`` (see the module's docstring) with random weights drawn from
    the global RNG, mapping (N, in_channels, H, W) images to (N, num_classes) logits."""
    for option, value in (("num_classes", num_classes), ("in_channels", in_channels)):
        if not isinstance(value, int) or value < 1:
            raise InputError(f"option {option}={value!r}; expected a positive integer")
    if small_input_stem and name not in ARCHITECTURES.names(small_stem=True):
        raise InputError(
            f"option small_input_stem=True with arch={name!r}; expected one of "
            f"{ARCHITECTURES.names(small_stem=True)} "
            "(resnet8/resnet20/small_cnn already have a 3x3 stride-1 stem)"
        )
    if name in ARCHITECTURES:
        return ARCHITECTURES[name].obj(num_classes, in_channels, small_input_stem)
    import timm

    if ":" in name or not timm.is_model(name):
        raise InputError(
            f"option arch={name!r}; expected one of {list(ARCHITECTURES)} or a timm model name "
            "(timm.list_models(); hub names with ':' are refused: nothing is downloaded)"
        )
    return timm.create_model(name, pretrained=False, num_classes=num_classes, in_chans=in_channels)


def load_weights(net: nn.Module, path: str) -> None:
    """Load the state dict saved in ``path`` into ``net`` (``torch.load(weights_only=True)``).
    The file holds ``net.state_dict()`` or an ``ImageClassifier``'s (keys ``net.*``)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise InputError(f"option weights_path={path!r}: file not found; expected a state-dict file (torch.save)")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 (pickle, zip and unsafe-global errors alike: the file is unusable)
        raise InputError(
            f"option weights_path={path!r}: cannot read it ({type(err).__name__}); expected a state dict "
            "saved with torch.save(model.state_dict(), path)"
        ) from err
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise InputError(f"option weights_path={path!r}: not a state dict (a dict of tensors)")
    if state and all(k.startswith("net.") for k in state):
        state = {k[len("net."):]: v for k, v in state.items()}
    own = net.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in own
              if k in state and state[k].shape != own[k].shape]  # fmt: skip
    if missing or unexpected or shapes:
        problems = [f"{label} {items[:3]}{' ...' if len(items) > 3 else ''}"
                    for label, items in (("missing", missing), ("unexpected", unexpected), ("shapes", shapes))
                    if items]  # fmt: skip
        raise InputError(
            f"option weights_path={path!r}: does not fit the network ({'; '.join(problems)}); "
            "expected the state dict of the same arch, num_classes and in_channels"
        )
    net.load_state_dict(state)


# --- optimiser and schedule ------------------------------------------------------------
def parameter_groups(net: nn.Module, weight_decay: float) -> list[dict]:
    """Weights of convolutions and linear layers with ``weight_decay``; every parameter of
    at most one dimension (BatchNorm scales and shifts, biases) without."""
    params = [p for p in net.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if p.ndim > 1], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0},
    ]


def lr_factor(step: int, schedule: Schedule, warmup: int, total: int) -> float:
    """The learning rate at optimiser step ``step`` (0-based) of ``total``, as a fraction of ``lr``.

    ``cosine``: linear warm-up ``(step + 1) / warmup`` for the first ``warmup`` steps, then
    ``(1 + cos(pi * (step - warmup) / (total - warmup))) / 2``.
    ``onecycle``: torch's ``OneCycleLR`` (two phases, cosine annealing, momentum not
    cycled) with ``pct_start = warmup / total``: from ``1/25`` at step 0 up to 1 at step
    ``p = warmup - 1``, ``1/25 + (1 - 1/25) * (1 - cos(pi * step / p)) / 2``, then down to
    ``f = 1/25/1e4`` at step ``total - 1``, ``f + (1 - f) * (1 + cos(pi * (step - p) / (total - 1 - p))) / 2``
    (with ``warmup`` at most 1 it starts at 1, ``p = 0``). Steps past ``total - 1`` (the
    scheduler's step after the last optimiser step) keep the last value. ``none``: 1.
    """
    step = min(step, total - 1)
    if schedule == "cosine":
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / (total - warmup)))
    if schedule == "onecycle":
        peak = warmup - 1
        if step < peak:
            start = 1.0 / ONECYCLE_DIV_FACTOR
            return start + (1.0 - start) * (1.0 - math.cos(math.pi * step / peak)) / 2
        peak = max(peak, 0)
        if total - 1 == peak:  # a one-step run (fast_dev_run)
            return 1.0
        final = 1.0 / ONECYCLE_DIV_FACTOR / ONECYCLE_FINAL_DIV_FACTOR
        return final + (1.0 - final) * (1.0 + math.cos(math.pi * (step - peak) / (total - 1 - peak))) / 2
    return 1.0


def configure_image_optimizer(groups: list[dict], module: pl.LightningModule):
    """The optimiser and schedule of ``ImageClassifier`` (the options in ``module.hparams``)
    over parameter ``groups``; a group's own ``lr`` overrides ``hparams.lr``
    (``ImagePopulation``'s per-member learning rates). What ``configure_optimizers`` returns."""
    hp = module.hparams
    if hp.optimizer == "sgd":
        optimizer = torch.optim.SGD(groups, lr=hp.lr, momentum=SGD_MOMENTUM, nesterov=True)
    else:
        optimizer = torch.optim.AdamW(groups, lr=hp.lr)
    if hp.schedule == "none":
        return optimizer
    trainer = module.trainer
    total = trainer.estimated_stepping_batches
    if not math.isfinite(total):
        raise InputError(f"option schedule={hp.schedule!r} needs trainer.max_epochs or trainer.max_steps")
    total = int(total)
    per_epoch = math.ceil(trainer.num_training_batches / trainer.accumulate_grad_batches)
    warmup = round(hp.warmup_epochs * per_epoch)
    if warmup >= total:  # e.g. a short trial run (limit_train_batches, fast_dev_run) of a full config
        rank_zero_warn(f"warmup_epochs={hp.warmup_epochs} is {warmup} steps of a {total}-step run; "
                       f"warming up for {total - 1} steps instead")  # fmt: skip
        warmup = total - 1
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, hp.schedule, warmup, total))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def at_least_float32(logits: torch.Tensor) -> torch.Tensor:
    """Logits in float32 for the loss and the metrics (bf16 / fp16 under autocast), float64 kept."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


class CrossEntropySteps:
    """Training, validation and test steps of a LightningModule classifier: cross-entropy of the
    logits its ``_step(batch, stage)`` gives to ``_logged_step`` (label smoothing in training),
    ``<stage>/loss`` and ``<stage>/acc`` logged per epoch. Validation and test logits must be
    finite (``finite.check_outputs``); the training loss is train.py's ``FiniteTraining``'s."""

    def _logged_step(self, logits: torch.Tensor, y: torch.Tensor, stage: str) -> torch.Tensor:
        logits = at_least_float32(logits)
        if stage != "train":
            check_outputs(self, logits, stage)
        smoothing = self.hparams.label_smoothing if stage == "train" else 0.0
        loss = F.cross_entropy(logits, y, label_smoothing=smoothing)
        acc = (logits.argmax(dim=-1) == y).float().mean()
        for name, value in (("loss", loss), ("acc", acc)):
            self.log(f"{stage}/{name}", value, prog_bar=stage == "train" or name == "acc", on_step=False,
                     on_epoch=True, sync_dist=True, batch_size=len(y))  # fmt: skip
        return loss

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch, batch_idx: int) -> None:
        self._step(batch, "test")


# --- the LightningModule ---------------------------------------------------------------
class ImageClassifier(CrossEntropySteps, pl.LightningModule):
    """A classifier of images into ``num_classes`` classes; ``forward`` gives the logits.

    Args:
        arch: a network of :func:`create_image_model` (see the module's docstring).
        num_classes, in_channels: linked from the image datamodule by train.py.
        small_input_stem: torchvision ResNets only: 3x3 stride-1 first convolution and
            no max-pool, for 32x32 inputs.
        seed: initialisation seed; the weights are a pure function of it (the global RNG
            is neither read nor advanced).
        weights_path: a local state-dict file loaded over the initial weights
            (``torch.load(..., weights_only=True)``); ``None``: random initialisation.
        optimizer: ``"sgd"`` (Nesterov momentum 0.9) or ``"adamw"``; either way
            ``weight_decay`` applies to weights of convolutions and linear layers only,
            not to BatchNorm parameters or biases.
        lr: the peak learning rate.
        weight_decay: see ``optimizer``.
        schedule: ``"onecycle"``, ``"cosine"`` (linear warm-up, then cosine decay to 0)
            or ``"none"`` (constant ``lr``), stepped every optimiser step over
            ``trainer.estimated_stepping_batches`` (see :func:`lr_factor`).
        warmup_epochs: epochs of rising learning rate (may be fractional; rounded to steps;
            shortened, with a warning, to leave at least one step of decay).
        label_smoothing: of the cross-entropy loss.
        channels_last: keep weights and inputs in channels-last memory format (faster
            convolutions on GPUs, with ``--trainer.precision bf16-mixed`` above all).

    Logs ``train/loss``, ``train/acc``, ``val/loss``, ``val/acc`` (where the data has a
    ``val`` split), ``test/loss`` and ``test/acc``: per epoch, the mean over its images in
    each process, then over the processes (``sync_dist``). The training loss includes the
    label smoothing; the others do not.
    """

    modality = IMAGES  # what it takes (``foundation.modality``)

    def __init__(
        self,
        arch: str = "resnet18",
        num_classes: int = 10,
        in_channels: int = 3,
        small_input_stem: bool = False,
        seed: int = 0,
        weights_path: str | None = None,
        optimizer: Optimizer = "sgd",
        lr: float = 0.1,
        weight_decay: float = 5e-4,
        schedule: Schedule = "onecycle",
        warmup_epochs: float = 1.0,
        label_smoothing: float = 0.0,
        channels_last: bool = False,
    ) -> None:
        super().__init__()
        if optimizer not in OPTIMIZERS:
            raise InputError(f"option optimizer={optimizer!r}; expected one of {list(OPTIMIZERS)}")
        if schedule not in SCHEDULES:
            raise InputError(f"option schedule={schedule!r}; expected one of {list(SCHEDULES)}")
        if not lr > 0:
            raise InputError(f"option lr={lr!r}; expected a positive number")
        for option, value in (("weight_decay", weight_decay), ("warmup_epochs", warmup_epochs)):
            if not value >= 0:
                raise InputError(f"option {option}={value!r}; expected a non-negative number")
        if not 0.0 <= label_smoothing < 1.0:
            raise InputError(f"option label_smoothing={label_smoothing!r}; expected a number in [0, 1)")
        self.save_hyperparameters()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.net = create_image_model(arch, num_classes, in_channels, small_input_stem)
        if weights_path is not None:
            load_weights(self.net, weights_path)
        if channels_last:
            self.net = self.net.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (N, num_classes) of images (N, in_channels, H, W)."""
        if self.hparams.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return self.net(x)

    def _step(self, batch, stage: str) -> torch.Tensor:
        x, y = batch
        return self._logged_step(self(x), y, stage)

    def configure_optimizers(self):
        groups = parameter_groups(self.net, self.hparams.weight_decay)
        return configure_image_optimizer(groups, self)
