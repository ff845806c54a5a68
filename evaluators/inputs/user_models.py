"""A user's trained model as the evaluators read it (docs/your_model.md).

``load_model_file(path, model_class, model_args)`` reads, on the CPU and never with
``weights_only=False``:

* a Lightning checkpoint (``.ckpt``) of a ``train.py`` run, or of the user's own
  ``LightningModule`` (``model_class``: its class path, ``model_args`` its init arguments
  where the checkpoint does not hold them);
* a TorchScript file (``torch.jit.save``), read by ``torch.jit.load``;
* a ``torch.export`` file (``torch.export.save``), read by ``torch.export.load``;
* a state dict (``torch.save(net.state_dict(), path)``, ``torch.load(weights_only=True)``)
  loaded into ``model_class(**model_args)``: a class path or a function returning the
  network (e.g. ``torchvision.models.resnet18`` with ``{num_classes: 10}``); nothing is
  downloaded (``weights``/``pretrained`` options are refused).

The model comes back as a ``Classifier`` around the network or the user's LightningModule
(evaluated like a ``train.py`` run; a train.py checkpoint: its own LightningModule). ``check_model_output``
runs it on a probe batch: its output must be class logits (N, K). A file of none of these
kinds, a state dict of another architecture or an output of another shape is an
``InputError`` naming the file and what was found.
"""

from __future__ import annotations

import importlib
import warnings
import zipfile
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch import nn

from foundation.errors import InputError, one_line
from lightning_modules.classifier import Classifier, check_logits

MODEL_FILE = ("a train.py run folder, a Lightning checkpoint, a TorchScript or torch.export file, or a state dict "
              "with option model_class")  # fmt: skip
PROBE_ROWS = 3  # inputs in the probe batch: odd, so a file exported for a fixed batch size fails there
DOWNLOAD_OPTIONS = ("weights", "pretrained", "pretrained_cfg_overlay")


def file_kind(path: Path) -> str:
    """``"torchscript"``, ``"export"`` or ``"torch.save"`` by the archive's entries (all three are zip files)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError):
        return "torch.save"  # or a legacy/corrupt file: torch.load names the problem
    if any(name.endswith("/archive_format") for name in names):
        return "export"
    if any("/code/" in name for name in names) and any(name.endswith("/constants.pkl") for name in names):
        return "torchscript"
    return "torch.save"


class ExportedNet(nn.Module):
    """A ``torch.export`` program's module: its mode is the one it was exported in
    (``train()``/``eval()`` leave it be; the exported module refuses them)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def train(self, mode: bool = True) -> "ExportedNet":
        self.training = mode
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)


def import_path(path: str, option: str = "model_class"):
    """The object a dotted path names (``package.module.Name``), imported; never evaluated."""
    module, _, name = path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name) if module else None
    except (ImportError, AttributeError) as err:
        raise InputError(f"option {option}={path!r}: cannot import it ({one_line(str(err))})") from None
    if not callable(found):
        raise InputError(f"option {option}={path!r}: not a class or function; expected a dotted path such as "
                         "torchvision.models.resnet18")  # fmt: skip
    return found


def build_network(model_class: str, model_args: dict | None) -> nn.Module:
    """``model_class(**model_args)`` with its initial weights (never downloaded ones)."""
    args = dict(model_args or {})
    asked = [k for k in DOWNLOAD_OPTIONS if args.get(k) not in (None, False)]
    if asked:
        raise InputError(f"option model_args: {asked[0]}={args[asked[0]]!r} would download weights; expected "
                         "the weights file as the model and no pretrained weights")  # fmt: skip
    factory = import_path(model_class)
    try:
        net = factory(**args)
    except Exception as err:  # noqa: BLE001 (a user's constructor: any error is a wrong argument)
        raise InputError(f"option model_class={model_class!r} with model_args {args}: cannot build it "
                         f"({type(err).__name__}: {one_line(str(err))[:200]})") from None  # fmt: skip
    if not isinstance(net, nn.Module):
        raise InputError(f"option model_class={model_class!r}: made a {type(net).__name__}; expected an nn.Module")
    return net


def load_state(net: nn.Module, state: dict, where: str) -> None:
    """Load ``state`` into ``net``; the first key missing, unexpected or of another shape
    is named (a checkpoint of another architecture)."""
    own = net.state_dict()
    for key, value in own.items():
        if key not in state:
            raise InputError(f"{where}: does not fit the network ({type(net).__name__}): no {key!r} in the file "
                             "(expected the state dict of the same class and options)")  # fmt: skip
        if tuple(state[key].shape) != tuple(value.shape):
            raise InputError(f"{where}: does not fit the network ({type(net).__name__}): {key!r} is "
                             f"{tuple(state[key].shape)} in the file, {tuple(value.shape)} in the network")  # fmt: skip
    unexpected = [k for k in state if k not in own]
    if unexpected:
        raise InputError(f"{where}: does not fit the network ({type(net).__name__}): {unexpected[0]!r} in the "
                         "file is not one of its parameters or buffers")  # fmt: skip
    net.load_state_dict(state)


def read_saved(path: Path):
    """``torch.load(path, weights_only=True)`` on the CPU; an unreadable file is named."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # noqa: BLE001 (zip, pickle, EOF and unsafe-global errors alike)
        raise InputError(f"{path}: not a model file that can be read safely ({type(err).__name__}); expected "
                         f"{MODEL_FILE}") from None  # fmt: skip


def network_state(saved: dict) -> dict:
    """A saved dict's network weights: a Lightning checkpoint's ``state_dict`` with the
    LightningModule's ``net.`` prefix removed, or the state dict itself."""
    state = saved.get("state_dict", saved) if "pytorch-lightning_version" in saved else saved
    if state and all(k.startswith("net.") for k in state):
        state = {k[len("net."):]: v for k, v in state.items()}
    return state


def load_model_file(path: str | Path, model_class: str | None = None, model_args: dict | None = None) -> nn.Module:
    """The model in ``path`` (see the module's docstring), in eval mode on the CPU."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found; expected {MODEL_FILE}")
    kind = file_kind(path)
    if kind == "torchscript":
        try:
            net = torch.jit.load(str(path), map_location="cpu")
        except Exception as err:  # noqa: BLE001
            raise InputError(f"{path}: not a readable TorchScript file ({type(err).__name__})") from None
        return Classifier(net).eval()
    if kind == "export":
        try:
            net = ExportedNet(torch.export.load(str(path)).module())
        except Exception as err:  # noqa: BLE001
            raise InputError(f"{path}: not a readable torch.export file ({type(err).__name__})") from None
        return Classifier(net).eval()
    saved = read_saved(path)
    if not isinstance(saved, dict) or not saved:
        raise InputError(f"{path}: holds a {type(saved).__name__}; expected {MODEL_FILE}")
    hparams = saved.get("hyper_parameters") or {}
    if model_class is None and "pytorch-lightning_version" in saved and "_instantiator" in hparams:
        model = pl.LightningModule.load_from_checkpoint(path, weights_only=True, map_location="cpu")
        return model.eval()
    if model_class is None:
        raise InputError(f"{path}: a state dict or checkpoint without its class; expected option model_class "
                         "(the class path of the network, e.g. torchvision.models.resnet18) and model_args")
    state = network_state(saved)
    if not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise InputError(f"{path}: not a state dict (a mapping of names to tensors); expected {MODEL_FILE}")
    found = import_path(model_class)
    if isinstance(found, type) and issubclass(found, pl.LightningModule):
        own = {k: v for k, v in hparams.items() if not k.startswith("_")}  # not Lightning's _class_path, _instantiator
        model = found(**{**own, **(model_args or {})})
        load_state(model, saved.get("state_dict", saved), str(path))
        return Classifier(model).eval()  # its test loop and logged names are the project's
    net = build_network(model_class, model_args)
    load_state(net, state, str(path))
    return Classifier(net).eval()


def check_model_output(model: nn.Module, x: torch.Tensor, num_classes: int | None, where: str) -> None:
    """Run ``model`` on the probe inputs ``x``: its output must be logits (N, K) (K =
    ``num_classes`` where the data says); a model that fails on them is named too."""
    try:
        with torch.no_grad():
            out = model(x)
    except Exception as err:  # noqa: BLE001 (a user's model: any error means it does not take these inputs)
        raise InputError(f"{where}: fails on a probe batch of shape {tuple(x.shape)} ({type(err).__name__}: "
                         f"{one_line(str(err))[:200]}); expected a model of these inputs, for any batch "
                         "size (export with a dynamic batch dimension)") from None  # fmt: skip
    check_logits(out, len(x), num_classes, where)
