"""ROAR's rankings of a whole image split, computed in a sharded, resumable pass and stored
compactly: ``ranking_pass(model, datamodule, estimator, split, cache_dir, ...)`` ->
:class:`RankingStore`, whose ``modifier(fraction, fill, unit, keep)`` modifies uint8 images.

What ROAR needs of an example's map is not the map but the order in which
``datamodules.roar.remove_top`` removes its units: the units sorted by score (``ranked_scores``:
float64, squared where ``square``, channel-summed for ``unit="pixel"``) from the largest,
equal scores by ascending tie hash (``uniform_hash(seed, index, n, TIE_STREAM)``, distinct
within an example). The top k = ``removed_count(t, n)`` of that order are exactly the units
``remove_top`` replaces for fraction t (ROAR) or keeps (KAR), ties included. Two layouts
(``store``; their sizes measured in docs/roar.md):

* ``"levels"`` (default): per unit its level, the 1-based position j of the smallest of the
  configured positive ``fractions`` f_1 < … < f_m whose top k_j holds it, m + 1 where none
  does; the mask of f_j is ``level <= j``. Exact for every fraction whose count k is one of
  k_1 … k_m (or 0), so the fractions are part of the key. Stored as b = ⌈log2(m + 2)⌉ bit
  planes (:func:`pack_levels`): 3 bits per unit for the paper's five positive fractions.
* ``"order"``: the first k_m positions of the order itself (uint16 where n <= 65,536, else
  int32), exact for every fraction up to f_m.

The pass reads the split ``chunk`` images at a time (``datamodule.stored_images``: decoded
from the files for large images), turns them into model inputs as the in-memory path does
(``as_model_inputs``), computes ``estimator_maps`` on the model's device (the chunk's
examples' split indices as ``index``: every noise estimator draws per image from (seed,
index), so a map does not depend on the process or on how many ran) and reduces each
map to its ranking on the CPU (the float64 sums of ``remove_top``'s CPU path). Results go to
``<cache_dir>/<split>-<estimator>-<key16>.rankings/``: ``manifest.json`` and shard files
``shard-<j>.pt`` of ``shard_size`` images each (images j·S … (j+1)·S − 1), each written whole
(``atomic_write``, reproducible bytes). A shard file holding the key is never recomputed;
an unreadable one, or one with another key, is. ``shard=(i, k)`` computes shard files
i, i + k, … only (processes or machines sharing the folder). ``shard_size`` is a multiple
of ``chunk``, so chunks start where the in-memory ``dataset_maps(chunk=chunk)`` starts them.

The key (SHA-256): the model's state dict, the split's fingerprint (``stored_fingerprint``:
the files' names, sizes, modification times, geometry, subset and labels), the
normalisation, the estimator, its options, seed, chunk, shard size, units, ``square``,
``store`` and its fractions, and a stochastic estimator's definitions (as ``maps.cache_key``).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from datamodules.roar import FRACTIONS, TIE_STREAM, UNITS, ranked_scores, removed_count, uniform_hash
from datamodules.roar_shards import stored_size
from evaluators.protocols.roar.estimators import estimator_definitions, estimator_maps
from evaluators.protocols.roar.maps import _canonical, model_digest
from foundation.errors import InputError
from foundation.files import atomic_write, dead_writer, json_text

log = logging.getLogger(__name__)

RANKINGS_FORMAT = 1  # bump when a shard's layout or the rankings' computation changes
STORES = ("levels", "order")
SHARD_SIZE, PASS_CHUNK = 256, 32
MANIFEST = "manifest.json"


def removal_order(scores: torch.Tensor, unit: str = "element", square: bool = True, seed: int = 0,
                  index: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """(N, n) int64: each example's units in the order ``remove_top`` removes them (see the
    module's docstring); ``index``: the examples' split indices (default 0 … N − 1)."""
    ranked = ranked_scores(scores, unit, square)
    index = torch.arange(len(ranked)) if index is None else torch.as_tensor(index)
    by_hash = uniform_hash(seed, index.to(ranked.device), ranked.shape[1], TIE_STREAM).argsort(dim=1)
    by_score = ranked.gather(1, by_hash).argsort(dim=1, descending=True, stable=True)
    return by_hash.gather(1, by_score)


def _counts(fractions: Sequence[float], n: int) -> list[int]:
    return [removed_count(f, n) for f in fractions]


def order_levels(order: torch.Tensor, fractions: Sequence[float]) -> torch.Tensor:
    """uint8 (N, n): unit u's level, the 1-based j of the smallest of the ascending positive
    ``fractions`` whose top k_j (the first k_j of ``order``) holds u; len(fractions) + 1 if none."""
    n = order.shape[1]
    counts = torch.tensor(_counts(fractions, n), dtype=torch.int64)
    position_level = (torch.searchsorted(counts, torch.arange(n), right=True) + 1).to(torch.uint8)
    levels = torch.empty(order.shape, dtype=torch.uint8)
    levels.scatter_(1, order.cpu(), position_level.expand(order.shape).contiguous())
    return levels


def level_bits(fractions: Sequence[float]) -> int:
    """Bits per unit of the levels 1 … m + 1 of m positive fractions."""
    return (len(fractions) + 1).bit_length()


def pack_levels(levels: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 levels (N, n) as ``bits`` bit planes, each packed 8 units a byte: uint8 (N, bits, ⌈n/8⌉)."""
    planes = np.stack([(levels.numpy() >> b) & 1 for b in range(bits)], axis=1)
    return torch.from_numpy(np.packbits(planes, axis=2))


def unpack_levels(packed: torch.Tensor, n: int) -> torch.Tensor:
    """The inverse of :func:`pack_levels`: uint8 (N, n)."""
    planes = np.unpackbits(packed.numpy(), axis=2, count=n)
    return torch.from_numpy((planes << np.arange(planes.shape[1], dtype=np.uint8)[:, None]).sum(1, dtype=np.uint8))


def _check_fractions(fractions) -> tuple[float, ...]:
    values = tuple(sorted({float(f) for f in fractions if f != 0})) if isinstance(fractions, (list, tuple)) else ()
    if not values or len(values) > 254 or any(not 0.0 < f <= 1.0 for f in values):
        raise InputError(f"option fractions={fractions!r}; expected a list of 1 to 254 numbers in [0, 1], "
                         "not all 0")  # fmt: skip
    return values


def _check_options(split, units, store, chunk, shard_size, shard) -> tuple[int, int]:
    if split not in ("train", "test"):
        raise InputError(f"option split={split!r}; expected 'train' or 'test'")
    if not units or any(u not in UNITS for u in units) or len(set(units)) != len(units):
        raise InputError(f"option units={units!r}; expected distinct names of {list(UNITS)}")
    if store not in STORES:
        raise InputError(f"option store={store!r}; expected one of {list(STORES)}")
    for option, value in (("chunk", chunk), ("shard_size", shard_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"option {option}={value!r}; expected a positive integer")
    if shard_size % chunk:
        raise InputError(f"option shard_size={shard_size}; expected a multiple of chunk={chunk}")
    shard = (0, 1) if shard is None else tuple(shard)
    if len(shard) != 2 or not 0 <= shard[0] < shard[1]:
        raise InputError(f"option shard={shard!r}; expected (i, k) with 0 <= i < k")
    return shard


def _tensor_bytes(payload: dict) -> bytes:
    """``torch.save`` into memory: the same payload gives the same bytes (no file name inside)."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


class RankingStore:
    """A rankings folder written by :func:`ranking_pass`: its ``manifest.json`` and shard files."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        try:
            self.manifest = json.loads((self.root / MANIFEST).read_text())
        except (OSError, ValueError) as err:
            raise InputError(f"rankings folder {str(self.root)!r}: no readable {MANIFEST} ({err}); expected the "
                             "folder of a ranking pass") from err  # fmt: skip
        self.key, self.count = self.manifest["key"], self.manifest["count"]
        self.shard_size = self.manifest["shard_size"]
        self.image_shape = tuple(self.manifest["image_shape"])
        self.store, self.fractions = self.manifest["store"], tuple(self.manifest["fractions"])
        self._cached: tuple[int, dict] | None = None
        self.computed: list[int] = []  # the shard files the last ranking_pass computed

    @property
    def n_shards(self) -> int:
        return -(-self.count // self.shard_size)

    def shard_path(self, j: int) -> Path:
        return self.root / f"shard-{j:06d}.pt"

    def read_shard(self, j: int) -> dict | None:
        """Shard j's payload, or None where it is missing, unreadable or of another key."""
        path = self.shard_path(j)
        if not path.is_file():
            return None
        try:
            payload = torch.load(path, weights_only=True, mmap=True)  # tensors mapped, read when used
            if payload["key"] == self.key and payload["start"] == j * self.shard_size:
                return payload
            log.warning("recomputing %s: it holds another key", path)
        except Exception as err:  # noqa: BLE001 (an unreadable shard is redone, never used)
            log.warning("recomputing %s: it is unreadable (%s)", path, err)
        return None

    def missing(self, shard: tuple[int, int] = (0, 1)) -> list[int]:
        """The shards of ``shard=(i, k)`` not yet (validly) on disk."""
        return [j for j in range(shard[0], self.n_shards, shard[1]) if self.read_shard(j) is None]

    def _units_of(self, j: int) -> dict:
        if self._cached is None or self._cached[0] != j:
            payload = self.read_shard(j)
            if payload is None:
                raise InputError(f"rankings shard {str(self.shard_path(j))!r} is missing or unreadable; run the "
                                 "ranking pass over every shard first")  # fmt: skip
            self._cached = j, payload["units"]
        return self._cached[1]

    def mask(self, index: torch.Tensor, fraction: float, unit: str = "element", keep: bool = False) -> torch.Tensor:
        """The units ``remove_top`` replaces in examples ``index`` (split positions) for
        ``fraction`` (``keep``: KAR, all but the top): bool (n, C, H, W), or (n, 1, H, W) for pixels."""
        if unit not in self.manifest["units"]:
            raise InputError(f"option unit={unit!r}; this store holds {self.manifest['units']}")
        index = torch.as_tensor(index, dtype=torch.int64)
        if index.dim() != 1 or (len(index) and (index.min() < 0 or index.max() >= self.count)):
            raise InputError(f"option index {index.tolist()[:8]}; expected split positions 0 … {self.count - 1}")
        c, h, w = self.image_shape
        n = c * h * w if unit == "element" else h * w
        k = removed_count(fraction, n)
        out = torch.zeros(len(index), n, dtype=torch.bool)
        if self.store == "levels":
            counts = [0, *_counts(self.fractions, n)]
            if k not in counts:
                raise InputError(f"option fraction={fraction!r}: this store ranks for fractions {list(self.fractions)} "
                                 "only (store='levels'); expected one of them or 0")  # fmt: skip
            level = counts.index(k)
        elif k > removed_count(self.fractions[-1], n):
            raise InputError(f"option fraction={fraction!r}; this store holds the order up to {self.fractions[-1]}")
        for j in index.div(self.shard_size, rounding_mode="floor").unique().tolist():
            rows = (index // self.shard_size == j).nonzero().squeeze(1)
            stored = self._units_of(j)[unit][index[rows] - j * self.shard_size]
            if self.store == "levels":
                out[rows] = unpack_levels(stored, n) <= level
            else:
                top = stored[:, :k].to(torch.int64)
                out[rows] = out[rows].scatter(1, top & 0xFFFF if stored.dtype == torch.int16 else top, True)
        out = ~out if keep else out
        return out.view(len(index), *((c, h, w) if unit == "element" else (1, h, w)))

    def modifier(self, fraction: float, fill, unit: str = "element",
                 keep: bool = False) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:  # fmt: skip
        """``modify(x_uint8 (n, C, H, W), index (n,)) -> uint8``: the images of split positions
        ``index`` with :meth:`mask`'s units replaced by ``fill`` (one uint8 value per channel, or one)."""
        fill = torch.as_tensor(fill)
        if fill.dim() > 1 or (fill.dim() == 1 and len(fill) != self.image_shape[0]) or fill.is_floating_point() \
                and not torch.equal(fill, fill.round()) or bool((fill < 0).any() | (fill > 255).any()):  # fmt: skip
            raise InputError(f"option fill={fill.tolist()}; expected uint8 values, one or one per channel "
                             f"({self.image_shape[0]})")  # fmt: skip
        fill = fill.to(torch.uint8).view(-1, 1, 1) if fill.dim() == 1 else fill.to(torch.uint8)

        def modify(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
            if x.dtype != torch.uint8 or tuple(x.shape[1:]) != self.image_shape or len(x) != len(index):
                raise InputError(f"images {tuple(x.shape)} ({x.dtype}) and index ({len(index)},); expected uint8 "
                                 f"(n, {', '.join(map(str, self.image_shape))}) and n split positions")  # fmt: skip
            return torch.where(self.mask(index, fraction, unit, keep).to(x.device), fill.to(x.device), x)

        return modify


def streamed_fill(datamodule, chunk: int = SHARD_SIZE, split: str = "train") -> torch.Tensor:
    """ROAR's fill c (``datamodules.roar.training_fill``: the training split's per-channel mean
    rounded to uint8) without holding the split: the normalisation's mean where it is that of the
    whole split (computed once by the same exact integer sums and cached), else the sums of
    ``chunk`` images at a time (``stored_images``), as ``channel_stats`` sums them, so equal to it
    for a split in memory too. ``split="test"``: the evaluation split's mean instead, for a folder
    without ``train/`` (the measurement tools)."""
    stored = datamodule.stored_split_name(split)
    count = datamodule.split_sizes.get(stored, 0)
    if not count:
        raise InputError(f"{datamodule.source}: no {stored}/ split; ROAR's fill is the training images' mean")
    if datamodule.mean_option is None and datamodule.stats_split == stored and stored not in datamodule.subset:
        return (torch.tensor(datamodule.normalization[0], dtype=torch.float64) * 255.0).round().to(torch.uint8)
    total = torch.zeros(datamodule.image_shape[0], dtype=torch.int64)
    for a in range(0, count, chunk):
        total += datamodule.stored_images(split, torch.arange(a, min(a + chunk, count)))[0].to(torch.int64).sum(
            dim=(0, 2, 3))  # fmt: skip
    mean = total.double() / (255.0 * (count * datamodule.image_shape[1] * datamodule.image_shape[2]))
    return (mean * 255.0).round().to(torch.uint8)


def pass_key(model: nn.Module, datamodule, estimator: str, split: str, seed: int, chunk: int, shard_size: int,
             units, square: bool, store: str, fractions, options: dict) -> str:  # fmt: skip
    """The key of one ranking pass (see the module's docstring)."""
    fields = {"format": RANKINGS_FORMAT, "model": model_digest(model), "data": datamodule.stored_fingerprint(split),
              "normalization": [list(v) for v in datamodule.normalization], "estimator": estimator, "split": split,
              "seed": seed, "chunk": chunk, "shard_size": shard_size, "units": list(units), "square": square,
              "store": store, "fractions": list(fractions), "options": _canonical(options)}  # fmt: skip
    if stochastic := estimator_definitions(estimator, options):  # rankings of SmoothGrad's maps of before issue 42 miss
        fields["definitions"] = stochastic
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _shard_payload(model, datamodule, estimator, split, key, start, stop, chunk, seed, units, square, store,
                   fractions, options) -> dict:  # fmt: skip
    parts: dict[str, list[torch.Tensor]] = {u: [] for u in units}
    for a in range(start, stop, chunk):
        index = torch.arange(a, min(a + chunk, stop))
        x, _ = datamodule.as_model_inputs(*datamodule.stored_images(split, index))
        maps = estimator_maps(model, x, estimator, chunk=chunk, seed=seed, index=index, **options).float().cpu()
        for unit in units:
            order = removal_order(maps, unit, square, seed, index)
            if store == "levels":
                parts[unit].append(pack_levels(order_levels(order, fractions), level_bits(fractions)))
            else:
                top = order[:, : removed_count(fractions[-1], order.shape[1])]
                parts[unit].append(top.to(torch.int16 if order.shape[1] <= 2**16 else torch.int32))
    return {"key": key, "start": start, "stop": stop, "units": {u: torch.cat(p) for u, p in parts.items()}}


def ranking_pass(model: nn.Module, datamodule, estimator: str, split: str, cache_dir: str | Path, seed: int = 0,
                 chunk: int = PASS_CHUNK, shard_size: int = SHARD_SIZE, shard: tuple[int, int] | None = None,
                 units: Sequence[str] = ("element",), square: bool = True, store: str = "levels",
                 fractions: Sequence[float] = FRACTIONS, descending: bool = False,
                 **options) -> RankingStore:  # fmt: skip
    """Compute the missing shard files of ``shard=(i, k)`` (None: all) of ``estimator``'s
    rankings of ``split`` (``"train"`` or ``"test"``) of image ``datamodule`` for ``units``,
    and return the store (see the module's docstring). ``options`` go to ``estimator_maps``.
    ``descending``: the last missing shard first (a process helping others that go up)."""
    shard = _check_options(split, tuple(units), store, chunk, shard_size, shard)
    fractions = _check_fractions(list(fractions))
    fractions = fractions if store == "levels" else fractions[-1:]
    if not callable(getattr(datamodule, "stored_images", None)):
        raise InputError(f"datamodule {type(datamodule).__name__}; expected an image datamodule (stored_images)")
    datamodule.prepare_data()
    count = stored_size(datamodule, split)
    key = pass_key(model, datamodule, estimator, split, seed, chunk, shard_size, units, square, store, fractions,
                   options)  # fmt: skip
    root = Path(cache_dir).expanduser() / f"{split}-{estimator.replace(':', '-')}-{key[:16]}.rankings"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cache_dir {str(cache_dir)!r}: cannot create {root.name} ({err}); expected a writable "
                         "folder") from err  # fmt: skip
    manifest = {"key": key, "count": count, "shard_size": shard_size, "image_shape": list(datamodule.image_shape),
                "units": list(units), "store": store, "fractions": list(fractions), "estimator": estimator,
                "split": split, "seed": seed, "chunk": chunk, "square": square}  # fmt: skip
    text = json_text(manifest, indent=1, sort_keys=True) + "\n"
    path = root / MANIFEST
    if not path.is_file() or path.read_text() != text:
        atomic_write(path, lambda tmp: tmp.write_text(text))
    rankings = RankingStore(root)
    todo = rankings.missing(shard)[::-1 if descending else 1]
    log.info("%s rankings of %s: %d of %d shard files to compute in %s", estimator, split, len(todo),
             len(range(shard[0], rankings.n_shards, shard[1])), root)  # fmt: skip
    for j in todo:
        start, stop = j * shard_size, min((j + 1) * shard_size, count)
        payload = _shard_payload(model, datamodule, estimator, split, key, start, stop, chunk, seed, units, square,
                                 store, fractions, options)  # fmt: skip
        data = _tensor_bytes(payload)
        atomic_write(rankings.shard_path(j), lambda tmp: tmp.write_bytes(data))
    if not rankings.missing():  # every shard done: a dead pass's temporary files are left over
        for stale in root.glob(".shard-*.pt.tmp-*"):
            if dead_writer(stale):  # not a live process's (another DDP rank may still write a copy)
                stale.unlink(missing_ok=True)
    rankings.computed = todo
    return rankings
