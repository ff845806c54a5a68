"""Images whose class is decided by a known region: explanations against ground truth
(docs/ground_truth.md).

Each image (``channels`` × ``size`` × ``size``, uint8) is a background texture with one
class-specific pattern pasted at a random place; the mask of the pasted pixels is kept
(``masks``). Everything is drawn from ``seed``:

* *Background*: the sum of ``n_waves`` plane waves of random frequency (1 to ``size`` / 4 cycles
  per image), orientation and phase, plus Gaussian pixel noise (std ``noise`` of the range),
  scaled to [0, 255]; the same distribution for every class, so it carries no information about
  the label.
* *Pattern*: class k's ``pattern`` × ``pattern`` binary pattern (drawn once per class, all
  different, half its pixels on), pasted as 255 (on) and 0 (off) at a uniformly drawn position
  (the whole pattern inside the image). The label is the pattern's class; the mask is its
  square, the only region that tells the classes apart.

``train`` and ``test`` splits of ``n_train`` and ``n_test`` images, classes balanced (image i
of a split has class i mod K, the order then shuffled). A model above chance has used the
pattern: with the pattern's square replaced by background, every class's images come from one
distribution (``blank_patterns``, the check docs/ground_truth.md runs).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import torch

from datamodules.images import _ArraysDataModule
from foundation.errors import InputError

SPLIT_KEYS = {"train": 0, "test": 1}  # each split's draws: derived from (seed, key)


class PlantedPatternDataModule(_ArraysDataModule):
    """The images of the module docstring, ``num_patterns`` classes."""

    name = "planted_patterns"

    def __init__(self, num_patterns: int = 4, size: int = 32, pattern: int = 6, channels: int = 1,
                 n_train: int = 2000, n_test: int = 500, n_waves: int = 4, noise: float = 0.1,
                 data_seed: int = 0, **kwargs) -> None:  # fmt: skip
        super().__init__(**kwargs)
        for option, value, least in (("num_patterns", num_patterns, 2), ("size", size, 8), ("pattern", pattern, 2),
                                     ("n_train", n_train, num_patterns), ("n_test", n_test, num_patterns),
                                     ("n_waves", n_waves, 0), ("data_seed", data_seed, 0)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InputError(f"option {option}={value!r}; expected an integer of at least {least}")
        if channels not in (1, 3):
            raise InputError(f"option channels={channels!r}; expected 1 (grey) or 3 (colour)")
        if pattern > size // 2:
            raise InputError(f"option pattern={pattern}; expected at most size / 2 = {size // 2} pixels")
        if 2 ** (pattern * pattern) < 4 * num_patterns:
            raise InputError(f"option pattern={pattern}: too few {pattern}x{pattern} patterns for {num_patterns} "
                             "classes")  # fmt: skip
        if not 0 <= noise < 1:
            raise InputError(f"option noise={noise!r}; expected a share of the range in [0, 1)")
        self.num_patterns, self.size, self.pattern, self.channels = num_patterns, size, pattern, channels
        self.n_split = {"train": n_train, "test": n_test}
        self.n_waves, self.noise, self.data_seed = n_waves, noise, data_seed
        self.image_names = [f"pattern_{k}" for k in range(num_patterns)]

    @cached_property
    def patterns(self) -> np.ndarray:
        """(K, p, p) bool: each class's pattern, half its pixels on, all different."""
        rng = np.random.default_rng([self.data_seed, 2])
        cells, found = self.pattern * self.pattern, []
        while len(found) < self.num_patterns:
            candidate = np.zeros(cells, bool)
            candidate[rng.choice(cells, cells // 2, replace=False)] = True
            if not any((candidate == f).all() for f in found):
                found.append(candidate)
        return np.stack(found).reshape(self.num_patterns, self.pattern, self.pattern)

    def backgrounds(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """(n, H, W) float64 textures in [0, 1] (the module docstring)."""
        grid = np.arange(self.size) / self.size
        yy, xx = np.meshgrid(grid, grid, indexing="ij")
        out = np.zeros((n, self.size, self.size))
        for _ in range(self.n_waves):
            freq = rng.uniform(1, self.size / 4, (n, 1, 1))
            angle, phase = rng.uniform(0, np.pi, (n, 1, 1)), rng.uniform(0, 2 * np.pi, (n, 1, 1))
            out += np.sin(2 * np.pi * freq * (np.cos(angle) * xx + np.sin(angle) * yy) + phase)
        out += rng.normal(0, self.noise * max(self.n_waves, 1), out.shape)
        low, high = out.min((1, 2), keepdims=True), out.max((1, 2), keepdims=True)
        return (out - low) / np.where(high > low, high - low, 1.0)

    @cached_property
    def _planted(self) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per split: images (N, C, H, W) uint8, labels (N,), masks (N, H, W) bool."""
        out = {}
        for split, n in self.n_split.items():
            rng = np.random.default_rng([self.data_seed, SPLIT_KEYS[split]])
            labels = rng.permutation(np.arange(n) % self.num_patterns)
            images = self.backgrounds(rng, n)
            masks = np.zeros(images.shape, bool)
            top, left = rng.integers(0, self.size - self.pattern + 1, (2, n))
            for i, (k, r, c) in enumerate(zip(labels, top, left)):
                images[i, r:r + self.pattern, c:c + self.pattern] = self.patterns[k]
                masks[i, r:r + self.pattern, c:c + self.pattern] = True
            pixels = np.round(images * 255).astype(np.uint8)[:, None].repeat(self.channels, 1)
            out[split] = (pixels, labels.astype(np.int64), masks)
        return out

    def _arrays(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return {split: (images, labels) for split, (images, labels, _) in self._planted.items()}

    def masks(self, split: str = "test") -> torch.Tensor:
        """(N, H, W) bool: the pattern's pixels of each image of ``split`` as served (option ``subset`` applied)."""
        if split not in self._planted:
            raise InputError(f"{self.name}: no {split!r} split; it has {sorted(self._planted)}")
        masks = torch.from_numpy(self._planted[split][2])
        chosen = self.subset_indices(split)
        return masks if chosen is None else masks[chosen]

    def probe_truth(self, n: int, target=None, split: str = "test",
                    part: slice = slice(None)) -> dict[str, torch.Tensor]:  # fmt: skip
        """The truth of ``probe(n, split)``'s images (``probe_spacing``), of those at ``part`` of
        them (a protocol's chunk; all by default): ``mask`` (images, H, W); no true attributions (None)."""
        name, step = self.probe_spacing(n, split)
        return {"mask": self.masks(name)[::step][:n][part], "attributions": None}

    def blank_patterns(self, images: torch.Tensor, masks: torch.Tensor, seed: int = 0) -> torch.Tensor:
        """``images`` (N, C, H, W) uint8 with each mask's pixels replaced by a fresh background's
        (the same texture distribution): what is left carries no class information."""
        fresh = torch.from_numpy(np.round(self.backgrounds(np.random.default_rng([self.data_seed, 9, seed]),
                                                           len(images)) * 255).astype(np.uint8))  # fmt: skip
        return torch.where(masks[:, None], fresh[:, None].expand_as(images), images)


__all__ = ["PlantedPatternDataModule"]
