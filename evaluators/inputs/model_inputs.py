"""The inputs a brought-in model gets (docs/your_model.md, "The inputs your model gets").

A datamodule serves its inputs preprocessed, and a model file is scored, explained and
ROAR-ranked on what it serves:

* a table's rows (``datamodules.tabular``, ``datamodules.csv_table``): encoded (categorical
  columns one-hot, 0/1; missing values imputed where the data's options say), then every
  encoded column standardised with the training split's mean and std;
* images (``datamodules.image_base``): resized and centre-cropped where ``image_size`` says,
  scaled to [0, 1], then normalised per channel with the training split's mean and std (or
  the data config's ``mean``/``std`` options).

A model trained elsewhere may expect other inputs. The options of a model file choose them:

* ``model_inputs``: ``data`` (or unset) the inputs as served; ``raw`` the inputs before the
  standardisation: a table's encoded rows (numbers as in the file, categories 0/1: a model
  needs numbers, so the encoding stays), images' pixel values in [0, 1] at the served size;
* ``model_mean`` and ``model_std`` (with ``model_inputs`` raw or unset): the raw inputs
  standardised with the model's own statistics, (raw - mean) / std, one value per feature
  (tables) or per channel (images), or one value for all.

``InputAdapter``, a module placed before the model, maps the served inputs ``x`` to those,
``x * scale + shift``: maps and metrics stay over the served inputs, as for the project's own
models. ``preprocessing_line`` says all this in one line, printed when a model file is loaded.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from foundation.errors import InputError
from foundation.modality import modality_of
from lightning_modules.classifier import Classifier

MODEL_INPUTS = ("data", "raw")
OPTIONS = ("model_inputs", "model_mean", "model_std")


class InputAdapter(nn.Module):
    """``net(x * scale + shift)``: a model fed what it takes from the inputs a datamodule serves."""

    def __init__(self, net: nn.Module, scale: torch.Tensor, shift: torch.Tensor) -> None:
        super().__init__()
        self.net = net
        self.register_buffer("scale", scale)
        self.register_buffer("shift", shift)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x * self.scale + self.shift)


def as_list(values) -> list:
    """An option's numbers: a list as given, one number as a list of one."""
    return values if isinstance(values, list) else [values]


def own_statistics(model_inputs: str | None, model_mean, model_std) -> bool:
    """Whether the options ask for the model's own mean and std; a value of none of the options'
    kinds, or one of mean and std without the other, is named."""
    if model_inputs not in (None, *MODEL_INPUTS):
        raise InputError(f"option model_inputs={model_inputs!r}; expected one of {list(MODEL_INPUTS)} (data: the "
                         "inputs as the datamodule serves them; raw: before its standardisation)")  # fmt: skip
    if (model_mean is None) != (model_std is None):
        raise InputError("options model_mean and model_std: give both (the model's own statistics) or neither")
    if model_mean is None:
        return False
    if model_inputs == "data":
        raise InputError("options model_mean and model_std with model_inputs=data; expected model_inputs raw or "
                         "unset (the model's own statistics apply to the raw inputs)")  # fmt: skip
    for option, values in (("model_mean", model_mean), ("model_std", model_std)):
        if not as_list(values) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                          and math.isfinite(v) for v in as_list(values)):  # fmt: skip
            raise InputError(f"option {option}={values!r}; expected a list of finite numbers (one per feature or "
                             "channel) or one number")  # fmt: skip
    if any(v <= 0 for v in as_list(model_std)):
        raise InputError(f"option model_std={model_std!r}; expected positive numbers")
    return True


def served_statistics(data) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and std the datamodule standardises with, shaped to broadcast over a batch:
    (d,) for a table's rows, (C, 1, 1) for images (its ``standardisation``)."""
    if getattr(data, "standardisation", None) is not None:
        return data.standardisation
    raise InputError(f"options model_inputs, model_mean, model_std: the datamodule {type(data).__name__} does not "
                     "say how it standardises its inputs; expected a datamodule of the project (datamodules/)")


def per_value(option: str, values, like: torch.Tensor, unit: str) -> torch.Tensor:
    """``values`` (one number, or one per feature or channel) shaped as ``like``."""
    numbers = torch.tensor(as_list(values), dtype=torch.float32)
    if len(numbers) not in (1, like.numel()):
        raise InputError(f"option {option}: {len(numbers)} values; the data has {like.numel()} {unit}s (expected "
                         f"{like.numel()} values, one per {unit}, or one for all)")  # fmt: skip
    return numbers.expand(like.numel()).reshape(like.shape).clone()


def adapted(model: nn.Module, data, model_inputs: str | None = None, model_mean=None, model_std=None) -> nn.Module:
    """``model`` fed the inputs the options ask for (see the module's docstring): itself for the
    inputs as served, else a ``Classifier`` around an ``InputAdapter`` before it, in eval mode."""
    own = own_statistics(model_inputs, model_mean, model_std)
    if model_inputs in (None, "data") and not own:
        return model
    mean, std = served_statistics(data)
    mean, std = mean.float(), std.float()
    scale, shift = std, mean  # raw = served * std + mean
    if own:
        unit = modality_of(data).stat_unit
        own_mean = per_value("model_mean", model_mean, mean, unit)
        own_std = per_value("model_std", model_std, std, unit)
        scale, shift = std / own_std, (mean - own_mean) / own_std  # (raw - own mean) / own std
    inner = model.net if isinstance(model, Classifier) else model
    return Classifier(InputAdapter(inner, scale, shift)).eval()


def listed(values) -> str:
    """Numbers as a short list (4 significant digits; the first 4, then how many more)."""
    values = [float(v) for v in (values.flatten().tolist() if isinstance(values, torch.Tensor) else values)]
    shown = ", ".join(f"{v:.4g}" for v in values[:4])
    return f"[{shown}{f', ... ({len(values)} values)' if len(values) > 4 else ''}]"


def table_steps(data) -> list[str]:
    """What a table datamodule does to its rows, in order."""
    steps = []
    fitted = getattr(data, "fitted_transform", None)  # a CSVDataModule's encoding, fitted on the training rows
    if fitted is not None:
        categorical = [f["column"] for f in fitted["features"] if f["kind"] == "categorical"]
        if categorical:
            steps.append(f"categorical columns {categorical} one-hot encoded (0/1)")
        if data.missing != "error":
            steps.append(f"missing values handled by option missing={data.missing!r} (impute: the training "
                         "median or mode)")  # fmt: skip
    elif hasattr(data, "spec"):  # one of the financial datasets
        steps.append("encoded by the dataset's reader (categorical columns one-hot, 0/1; docs/table1.md), missing "
                     "values imputed with the training median")  # fmt: skip
    if data.drop_columns:
        steps.append(f"columns {data.drop_columns} dropped")
    mean, std = data.standardisation
    steps.append(f"every column standardised with the training split's mean and std ({data.num_features} "
                 f"columns, mean {listed(mean)}, std {listed(std)})")  # fmt: skip
    return steps


def image_steps(data) -> list[str]:
    """What an image datamodule does to its images, in order."""
    size = getattr(data, "image_size", None)
    _, height, width = data.image_shape
    steps = [f"resized (shorter side {round(size / data.crop_fraction)}) and centre-cropped to {size}x{size}" if size
             else f"kept at their size {height}x{width}"]  # fmt: skip
    mean, std = data.normalization
    source = "the data config's mean and std options" if data.mean_option is not None else \
        f"the {data.stats_split} split's statistics"  # fmt: skip
    steps.append(f"scaled to [0, 1] and normalised per channel with mean {listed(mean)} and std {listed(std)} "
                 f"({source})")  # fmt: skip
    return steps


# per modality: what its datamodule does, what the raw inputs are, and the step --model_inputs raw leaves out
PREPROCESSING = {"rows": (table_steps, "the encoded rows (numbers as in the file, categories 0/1)", "standardisation"),
                 "images": (image_steps, "the pixel values in [0, 1]", "normalisation")}  # fmt: skip


def preprocessing_line(data, model_inputs: str | None = None, model_mean=None, model_std=None) -> str:
    """One line: what the datamodule does to its inputs and what the model gets (the options')."""
    name = f"{getattr(data, 'name', 'data')} ({type(data).__name__})"
    if getattr(data, "standardisation", None) is None:
        return f"inputs: {name} serves its inputs with its own preprocessing; the model gets them as served"
    modality = modality_of(data)
    describe, raw, step = PREPROCESSING[modality.name]
    served, steps = modality.noun, describe(data)
    if own_statistics(model_inputs, model_mean, model_std):
        gets = f"{raw} standardised with its own mean {listed(as_list(model_mean))} and std " \
            f"{listed(as_list(model_std))} (--model_mean, --model_std)"  # fmt: skip
    elif model_inputs == "raw":
        gets = f"{raw} without the {step} (--model_inputs raw)"
    else:
        gets = (f"them as served (--model_inputs raw: {raw} without the {step}; --model_mean and --model_std: "
                "those standardised with the model's own statistics)")  # fmt: skip
    return f"inputs: {name} serves {served}: {', then '.join(steps)}; the model gets {gets}"
