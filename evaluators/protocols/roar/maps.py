"""ROAR's importance maps of a whole split, computed once and cached on disk:
``dataset_maps(model, datamodule, estimator, split, cache_dir, seed=0, ...)``.

Hooker et al. (2019, §3) compute an estimate e for every training and test example with
the model trained on clean data, then rank by it for every fraction t and every retraining:
one computation per (model, estimator, split) serves the whole grid. The maps are those of
``evaluators.protocols.roar.estimators.estimator_maps`` for the split's model inputs in dataset
order without augmentation (``datamodules.roar.model_inputs``: images normalised by the
datamodule, tabular rows standardised; ``"test"`` is an image folder's ``val/`` where it
has no ``test/``).

Cache: ``<cache_dir>/<split>-<estimator>-<key>.pt`` holding ``{"maps": float32 (N, ...),
"key": ...}``, written whole or not at all (``foundation.files.atomic_write``). The key
is a SHA-256 over the model's state dict (parameters and buffers), the split's input tensor (so a changed dataset,
normalisation or split misses), the estimator, its options (tensors by their bytes), the
seed and the chunk size, and the definitions of a stochastic estimator's explainers
(``estimators.estimator_definitions``: a map of before issue 42, of one draw per chunk, misses;
a deterministic estimator's key is unchanged). A re-call with the same key
loads the file; an unreadable file, or one holding NaN or ±inf (written before
``estimator_maps`` refused such maps), is recomputed. Maps are stored as float32, 4 bytes per
input element (why not float16, and the sizes: docs/roar.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import torch
from rich.progress import Progress
from torch import nn

from datamodules.roar import model_inputs
from evaluators.protocols.roar.estimators import CHUNK, estimator_definitions, estimator_maps
from foundation.errors import InputError
from foundation.files import atomic_write

log = logging.getLogger(__name__)

CACHE_FORMAT = 1  # bump when the cached file's layout or the maps' computation changes


def _tensor_digest(t: torch.Tensor) -> str:
    t = t.detach().cpu().contiguous()
    digest = hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode())
    digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")  # 0-dim: one value
    return digest.hexdigest()


def _canonical(value):
    """Options as JSON-able values, tensors by their digest."""
    if isinstance(value, torch.Tensor):
        return {"tensor": _tensor_digest(value)}
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise InputError(f"estimator option value {value!r} of type {type(value).__name__}; expected numbers, strings, "
                     "lists, dicts or tensors (what a cache key can hold)")  # fmt: skip


def model_digest(model: nn.Module) -> str:
    """SHA-256 over the model's state dict (names, dtypes, shapes and bytes)."""
    digest = hashlib.sha256()
    for name, value in model.state_dict().items():
        digest.update(name.encode())
        digest.update(_tensor_digest(value).encode())
    return digest.hexdigest()


def cache_key(model: nn.Module, x: torch.Tensor, estimator: str, split: str, seed: int, chunk: int,
              options: dict) -> str:  # fmt: skip
    """The cache key of one split's maps (see the module's docstring)."""
    fields = {"format": CACHE_FORMAT, "model": model_digest(model), "inputs": _tensor_digest(x),
              "estimator": estimator, "split": split, "seed": seed, "chunk": chunk, "options": _canonical(options)}
    if stochastic := estimator_definitions(estimator, options):  # SmoothGrad's maps of before issue 42 miss
        fields["definitions"] = stochastic
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def dataset_maps(model: nn.Module, datamodule, estimator: str, split: str, cache_dir: str | Path, seed: int = 0,
                 chunk: int = CHUNK, progress: bool = True, **options) -> torch.Tensor:  # fmt: skip
    """The maps (float32, on the CPU, shaped like the split's model inputs) of ``estimator``
    for every example of ``split`` (``"train"`` or ``"test"``), read from ``cache_dir`` or
    computed chunk by chunk (``chunk`` examples, a rich progress bar unless ``progress`` is
    False) and cached; ``seed`` and ``options`` go to ``estimator_maps``."""
    x, _ = model_inputs(datamodule, split)
    key = cache_key(model, x, estimator, split, seed, chunk, options)
    root = Path(cache_dir).expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cache_dir {str(root)!r}: cannot create it ({err}); expected a writable folder") from err
    path = root / f"{split}-{estimator.replace(':', '-')}-{key[:16]}.pt"
    if path.is_file():
        try:
            saved = torch.load(path, weights_only=True)
            if saved["key"] == key and bool(torch.isfinite(saved["maps"].sum())):
                return saved["maps"]
            log.warning("recomputing %s: it holds %s", path, "another key" if saved["key"] != key else "NaN or ±inf")
        except Exception as err:  # noqa: BLE001 (an unreadable cache entry is redone, never used)
            log.warning("recomputing %s: it is unreadable (%s)", path, err)
    parts = []
    with Progress(disable=not progress) as bar:
        task = bar.add_task(f"{estimator} maps of {split}", total=len(x))
        for start in range(0, len(x), chunk):
            part = slice(start, min(start + chunk, len(x)))
            parts.append(estimator_maps(model, x[part], estimator, chunk=chunk, seed=seed,
                                        index=torch.arange(part.start, part.stop), **options).float().cpu())
            bar.advance(task, part.stop - part.start)
    maps = torch.cat(parts)
    atomic_write(path, lambda tmp: torch.save({"maps": maps, "key": key}, tmp))
    return maps
