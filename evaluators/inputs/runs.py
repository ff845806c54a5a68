"""What the protocols and callbacks read from a ``train.py`` run: its model and datamodule,
the inputs they explain, the references explainers take, and a cache that lets an
interrupted protocol continue where it stopped."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytorch_lightning as pl
import torch
import yaml
from pytorch_lightning.cli import instantiate_class
from torchvision.transforms.functional import gaussian_blur

from datamodules import data_location_option
from evaluators.inputs.counts import counted
from evaluators.inputs.model_fit import check_run_model, probe_inputs
from evaluators.inputs.model_inputs import OPTIONS, adapted, preprocessing_line
from evaluators.inputs.sources import RUN_FOLDER, SINGLE_MODELS, check_checkpoint, check_kind, not_found, run_kind
from evaluators.inputs.user_models import PROBE_ROWS, check_model_output, load_model_file
from evaluators.maps.registry import definitions, outdated
from foundation.errors import InputError
from foundation.files import atomic_write, read_yaml
from foundation.modality import Modality, modality_of
from lightning_modules.interface import default_classes


def load_run(run_dir: Path, checkpoint: str = "last.ckpt", data_options: dict | None = None,
             data_location: str | None = None, kinds: tuple[str, ...] = SINGLE_MODELS, kind: str | None = None,
             where: str | None = None, model_class: str | None = None, model_args: dict | None = None,
             data_config: str | None = None, announce: bool = True, **inputs):  # fmt: skip
    """The model of ``run_dir/checkpoints/<checkpoint>`` (``weights_only=True``, on the
    CPU), the datamodule of its ``config.yaml`` and the checkpoint's path, once the run is
    checked to hold one of ``kinds`` of model (``evaluators.inputs.sources``; ``kind``: a config's
    ``tabular`` or ``image``), its checkpoint to be readable and ``data_options`` to be options
    of its datamodule. ``data_options`` override the datamodule's init arguments (e.g.
    ``eval_batch_size``); ``data_location``: where the run's data lies now, given to the
    datamodule as its :func:`~datamodules.data_location_option` (``data_dir``, or ``root`` for an
    image folder or archive) in place of the path the run was trained with. ``where``: how
    errors name the run (default: its folder). The checkpoint must be a model of the run's data
    (``evaluators.inputs.model_fit.check_run_model``).

    ``run_dir`` may instead be a model file (``evaluators.inputs.user_models``: a checkpoint,
    TorchScript, ``torch.export`` or, with ``model_class`` and ``model_args``, a state dict),
    its data the ``data:`` section of the YAML file ``data_config`` (a train.py config or a
    run's config.yaml; by default the config.yaml of the run folder the file lies in); its
    kind is its data's, and its output on a probe batch must be class logits (N, K). ``inputs``
    (``model_inputs``, ``model_mean``, ``model_std``; ``evaluators.inputs.model_inputs``) choose
    what the model file gets; the preprocessing it gets is printed in one line where ``announce``."""
    if Path(run_dir).is_file():
        return load_model_source(Path(run_dir), data_options, data_location, kinds, kind, where, model_class,
                                 model_args, data_config, announce, inputs)  # fmt: skip
    file_options = {"model_class": model_class, "model_args": model_args or None, "data_config": data_config}
    given = sorted(option for option, value in {**file_options, **{o: inputs.get(o) for o in OPTIONS}}.items()
                   if value is not None)
    if given and Path(run_dir).is_dir():  # a missing path is named below
        raise InputError(f"options {given} with {where or run_dir}, a train.py run folder; expected them unset (they "
                         "read a model file; a run's checkpoint names its model, its data and the inputs it was "
                         "trained on)")  # fmt: skip
    config_path, ckpt_path = run_dir / "config.yaml", run_dir / "checkpoints" / checkpoint
    if not config_path.is_file():
        raise not_found(config_path, RUN_FOLDER, "file") if run_dir.is_dir() else not_found(run_dir, RUN_FOLDER)
    config = yaml.safe_load(config_path.read_text())
    check_kind(where or str(run_dir), run_kind(config), kinds, kind)
    if not ckpt_path.is_file():
        raise not_found(ckpt_path, "a checkpoint written by train.py")
    data = run_datamodule(config["data"], data_options, data_location)
    check_checkpoint(ckpt_path)
    model = pl.LightningModule.load_from_checkpoint(ckpt_path, weights_only=True, map_location="cpu").eval()
    check_run_model(model, data, ckpt_path, config["model"]["class_path"])
    return model, data, ckpt_path


def run_datamodule(data_cfg: dict, data_options: dict | None, data_location: str | None):
    """The datamodule of a config's ``data`` section, with ``data_options`` and ``data_location``."""
    check_data_options(data_cfg["class_path"], data_options or {})
    data_cfg["init_args"] = {**(data_cfg.get("init_args") or {}), **(data_options or {})}
    if data_location is not None:
        data_cfg["init_args"][data_location_option(data_cfg["class_path"])] = data_location
    return instantiate_class((), data_cfg)


def load_model_source(path: Path, data_options: dict | None, data_location: str | None, kinds: tuple[str, ...],
                      kind: str | None, where: str | None, model_class: str | None, model_args: dict | None,
                      data_config: str | None, announce: bool, inputs: dict):  # fmt: skip
    """``load_run`` for a model file (see there)."""
    where = where or str(path)
    model = load_model_file(path, model_class, model_args)
    beside = path.parent.parent / "config.yaml"
    if data_config is None and path.parent.name == "checkpoints" and beside.is_file():
        data_config = str(beside)
    if data_config is None:
        raise InputError(f"{where}: a model file names no data; expected option data_config (a YAML file with a "
                         "data: section, e.g. a train.py config or a run's config.yaml)")  # fmt: skip
    values = read_yaml(Path(data_config), "option data_config")
    data_cfg = values.get("data") if isinstance(values, dict) else None
    if not isinstance(data_cfg, dict) or "class_path" not in data_cfg:
        raise InputError(f"option data_config={data_config!r}: no data: section with a class_path; expected a "
                         "train.py config or a run's config.yaml")  # fmt: skip
    data = run_datamodule(data_cfg, data_options, data_location)
    check_kind(where, modality_of(data).kind, kinds, kind)
    line = preprocessing_line(data, **inputs)  # also checks the options, before the probe
    model = adapted(model, data, **inputs)
    check_model_output(model, probe_inputs(data, PROBE_ROWS), getattr(data, "num_classes", None), where)
    if announce:
        print(line)
    return model, data, path


def check_data_options(class_path: str, options: dict) -> None:
    """Every key of ``options`` names an init argument of the datamodule ``class_path`` (or of a
    base class its ``**kwargs`` reach)."""
    module, _, name = class_path.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    known: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(vars(klass)["__init__"]).parameters.values()
        known |= {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            break
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(f"option data: {unknown} not an option of the run's datamodule {name}; "
                         f"expected some of {sorted(known)}")  # fmt: skip


def cached(path: Path, compute: Callable[[], dict], methods: Iterable[str] = ()) -> dict:
    """``compute()``'s result, saved at ``path`` the first time and read from there after. With
    ``methods`` (the explainers whose maps the result holds or was computed from), their
    definitions are saved with it (key ``definitions``), and a file of another definition of one
    of them (one without them: written before issue 42) is computed again with a warning
    (``evaluators.maps.registry.outdated``)."""
    if path.is_file():
        kept = torch.load(path, weights_only=True)
        if not outdated(kept.pop("definitions", None), methods, str(path)):
            return kept
    result = compute()
    payload = {**result, "definitions": definitions(methods)} if methods else result
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: torch.save(payload, tmp))
    return result


@dataclass
class Inputs:
    """What a protocol explains and scores, on the model's device."""

    x: torch.Tensor  # (N, C, H, W) images or (N, d) rows
    target: torch.Tensor  # the explained class per input (``interface.default_targets``)
    train_sample: torch.Tensor  # ``n_baselines`` training inputs
    stats: tuple[torch.Tensor, torch.Tensor]  # training-set mean and std per channel (images) or feature
    modality: Modality


def load_inputs(model, data, n_inputs: int, n_baselines: int, seed: int, max_batch: int | None,
                device: torch.device, defaults: dict | None = None) -> Inputs:  # fmt: skip
    """``n_inputs`` test inputs (images evenly spaced through the test split; the first rows of
    a tabular test split), their explained class, ``n_baselines`` training inputs (images
    evenly spaced through 1,000 spread over the training split, so across the classes; a
    seeded random sample of training rows) and the training set's statistics. Either count
    above what its split holds: ``evaluators.inputs.counts.counted`` with the ``defaults`` of
    ``n_inputs`` and ``n_baselines``."""
    defaults, modality = defaults or {}, modality_of(data)
    data.setup("test")
    if modality.whole_splits:  # a table: its test split in memory
        x_test, _ = data.test_tensors
        n_inputs = counted("n_inputs", n_inputs, len(x_test), "test split", modality.noun, defaults.get("n_inputs"))
        x = x_test[: n_inputs].to(device)
    else:
        x, _ = data.probe(n_inputs, "test")
        counted("n_inputs", n_inputs, len(x), "test split", modality.noun, defaults.get("n_inputs"))
        x = x.to(device)
    return Inputs(x, default_classes(model, x, max_batch), *reference_inputs(data, n_baselines, seed, device,
                                                                             defaults))  # fmt: skip


def reference_inputs(data, n_baselines: int, seed: int, device: torch.device,
                     defaults: dict) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], Modality]:  # fmt: skip
    """``load_inputs``' training inputs, training-set statistics (``Modality.statistics``) and the data's modality."""
    modality = modality_of(data)
    if modality.whole_splits:  # a table's references: its training rows
        data.setup("test")
        x_train, _ = data.train_tensors
        n_baselines = counted("n_baselines", n_baselines, len(x_train), "training split", modality.noun,
                              defaults.get("n_baselines"))  # fmt: skip
        sample = x_train[torch.randperm(len(x_train), generator=torch.Generator().manual_seed(seed))]
        return sample[: n_baselines].to(device), tuple(s.to(device) for s in modality.statistics(x_train)), modality
    has_train = "train" in data.split_sizes
    if has_train:
        data.setup("fit")
    sample, _ = data.probe(max(n_baselines, 1000), "train" if has_train else "test")
    n_baselines = counted("n_baselines", n_baselines, len(sample), "training split" if has_train else "test split",
                          modality.noun, defaults.get("n_baselines"))  # fmt: skip
    mean, std = modality.statistics(sample)  # in the model's input space
    spread = torch.linspace(0, len(sample) - 1, n_baselines).long()  # across the classes
    return sample[spread].to(device), (mean.to(device), std.to(device)), modality


def test_reader(data, n_inputs: int, defaults: dict) -> tuple[int, Callable[[list[int]], torch.Tensor]]:
    """The number of ``load_inputs``' test inputs and a reader of the ones at given positions
    among them (CPU tensors), for inputs read a chunk at a time: images from the split's
    dataset, one at a time for an image folder served from files (``_file_dataset``)."""
    data.setup("test")
    modality = modality_of(data)
    if modality.whole_splits:
        x_test, _ = data.test_tensors
        n = counted("n_inputs", n_inputs, len(x_test), "test split", modality.noun, defaults.get("n_inputs"))
        return n, lambda positions: x_test[list(positions)]
    name = data.eval_split
    dataset = data.eval_dataloader(name).dataset
    spread = list(range(0, data.split_sizes[name], max(1, data.split_sizes[name] // n_inputs)))[:n_inputs]  # probe's
    counted("n_inputs", n_inputs, len(spread), "test split", modality.noun, defaults.get("n_inputs"))

    return len(spread), lambda positions: read_items(dataset, [spread[i] for i in positions])


def read_items(dataset, indices: list[int]) -> torch.Tensor:
    """The images at ``indices`` of an image datamodule's dataset (in memory: one batch; from files: one by one)."""
    if hasattr(dataset, "__getitems__"):
        return dataset.__getitems__(indices)[0]
    return torch.stack([dataset[i][0] for i in indices])


def blurred(x: torch.Tensor) -> torch.Tensor:
    """Mahlau & Nolde's Integrated Gradients baseline: the image blurred with σ = 20 and a
    25 x 25 kernel at 224 x 224, both scaled to the image's size (odd kernel, at least 3)."""
    scale = x.shape[-1] / 224
    kernel = max(3, 2 * round(25 * scale / 2) + 1)
    return gaussian_blur(x, [kernel, kernel], [20 * scale, 20 * scale])


def explainer_options(options: dict, inputs: Inputs) -> dict:
    """An explainer's options with the named references made tensors."""
    named = {"training": lambda: inputs.train_sample, "blur": lambda: blurred(inputs.x),
             "mean": lambda: inputs.stats[0].unsqueeze(0)}  # fmt: skip
    resolved = {}
    for key, value in options.items():
        if isinstance(value, str) and key == "baselines":
            if value not in named:
                raise InputError(f"option baselines={value!r}; expected one of {sorted(named)}")
            value = named[value]()
        resolved[key] = value
    return resolved
