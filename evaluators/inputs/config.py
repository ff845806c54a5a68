"""What every population evaluator's config starts with."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from evaluators.inputs.image_members import ImageMembers, image_source_name, load_image_members, source_modality
from evaluators.inputs.sources import (
    MEMBER_FOLDER, POPULATION_FILE, POPULATIONS, TABLE_POPULATIONS, check_kind, not_found,
)  # fmt: skip
from foundation.devices import resolve_device
from foundation.errors import InputError
from foundation.modality import ROWS, Modality
from foundation.files import read_yaml
from lightning_modules.population import PopulationMLP
from lightning_modules.population_io import ROW_KINDS, load_population, population_datamodule, read_population_file

if TYPE_CHECKING:
    import pytorch_lightning as pl


def population_kind(source: str | Path) -> str:
    """The kind of population ``source`` (a file or a folder) holds (``evaluators.inputs.sources``);
    a file that is not a population file counts as tabular (the tabular loader names the problem)."""
    modality = source_modality(source)
    if modality is not ROWS:
        return f"{modality.kind} population"
    try:
        return TABLE_POPULATIONS.get(read_population_file(source, mmap=True)["class"], "tabular population")
    except InputError:
        return "tabular population"


def stacked_mlps_only(does: str, hint: str = "") -> tuple[tuple[str, ...], str]:
    """``KINDS`` and ``WHY_KINDS`` of an evaluator that ``does`` something only stacked MLPs allow:
    it takes a population of configs/population.yaml (a ``tabular population``) and, refusing
    another, says what it does and where a population of other networks goes instead (``hint``
    adds to that)."""
    return ("tabular population",), (f"it {does} stacked MLPs (a population of configs/population.yaml); a "
                                     f"population of your networks takes the consistency protocol{hint}")


@dataclass
class PopulationSource:
    """The population to evaluate, optionally another folder holding its raw data, the
    device the evaluation runs on (perturbation noise is drawn there, so the same seed
    gives the same numbers on the same kind of device) and the ``kind`` of data its models
    must be of (``tabular``, ``image``; null: either). ``population``: a population file
    written by train.py (tabular or image), or a folder of image runs (``evaluators.inputs.image_members``).
    An evaluator takes the population kinds of ``KINDS``; a missing population, or one of
    another kind, is refused here (``evaluators.inputs.sources``)."""

    KINDS: ClassVar[tuple[str, ...]] = POPULATIONS
    WHY_KINDS: ClassVar[str] = ""  # why an evaluator takes only some kinds (said where it refuses one)

    population: str
    data_dir: str | None = None
    device: str = "auto"
    kind: str | None = None

    def __post_init__(self) -> None:
        resolve_device(self.device)  # a bad value is named before any work starts
        if not Path(self.population).exists():
            raise not_found(self.population, f"{POPULATION_FILE}, or {MEMBER_FOLDER}")
        check_kind(f"option population={self.population!r}", self.found_kind(), self.KINDS, self.kind, self.WHY_KINDS)

    @property
    def modality(self) -> Modality:
        """What ``population``'s members take (a file or a folder of runs: ``source_modality``)."""
        return source_modality(self.population)

    def found_kind(self) -> str:
        return population_kind(self.population)

    def report_name(self) -> str:
        """The report folder's prefix: the population's dataset."""
        if self.modality is not ROWS:
            return image_source_name(self.population)
        return read_population_file(self.population, mmap=True)["metadata"]["dataset"]["dataset"]

    def load(self) -> tuple[PopulationMLP | ImageMembers, dict, pl.LightningDataModule]:
        """The population (on ``device``), the rest of its file, and its datamodule: a
        ``PopulationMLP`` or a ``ModulePopulation`` (a user's networks) from a table's population
        file, ``ImageMembers`` from an image population file or a folder of image runs (whose
        payload holds its metadata)."""
        device = resolve_device(self.device)
        if self.modality is not ROWS:
            return load_image_members(self.population, device, self.data_dir)
        population, payload = load_population(self.population, kind=ROW_KINDS)
        return population.to(device), payload, population_datamodule(payload, self.data_dir)


def conforms(value, hint) -> bool:
    """Whether a YAML value fits an option's type hint (int, float, str, bool, None,
    unions of them and lists); an int fits a float, a bool fits nothing but bool."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, h) for h in typing.get_args(hint))
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(conforms(v, item) for v in value)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def load_config(path: Path, cls, overrides: dict):
    """A dataclass config from a YAML file and command-line overrides; a file that is
    not YAML, an unknown option or a value of the wrong type names itself. An override's
    key may be a dotted path into a mapping option (``trainer.max_epochs``; see ``set_nested``)."""
    values = read_yaml(path) or {}
    if not isinstance(values, dict):
        raise InputError(f"--config {path}: expected a mapping of option: value, got {type(values).__name__}")
    given = {k: v for k, v in overrides.items() if v is not None}
    values = {**values, **{k: v for k, v in given.items() if "." not in k}}
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise InputError(f"{path}: unknown option(s) {unknown}; expected some of {sorted(fields)}")
    for key, value in given.items():
        if "." in key:
            set_nested(values, key, value, fields, path)
    for key, value in values.items():
        if not conforms(value, hints[key]):
            unset = " (not set: pass it as --set {0}=... or, where the command has it, --{0})".format(key) \
                if value is None else ""  # fmt: skip
            raise InputError(f"{path}: option {key}={value!r}{unset}; expected {describe_type(hints[key])}")
    return cls(**values)


def set_nested(values: dict, key: str, value, fields: dict, path: Path) -> None:
    """Set ``--set a.b.c=value`` in ``values``: key ``c`` of the mapping at ``a.b``, where ``a``
    is an option whose value (the config's, else its default) is a mapping and every inner key
    (``b``) is already a mapping in it; the last key may be new (what it may be is checked
    where the mapping is used, e.g. ``trainer`` against ``pl.Trainer``)."""
    head, *inner, leaf = key.split(".")
    if head not in fields:
        raise InputError(f"--set {key}: {head!r} is not an option of {path}; expected some of {sorted(fields)}")
    if head not in values:
        field = fields[head]
        has_factory = field.default_factory is not dataclasses.MISSING
        values[head] = field.default_factory() if has_factory else field.default
    node, walked = values[head], head
    for part in [*inner, None]:
        if not isinstance(node, dict):
            raise InputError(f"--set {key}: option {walked} is {node!r}, not a mapping; expected --set {walked}=VALUE")
        if part is None:
            break
        if part not in node:
            raise InputError(f"--set {key}: option {walked} has no key {part!r}; expected one of {sorted(node)}")
        node, walked = node[part], f"{walked}.{part}"
    node[leaf] = value


def describe_type(hint) -> str:
    return str(hint).replace("<class '", "").replace("'>", "").replace("typing.", "")
