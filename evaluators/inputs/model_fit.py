"""Whether a run folder's checkpoint is a model of the folder's data, checked before any work.

A checkpoint copied into another run's folder (an image model's into a table run's, an MLP of
another width) would otherwise fail deep in a test or training loop. ``check_run_model`` runs
the loaded model on a probe batch of the data's test inputs after comparing its kind with the
data's; ``check_resumed_checkpoint`` compares a checkpoint's model class with the run's
config.yaml before ``train.py --resume`` restores it. Each refusal is one line naming the
checkpoint, what it holds and what the folder's data needs.
"""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from evaluators.inputs.sources import RUN_KINDS, check_checkpoint, data_kind
from evaluators.inputs.user_models import PROBE_ROWS
from foundation.errors import InputError, one_line
from foundation.modality import IMAGES, modality_of
from lightning_modules.classifier import check_logits


def probe_inputs(data, n: int) -> torch.Tensor:
    """The first ``n`` test rows of a tabular datamodule, or ``n`` test images spread through the split."""
    data.setup("test")
    return data.probe(n, "test")[0]


def data_needs(data) -> str:
    """What a model of ``data`` takes, e.g. ``a tabular model of rows (N, 20)``."""
    if modality_of(data) is IMAGES:
        return "an image model of images (N, {}, {}, {})".format(*data.image_shape)
    return f"a tabular model of rows (N, {data.num_features})"


def model_holds(class_path: str, hparams: dict) -> str:
    """What a checkpoint's model is, by its class and hyperparameters, e.g. ``an ImageClassifier
    (small_cnn), an image model of images (N, C, H, W)``."""
    name = class_path.rsplit(".", 1)[-1]
    if name == "Classifier":
        net = hparams.get("net") if isinstance(hparams.get("net"), dict) else {}
        return f"a Classifier of {net.get('class_path', 'a network')}"
    if RUN_KINDS.get(name) == "image":
        arch = f" ({hparams['arch']})" if hparams.get("arch") else ""
        return f"an {name}{arch}, an image model of images (N, C, H, W)"
    if RUN_KINDS.get(name) == "tabular":
        width = f" (N, {hparams['in_features']})" if hparams.get("in_features") else ""
        return f"an {name}, a tabular model of rows{width}"
    return f"a {name}"


def check_run_model(model, data, ckpt_path: Path, config_model: str) -> None:
    """That ``model``, read from a run folder's checkpoint ``ckpt_path``, is a model of the folder's
    data: of its kind (tabular or image) and giving class logits on a probe batch of its test
    inputs; ``config_model``: the model class the folder's config.yaml trains."""
    holds = model_holds(type(model).__module__ + "." + type(model).__name__, dict(getattr(model, "hparams", {})))
    needs = f"the run folder's data ({getattr(data, 'name', type(data).__name__)}) needs {data_needs(data)}"
    expected = f"expected the checkpoint train.py wrote for its config.yaml ({config_model.rsplit('.', 1)[-1]})"
    kind = RUN_KINDS.get(type(model).__name__)
    if kind is not None and kind != modality_of(data).kind:
        raise InputError(f"{ckpt_path}: holds {holds}; {needs}; {expected}")
    x = probe_inputs(data, PROBE_ROWS)
    try:
        with torch.no_grad():
            out = model(x)
    except Exception as err:  # noqa: BLE001 (any failure on the data's own inputs means another model)
        raise InputError(f"{ckpt_path}: holds {holds}, which fails on the data's test inputs of shape "
                         f"{tuple(x.shape)} ({type(err).__name__}: {one_line(str(err))[:150]}); {needs}; "
                         f"{expected}") from None  # fmt: skip
    check_logits(out, len(x), getattr(data, "num_classes", None), f"{ckpt_path} ({holds})")


def check_resumed_checkpoint(run_dir: Path) -> None:
    """That the run's ``checkpoints/last.ckpt`` is readable and holds the model class, and for a
    ``Classifier`` the network class, that its config.yaml trains."""
    ckpt_path = run_dir / "checkpoints" / "last.ckpt"
    ckpt = check_checkpoint(ckpt_path)
    config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    hparams = (ckpt.get("hyper_parameters") if isinstance(ckpt, dict) else None) or {}
    found = hparams.get("_class_path")
    model = config.get("model") or {}
    wanted = model.get("class_path")
    if not found or not wanted:  # a checkpoint of a LightningModule made in Python: nothing to compare
        return
    net = (model.get("init_args") or {}).get("net")
    wanted_net = net.get("class_path") if isinstance(net, dict) else None
    found_net = hparams.get("net", {}).get("class_path") if isinstance(hparams.get("net"), dict) else None
    if found == wanted and found_net == wanted_net:
        return
    data = (config.get("data") or {}).get("class_path", "")
    wanted_holds = model_holds(wanted, {**(model.get("init_args") or {})})
    kind = data_kind(data) if data else "its"
    raise InputError(f"{ckpt_path}: holds {model_holds(found, hparams)}; the run folder's config.yaml trains "
                     f"{wanted_holds} on {kind} data ({data.rsplit('.', 1)[-1]}); expected the checkpoint "
                     "train.py wrote for this run (move the other checkpoint to its own run folder)")  # fmt: skip
