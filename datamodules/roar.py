"""Remove and retrain (ROAR) and keep and retrain (KAR): Hooker et al. (2019), §3.

For an importance estimate e of every training and test example (an explanation map
shaped like the input, computed once with the model trained on clean data), ROAR ranks
each example's input dimensions by e, replaces the top fraction t with an uninformative
value c and retrains fresh models on the modified training set, evaluated on the
modified test set. KAR (``keep=True``) replaces all but the top t instead.

:func:`remove_top` is the pure per-example core; :class:`RemoveAndRetrainDataModule`
wraps one of the project's image datamodules (in-memory ones: ``FashionMNISTDataModule``,
``MNIST5kDataModule``, small-image ``ImageFolderDataModule``) or a tabular datamodule and
serves the modified splits to ``pl.Trainer.fit``/``test``; its base :class:`ModifiedDataModule`
serves splits modified by any per-block function, and ``datamodules.roar_shards`` writes them
once as shards on disk for image sets that do not fit in memory.

Defaults and choices:

* fractions: :data:`FRACTIONS` = (0, .1, .3, .5, .7, .9), the paper's §4.2 grid;
* unit ``"element"``: every one of the C·H·W input values is ranked on its own (the
  paper ranks all 224·224·3 values of an ImageNet image); ``"pixel"`` ranks the H·W
  pixels by their channel-summed scores and replaces all channels of a chosen pixel;
  tabular rows have only elements (their d features);
* ``square=True``: scores are squared before ranking (and before summing channels for
  ``"pixel"``), as the official code does by default: the magnitude ranks, not the sign;
* count: k = ⌊t·n + ½⌋ (t·n rounded half up) of the n ranked units are replaced
  (ROAR) or kept (KAR); t = 0 replaces nothing under ROAR and everything under KAR;
* ties (a constant map, the zero gradients of dead units, saturated squares) are broken
  by a random order of the n units drawn for each example from (``seed``, example index)
  alone — a counter-based hash (:func:`uniform_hash`) on the input's device — so the
  result does not depend on how a split is chunked or batched; the order is drawn only
  for examples whose k-th largest score is tied beyond the k places (the others need none);
* fill c: the training split's per-channel mean (images) or per-feature mean (tabular,
  in the model's input space: the standardised features, so c ≈ 0);
* images are modified in their uint8 cache, BEFORE training augmentation (random crop,
  flip), as the official code modifies the stored dataset; the fill is the raw training
  mean rounded to the nearest uint8 level, at most ½/255 from the exact mean (in the
  model's normalised space ½/(255·σ_c): 0.0056 for Fashion-MNIST's σ = 0.353, tested).
  Serving the same uint8 tensors keeps the datamodule's own normalisation (the clean
  training set's mean and std, so the clean model's input space: the no-retrain variant
  evaluates the clean model on :meth:`~RemoveAndRetrainDataModule.modified_split`) and its
  seeded per-epoch order and augmentation.
"""

from __future__ import annotations

import math
from functools import cached_property, partial

import pytorch_lightning as pl
import torch

from foundation.errors import InputError

FRACTIONS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9)
UNITS = ("element", "pixel")
TIE_STREAM, RANDOM_STREAM = 0, 1  # the two uses of uniform_hash: tie order, the random control
_MASK32 = 0xFFFFFFFF
BLOCK = 2048  # examples per remove_top call of the datamodule (bounds its int64 temporaries)


def _mul32(x: torch.Tensor, constant: int) -> torch.Tensor:
    """x · constant mod 2³² for int64 x in [0, 2³²), without int64 overflow (16-bit halves)."""
    low, high = constant & 0xFFFF, constant >> 16
    return (x * low + (((x * high) & 0xFFFF) << 16)) & _MASK32


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit avalanche mix (the "lowbias32" constants), on int64 values in [0, 2³²)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def uniform_hash(seed: int, index: torch.Tensor, n: int, stream: int) -> torch.Tensor:
    """Numbers in [0, 1), (len(index), n), a pure function of (``seed``, ``stream``,
    example ``index[i]``, position j): the 32-bit mix of the four chained, divided by 2³².
    On ``index``'s device; the same for an example whether it comes alone or in a batch."""
    h = torch.full((), (seed * 0x9E3779B1 + stream) & _MASK32, dtype=torch.int64, device=index.device)
    h = _mix32(h ^ (index.to(torch.int64)[:, None] & _MASK32))
    h = _mix32(h ^ torch.arange(n, dtype=torch.int64, device=index.device))
    return h.to(torch.float64) / 2.0**32


def removed_count(fraction: float, n: int) -> int:
    """k = ⌊t·n + ½⌋: how many of n units the top fraction t holds."""
    return math.floor(fraction * n + 0.5)


def _check_fraction(fraction) -> float:
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= fraction <= 1.0:
        raise InputError(f"option fraction={fraction!r}; expected a number in [0, 1]")
    return float(fraction)


def ranked_scores(scores: torch.Tensor, unit: str = "element", square: bool = True) -> torch.Tensor:
    """What :func:`remove_top` ranks: ``scores`` (N, ...) in float64, squared where ``square``,
    summed over the channels (dim 1) for ``unit="pixel"``, as (N, n units); an ``InputError``
    on NaN or inf."""
    ranked = scores.detach().to(torch.float64)
    if square:
        ranked = ranked * ranked
    if unit == "pixel":
        ranked = ranked.sum(1)
    ranked = ranked.reshape(len(scores), -1)
    if not torch.isfinite(ranked).all():
        raise InputError("scores hold NaN or inf; expected finite importance scores")
    return ranked


def remove_top(x: torch.Tensor, scores: torch.Tensor, fraction: float, fill, unit: str = "element",
               square: bool = True, keep: bool = False, seed: int = 0,
               index: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """``x`` (N, C, H, W) images or (N, d) rows with, per example, its top ``fraction`` of
    units by ``scores`` (shaped like x) replaced by ``fill`` (ROAR), or all but them
    (``keep=True``, KAR); see the module's docstring for ``unit``, ``square``, the count and
    the ties. ``fill``: one value per channel (C,) for images, per feature (d,) for rows,
    or a number; ``index``: the examples' indices in their split (default 0 … N-1), which
    with ``seed`` fix the order of ties. Returns a new tensor of x's dtype, on x's device."""
    fraction = _check_fraction(fraction)
    if unit not in UNITS:
        raise InputError(f"option unit={unit!r}; expected one of {list(UNITS)}")
    if not isinstance(x, torch.Tensor) or x.dim() not in (2, 4) or not isinstance(scores, torch.Tensor) \
            or scores.shape != x.shape:  # fmt: skip
        raise InputError(f"inputs {tuple(getattr(x, 'shape', ()))} and scores {tuple(getattr(scores, 'shape', ()))}; "
                         "expected images (N, C, H, W) or rows (N, d) and scores of the same shape")  # fmt: skip
    if unit == "pixel" and x.dim() != 4:
        raise InputError("option unit='pixel' needs images (N, C, H, W); tabular rows are ranked per element")
    n_examples = len(x)
    index = torch.arange(n_examples) if index is None else torch.as_tensor(index)
    if index.shape != (n_examples,):
        raise InputError(f"option index of shape {tuple(index.shape)}; expected ({n_examples},), one per example")
    fill = torch.as_tensor(fill, dtype=x.dtype, device=x.device)
    if fill.dim() > 1 or (fill.dim() == 1 and len(fill) != x.shape[1]):
        raise InputError(f"option fill of shape {tuple(fill.shape)}; expected a number or one value per "
                         f"{'channel' if x.dim() == 4 else 'feature'} ({x.shape[1]},)")  # fmt: skip
    ranked = ranked_scores(scores.to(x.device), unit, square)
    n, k = ranked.shape[1], removed_count(fraction, ranked.shape[1])
    chosen = torch.zeros_like(ranked, dtype=torch.bool)
    if k > 0:
        # The top k: every unit above the k-th largest score, and among the units equal to it
        # (ties) the ones first in the example's random order (smallest uniform_hash).
        kth = ranked.kthvalue(n - k + 1, dim=1, keepdim=True).values
        above, tied = ranked > kth, ranked == kth
        need = k - above.sum(1, keepdim=True)
        chosen = above | tied
        rows = (tied.sum(1, keepdim=True) > need).squeeze(1).nonzero().squeeze(1)
        if len(rows):  # only examples with more ties than places draw their order
            order = uniform_hash(seed, index.to(x.device)[rows], n, TIE_STREAM).masked_fill(~tied[rows], 2.0)
            rank = order.argsort(dim=1).argsort(dim=1)
            chosen[rows] = above[rows] | (tied[rows] & (rank < need[rows]))
    replaced = ~chosen if keep else chosen
    replaced = replaced.view(n_examples, 1, *x.shape[2:]) if unit == "pixel" else replaced.view(x.shape)
    fill = fill.view(-1, 1, 1) if (fill.dim() == 1 and x.dim() == 4) else fill
    return torch.where(replaced, fill, x)


def _check_datamodule(datamodule) -> None:
    if not callable(getattr(datamodule, "stored_split", None)):
        raise InputError(f"datamodule {type(datamodule).__name__}; expected one that serves its splits as stored "
                         "tensors (stored_split, as_model_inputs, stored_fill: the image and tabular datamodules)")


def _raw_split(datamodule, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A split as stored (the datamodule's ``stored_split``: uint8 images or rows) and its labels."""
    if split not in ("train", "test"):
        raise InputError(f"option split={split!r}; expected 'train' or 'test'")
    return datamodule.stored_split(split)


def model_inputs(datamodule, split: str, raw: tuple[torch.Tensor, torch.Tensor] | None = None):
    """A split (``"train"`` or ``"test"``) in dataset order without augmentation, as the
    model sees it (the datamodule's ``as_model_inputs``: images normalised to float32 by
    its own ``InMemoryImageBatches`` formula, tabular rows as they are). ``raw``: stored
    tensors to use instead of the split's own (the modified ones)."""
    _check_datamodule(datamodule)
    return datamodule.as_model_inputs(*(_raw_split(datamodule, split) if raw is None else raw))


def training_fill(datamodule) -> torch.Tensor:
    """The fill c in the stored space: the datamodule's ``stored_fill`` of its training split."""
    return datamodule.stored_fill(_raw_split(datamodule, "train")[0])


class ModifiedDataModule(pl.LightningDataModule):
    """``datamodule``'s train and test splits, each as stored (uint8 images or rows) with
    ``modify[split](x, index)`` applied, served as ``datamodule`` serves them.

    ``modify``: ``"train"`` and ``"test"`` -> a function of a block of stored examples ``x``
    and their indices in the split (int64 ``index``) returning the modified block (same shape
    and dtype); it is called on blocks of :data:`BLOCK` examples, so it must give an example the
    same result in any block. ``"test"`` is the image datamodule's evaluation split (``test/``,
    else ``val/``). Drop-in for ``pl.Trainer.fit``/``test``/``predict``: training batches in the
    wrapped datamodule's seeded order, with its augmentation applied to the modified images; no
    validation split is served (ROAR trains on train and reports on test). Any other public
    attribute (``num_classes``, ``in_channels``, ``num_features``, ``batch_size`` …) is the
    wrapped datamodule's; tabular ``train_tensors``/``test_tensors`` are the modified ones, so a
    ``PopulationMLP`` trains on them. :meth:`modified_split` gives (x, y) in the model's input
    space for stacked training and for the no-retrain variant.
    """

    def __init__(self, datamodule, modify: dict) -> None:
        super().__init__()
        _check_datamodule(datamodule)
        if not isinstance(modify, dict) or sorted(modify) != ["test", "train"] \
                or not all(map(callable, modify.values())):  # fmt: skip
            raise InputError(f"option modify={modify!r}; expected {{'train': f, 'test': g}}, functions of (x, index)")
        self.datamodule, self.modify = datamodule, modify

    def __getattr__(self, name: str):
        if name.startswith("_") or name == "datamodule":
            raise AttributeError(name)
        return getattr(self.datamodule, name)

    @cached_property
    def _modified(self) -> dict:
        return {}

    def stored_split(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The modified split as stored (uint8 images or rows) and its labels, computed once."""
        if split not in self._modified:
            x, y = _raw_split(self.datamodule, split)
            self._check_split(split, x)
            blocks = (slice(a, min(a + BLOCK, len(x))) for a in range(0, len(x), BLOCK))
            self._modified[split] = torch.cat([self.modify[split](x[s], torch.arange(s.start, s.stop))
                                               for s in blocks]), y  # fmt: skip
        return self._modified[split]

    def _check_split(self, split: str, x: torch.Tensor) -> None:
        """Subclasses check their inputs for the stored split ``x`` here."""

    def modified_split(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y) of the modified ``"train"`` or ``"test"`` split in the model's input space."""
        return model_inputs(self.datamodule, split, self.stored_split(split))

    @property
    def train_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.modified_split("train")

    @property
    def test_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.modified_split("test")

    def prepare_data(self) -> None:
        self.datamodule.prepare_data()

    def setup(self, stage: str | None = None) -> None:
        self.datamodule.setup(stage)

    def train_dataloader(self):
        return self.datamodule.tensor_loader(*self.stored_split("train"), train=True)

    def test_dataloader(self):
        return self.datamodule.tensor_loader(*self.stored_split("test"), train=False)

    def predict_dataloader(self):
        return self.test_dataloader()


class RemoveAndRetrainDataModule(ModifiedDataModule):
    """``datamodule``'s train and test splits with every example's top ``fraction`` of units by
    the estimator's scores replaced by the training mean (:func:`remove_top`; ``keep=True``:
    KAR), served as ``datamodule`` serves them (:class:`ModifiedDataModule`).

    ``train_scores`` and ``test_scores``: maps shaped like the splits' model inputs, in
    dataset order (``evaluators.protocols.roar.maps.dataset_maps``). For image sets that do
    not fit in memory, ``datamodules.roar_shards.roar_datamodule`` writes the modified splits
    as shards once and serves them from disk.
    """

    def __init__(self, datamodule, train_scores: torch.Tensor, test_scores: torch.Tensor, fraction: float,
                 unit: str = "element", square: bool = True, keep: bool = False, seed: int = 0) -> None:  # fmt: skip
        super().__init__(datamodule, {"train": partial(self._remove, "train"), "test": partial(self._remove, "test")})
        self.scores = {"train": train_scores, "test": test_scores}
        self.fraction = _check_fraction(fraction)
        if unit not in UNITS:
            raise InputError(f"option unit={unit!r}; expected one of {list(UNITS)}")
        self.unit, self.square, self.keep, self.seed = unit, square, keep, seed

    @cached_property
    def fill(self) -> torch.Tensor:
        """c in the stored space (:func:`training_fill`)."""
        return training_fill(self.datamodule)

    def _check_split(self, split: str, x: torch.Tensor) -> None:
        scores = self.scores[split]
        if not isinstance(scores, torch.Tensor) or len(scores) != len(x) or scores[0].numel() != x[0].numel():
            raise InputError(f"{split} scores of shape {tuple(getattr(scores, 'shape', ()))}; expected one map "
                             f"per {split} example shaped like it ({len(x)}, {', '.join(map(str, x.shape[1:]))})")

    def _remove(self, split: str, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        scores = self.scores[split][index].reshape(x.shape).cpu()
        return remove_top(x, scores, self.fraction, self.fill, self.unit, self.square, self.keep, self.seed, index)
