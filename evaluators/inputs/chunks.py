"""A protocol's inputs read a chunk at a time, each chunk's per-input results cached in a
folder of its own, so that a split too large for memory streams through and an
interrupted run resumes (docs/fidelity_metrics.md, "Streaming and resuming").

The inputs are ``evaluators.inputs.runs.load_inputs``' (``n_inputs`` test images evenly
spaced through the test split, the first rows of a tabular split), with their explained
class and the shared references (training sample, statistics). ``chunk_size``:

* None: one chunk, read at once by ``load_inputs``; its caches lie in the report folder
  itself, as they always have (an older report folder resumes).
* an integer c: chunk j holds inputs j·c … j·c + c − 1, read from the split's dataset (an
  image folder served from files, ``ImageFolderDataModule``'s per-file dataset, decodes only
  those images) when its results are computed, and caches them in
  ``inputs/chunk-<j, 5 digits>/``, each file written whole (``foundation.files.atomic_write``).
  A chunk whose files exist is read, never recomputed; ``inputs/chunking.json`` records c and
  the number of inputs, and a resume with others is refused.

Every random draw of the protocols depends on the input's index among the N inputs, never
on the chunk: the explainers' (``evaluators.maps.explain``'s ``index``: ``Chunk.index``),
uniform noise and subsets (``offset``), insertion/deletion and ROAD (``offset`` and
``total``: ``Chunk.part``). Chunked results equal the whole set's up to float rounding
where forward passes batch rows differently.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import torch

from evaluators.inputs.counts import counted
from evaluators.inputs.runs import Inputs, load_inputs, read_items, reference_inputs, test_reader
from foundation.errors import InputError
from foundation.files import write_json
from foundation.modality import Modality, modality_of
from lightning_modules.interface import default_classes

CHUNKING = "chunking.json"


def check_chunk_size(value) -> int | None:
    """``value`` if None or a positive integer, else an ``InputError`` naming option chunk_size."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
        raise InputError(f"option chunk_size={value!r}; expected null (all inputs at once) or a positive integer")
    return value


@dataclass
class Chunk:
    """Inputs ``start`` … ``stop − 1`` of ``total``; their results are cached in ``folder``."""

    start: int
    stop: int
    total: int
    folder: Path
    load: Callable[[], Inputs]

    @cached_property
    def inputs(self) -> Inputs:
        """The chunk's inputs, read on first use (a finished chunk's never are)."""
        return self.load()

    @property
    def index(self) -> torch.Tensor | None:
        """The inputs' indices for the explainers: None for all inputs at once (their draws
        as they always were), else ``start`` … ``stop − 1``."""
        return None if (self.start, self.stop) == (0, self.total) else torch.arange(self.start, self.stop)

    @property
    def part(self) -> dict:
        """Options placing the chunk within all inputs (insertion/deletion, ROAD)."""
        return {"offset": self.start, "total": self.total}


class InputSource:
    """The N inputs of a protocol (see the module's docstring), on ``device``."""

    def __init__(self, model, data, n_inputs: int, n_baselines: int, seed: int, max_batch: int | None,
                 device: torch.device, defaults: dict, chunk_size: int | None) -> None:  # fmt: skip
        self.model, self.data, self.max_batch, self.device = model, data, max_batch, device
        self.chunk_size = check_chunk_size(chunk_size)
        if chunk_size is None:  # ``head``: all inputs, or (read in chunks) the first, with the references
            self.head = load_inputs(model, data, n_inputs, n_baselines, seed, max_batch, device, defaults)
            self.n, self.modality = len(self.head.x), self.head.modality
            return
        self.n, self._read = test_reader(data, n_inputs, defaults)
        read_whole = modality_of(data).whole_splits  # a table's references: its training rows, in memory
        sample, stats, self.modality = (reference_inputs(data, n_baselines, seed, device, defaults) if read_whole
                                        else streamed_references(data, n_baselines, device, defaults))  # fmt: skip
        x = self.read([0])
        self.head = Inputs(x, default_classes(model, x, max_batch), sample, stats, self.modality)

    def read(self, positions: list[int]) -> torch.Tensor:
        """The inputs at ``positions`` (0 … N − 1), on the device."""
        if self.chunk_size is None:
            return self.head.x[positions]
        return self._read(positions).to(self.device)

    def truth(self, chunk: Chunk) -> dict | None:
        """The ground truth of a chunk's inputs where the data know one (``probe_truth`` of the N
        inputs, part ``start`` … ``stop − 1``; docs/ground_truth.md), else None. A table's true
        attributions are of each row's explained class (the chunk's ``target``: its rows are in
        memory); an image's planted region is of no class, so its images are not read for it."""
        target = chunk.inputs.target.cpu() if self.modality.whole_splits else None
        return self.data.probe_truth(chunk.total, target, part=slice(chunk.start, chunk.stop))

    def _load(self, start: int, stop: int) -> Inputs:
        x = self.read(list(range(start, stop)))
        return replace(self.head, x=x, target=default_classes(self.model, x, self.max_batch))

    def chunks(self, run_dir: Path) -> Iterator[Chunk]:
        """The chunks in order, their folders under ``run_dir`` (see the module's docstring)."""
        if self.chunk_size is None:
            yield Chunk(0, self.n, self.n, run_dir, lambda: self.head)
            return
        layout = {"chunk_size": self.chunk_size, "n_inputs": self.n}
        record = run_dir / "inputs" / CHUNKING
        if record.is_file():
            found = json.loads(record.read_text())
            if found != layout:
                raise InputError(f"{record}: the report folder's chunks were made with {found}; expected {layout} "
                                 "(resume with the same chunk_size and n_inputs, or use a new folder)")  # fmt: skip
        else:
            record.parent.mkdir(parents=True, exist_ok=True)
            write_json(record, layout, indent=None)
        for j, start in enumerate(range(0, self.n, self.chunk_size)):
            stop = min(start + self.chunk_size, self.n)
            yield Chunk(start, stop, self.n, run_dir / "inputs" / f"chunk-{j:05d}",
                        lambda start=start, stop=stop: self._load(start, stop))  # fmt: skip


def streamed_references(data, n_baselines: int, device: torch.device, defaults: dict,
                        batch: int = 16) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], Modality]:  # fmt: skip
    """``reference_inputs`` of an image datamodule, its 1,000 images read ``batch`` at a time:
    the same training images; the mean and standard deviation per ``Modality.stat_unit`` (channel)
    summed in float64 (equal to the in-memory float32 statistics to rounding), so memory holds one batch."""
    modality = modality_of(data)
    has_train = "train" in data.split_sizes
    if has_train:
        data.setup("fit")
    name = "train" if has_train else data.eval_split
    size = data.split_sizes[name]
    picks = list(range(0, size, max(1, size // max(n_baselines, 1000))))[: max(n_baselines, 1000)]  # probe's
    n_baselines = counted("n_baselines", n_baselines, len(picks), "training split" if has_train else "test split",
                          modality.noun, defaults.get("n_baselines"))  # fmt: skip
    spread = torch.linspace(0, len(picks) - 1, n_baselines).long().tolist()  # across the classes
    dataset, kept, dims = data.eval_dataloader(name).dataset, {}, modality.stat_dims
    total = squares = count = 0
    for start in range(0, len(picks), batch):
        images = read_items(dataset, picks[start:start + batch])
        wide = images.double()
        total, squares = total + wide.sum(dims), squares + (wide * wide).sum(dims)
        count += math.prod(wide.shape[d] for d in dims)
        kept.update({i: images[i - start] for i in spread if start <= i < start + len(images)})
    mean = total / count
    std = (squares / count - mean * mean).clamp_min(0).sqrt()
    sample = torch.stack([kept[i] for i in spread])
    return sample.to(device), (mean.float().to(device), std.float().to(device)), modality


def concatenated(parts: list):
    """Per-chunk results merged in order: tensors over inputs concatenated, dicts key by key."""
    first = parts[0]
    if isinstance(first, dict):
        return {key: concatenated([p[key] for p in parts]) for key in first}
    return torch.cat(parts) if len(parts) > 1 else first
