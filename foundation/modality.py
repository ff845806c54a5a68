"""What differs between a table's rows and images, defined once: one :class:`Modality` per kind
of input, registered by name in ``MODALITIES`` (``"rows"``, ``"images"``: the names the
registries' entries declare in ``modalities=``, ``foundation.registry``), and
:func:`modality_of`, the one place that asks which modality an object is of.

A modality says, for inputs x of N examples:

* its inputs: ``input_dims`` dims (``ROWS``: (N, d), 2; ``IMAGES``: (N, C, H, W), 4; ``shape``
  writes them), recognised by ``recognises(x)``; ``noun`` names them in counts and messages,
  ``kind`` is the word configs use for data of it (``kind: tabular`` / ``image``);
* its maps: an explainer's map is shaped like x; the map that is scored holds one value per
  ``unit`` (a feature of a row, a pixel of an image), ``map_dims`` dims per input
  (``unit_shape(x)``: (d,) or (H, W)); ``reduce(maps, how)`` takes one to the other, over
  ``reduced_dim`` (images: the channels, (N, C, H, W) -> (N, H, W), by ``REDUCTIONS``: ``sum``,
  ``abs_sum`` Σ_c |m_c|, ``max_abs`` max_c |m_c|; rows: unchanged); ``unit_mask(mask)`` spreads
  a mask over units (R, *unit_shape) over the inputs (every channel of a pixel);
* its statistics: ``statistics(x)``, the mean and (population) standard deviation of x over
  ``stat_dims`` per ``stat_unit`` (a table's feature over its rows; an image channel over the
  images and their pixels); ``own_statistics``: whether the normal baseline of insertion,
  deletion and a callback's probe draws from each input's own statistics (images, per channel)
  rather than the training set's (a table: its training rows' feature means and stds);
* its defaults: ``reduction`` (images: ``abs_sum``), ``units_per_step`` (the units one
  insertion/deletion step moves by default: a feature of a row, 50 pixels of an image: S =
  ⌈n / units_per_step⌉), ``spatial`` (whether a unit has neighbours: smoothing and
  superpixels apply), ``fixed_class`` (whether its models have a default class of their own,
  ``explained_class``, that the protocols explain: a binary table's positive class, a
  multi-class table's predicted class; images: a target per input, its label or the predicted
  class), ``whole_splits`` (whether its datamodules serve whole splits as tensors,
  ``train_tensors``/``test_tensors``, read into memory: a table; images are probed, inputs
  spread through a split, ``probe``),
  ``default_explainers`` (name -> options, where a callback is given none);
* which explainers and metrics apply: those whose registry entry names the modality
  (``applicable(registry)``); ``truth_metrics``, the localisation metrics scored against a
  ground truth where the data know one (``evaluators.metrics.ground_truth``; the first is the
  primary one);
* its figure: ``figure``, ``"heatmap"`` (maps drawn over the un-normalised images,
  ``evaluators.reports.map_grid``) or None (a table's maps are reported as numbers).

Datamodules, models, populations and input sources declare theirs in a ``modality``
attribute (a :class:`Modality` or its name); older files named it ``INPUTS``/``inputs``
(``"rows"``/``"images"``) or ``kind`` (``"tabular"``/``"image"``), read here too. A new modality
(say, sequences (N, L, E)) is one more ``register(Modality(...))`` (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from foundation.errors import InputError

REDUCTIONS: dict[str, Callable[[torch.Tensor, int], torch.Tensor]] = {
    "sum": lambda maps, dim: maps.sum(dim),
    "abs_sum": lambda maps, dim: maps.abs().sum(dim),
    "max_abs": lambda maps, dim: maps.abs().amax(dim),
}


@dataclass(frozen=True, eq=False)
class Modality:
    """One kind of input and what differs for it (see the module's docstring); one object per
    name (compared by identity; pickled by name, so a copy in another process is the same)."""

    name: str
    kind: str
    noun: str
    shape: str
    input_dims: int
    reduced_dim: int | None
    unit: str
    stat_unit: str
    stat_dims: tuple[int, ...]
    own_statistics: bool
    fixed_class: bool
    spatial: bool
    whole_splits: bool
    reduction: str | None
    units_per_step: int
    figure: str | None
    default_explainers: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))
    truth_metrics: tuple[str, ...] = ()

    def __reduce__(self):
        return modality_of, (self.name,)

    @property
    def map_dims(self) -> int:
        """Dims of one input's scored map."""
        return self.input_dims - 1 - (self.reduced_dim is not None)

    def recognises(self, x: Any) -> bool:
        """Whether ``x`` is a tensor of this modality's inputs (or of its unreduced maps)."""
        return isinstance(x, torch.Tensor) and x.dim() == self.input_dims

    def unit_shape(self, x: torch.Tensor) -> tuple[int, ...]:
        """The shape of one input's scored map: x's shape without N and ``reduced_dim``."""
        return tuple(n for i, n in enumerate(x.shape) if i not in (0, self.reduced_dim))

    def scored_shape(self, x: torch.Tensor) -> tuple[int, ...]:
        """The shape of the scored maps of inputs ``x``: (N, *unit_shape(x))."""
        return (len(x), *self.unit_shape(x))

    def unit_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """A mask over units (R, *unit_shape) that broadcasts over inputs (R, ...): one unit
        covers every entry along ``reduced_dim`` (all channels of a pixel)."""
        return mask if self.reduced_dim is None else mask.unsqueeze(self.reduced_dim)

    def reduce(self, maps: torch.Tensor, how: str | None = None) -> torch.Tensor:
        """Maps shaped like the inputs to the scored shape: over ``reduced_dim`` by ``how``
        (``REDUCTIONS``; None: ``reduction``), or unchanged where nothing is reduced."""
        if not self.recognises(maps):
            raise InputError(f"maps of shape {tuple(getattr(maps, 'shape', ()))}; expected {self.shape} "
                             f"({self.name})")  # fmt: skip
        if self.reduced_dim is None:
            return maps
        how = self.reduction if how is None else how
        if how not in REDUCTIONS:
            raise InputError(f"option how={how!r}; expected one of {list(REDUCTIONS)}")
        return REDUCTIONS[how](maps, self.reduced_dim)

    def statistics(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean and population standard deviation of inputs ``x`` per ``stat_unit``."""
        dims = self.stat_dims[0] if len(self.stat_dims) == 1 else self.stat_dims
        return x.mean(dims), x.std(dims, unbiased=False)

    def default_steps(self, n_units: int) -> int:
        """Insertion/deletion steps S over ``n_units`` units: ⌈n_units / units_per_step⌉."""
        return -(-n_units // self.units_per_step)

    def applicable(self, registry) -> list[str]:
        """The names of a ``foundation.registry.Registry`` whose entries apply to this modality."""
        return registry.names(modality=self.name)


MODALITIES: dict[str, Modality] = {}


def register(modality: Modality) -> Modality:
    """Adds ``modality`` to ``MODALITIES`` under its name (and recognises its ``kind``); returns it."""
    taken = [m.name for m in MODALITIES.values() if {m.name, m.kind} & {modality.name, modality.kind}]
    if taken:
        raise ValueError(f"modality {modality.name!r} ({modality.kind!r}) clashes with {taken}")
    MODALITIES[modality.name] = modality
    return modality


ROWS = register(Modality(
    name="rows", kind="tabular", noun="rows", shape="(N, d)", input_dims=2, reduced_dim=None, unit="feature",
    stat_unit="feature", stat_dims=(0,), own_statistics=False, fixed_class=True, spatial=False, whole_splits=True,
    reduction=None, units_per_step=1, figure=None,
    default_explainers=MappingProxyType({"saliency": {}, "smoothgrad": {"stdevs": 0.1}, "integrated_gradients": {},
                                         "input_x_gradient": {}}),
    truth_metrics=("ground_truth_agreement", "relevance_rank_accuracy", "localisation_auc"),
))  # fmt: skip
IMAGES = register(Modality(
    name="images", kind="image", noun="images", shape="(N, C, H, W)", input_dims=4, reduced_dim=1, unit="pixel",
    stat_unit="channel", stat_dims=(0, 2, 3), own_statistics=True, fixed_class=False, spatial=True,
    whole_splits=False, reduction="abs_sum", units_per_step=50,  # Mahlau et al.: 1,000 steps on 224 x 224 images
    figure="heatmap",
    default_explainers=MappingProxyType({"saliency": {}, "smoothgrad": {"nt_samples": 16},
                                         "integrated_gradients": {"n_steps": 16}, "gradcam": {}}),
    truth_metrics=("relevance_rank_accuracy", "relevance_mass_accuracy", "pointing_game", "localisation_auc"),
))  # fmt: skip


def _by_name(name: str) -> Modality:
    found = next((m for m in MODALITIES.values() if name in (m.name, m.kind)), None)
    if found is None:
        raise InputError(f"modality {name!r}; expected one of {sorted(MODALITIES)} "
                         f"(or a data kind {sorted(m.kind for m in MODALITIES.values())})")  # fmt: skip
    return found


def reduce_map(maps: torch.Tensor, how: str = "abs_sum") -> torch.Tensor:
    """Image maps (N, C, H, W) to per-pixel maps (N, H, W) over channels: ``IMAGES.reduce`` by
    ``how``, ``sum``, ``abs_sum`` (sum of absolute values) or ``max_abs`` (largest absolute value)."""
    return IMAGES.reduce(maps, how)


def modality_of(obj: Any) -> Modality:
    """The modality of ``obj``: a :class:`Modality` itself; a name or data kind (``"rows"``,
    ``"tabular"``, ...); a tensor of inputs, by its dims; else what the object (a datamodule,
    model, population, input source, or its class) declares in ``modality`` (older ones:
    ``INPUTS``, ``inputs``, ``kind``)."""
    if isinstance(obj, Modality):
        return obj
    if isinstance(obj, str):
        return _by_name(obj)
    if isinstance(obj, torch.Tensor):
        found = [m for m in MODALITIES.values() if m.recognises(obj)]
        if len(found) != 1:
            expected = " or ".join(f"{m.noun} {m.shape}" for m in MODALITIES.values())
            raise InputError(f"inputs of shape {tuple(obj.shape)}; expected {expected}")
        return found[0]
    declared = getattr(obj, "modality", None)
    if isinstance(declared, (Modality, str)):
        return modality_of(declared)
    known = {name for m in MODALITIES.values() for name in (m.name, m.kind)}
    for attribute in ("INPUTS", "inputs", "kind"):  # the older declarations
        declared = getattr(obj, attribute, None)
        if isinstance(declared, str) and declared in known:
            return _by_name(declared)
    raise InputError(f"{type(obj).__name__} declares no modality; expected an attribute modality, one of "
                     f"{sorted(MODALITIES)} (foundation.modality)")  # fmt: skip


__all__ = ["IMAGES", "MODALITIES", "REDUCTIONS", "ROWS", "Modality", "modality_of", "reduce_map", "register"]
