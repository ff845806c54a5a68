"""A table whose every feature's true contribution is known: explanations against ground truth
(docs/ground_truth.md).

Rows x ∈ R^d are drawn from ``sample_seed``; the features, in column order:

* ``n_linear`` linear features x_l ~ N(0, 1) with weights w_kl (class k);
* ``n_interacting`` features in pairs (x_a, x_b) ~ N(0, 1), each pair adding v_k x_a x_b;
* ``n_correlated`` nuisance features, each a copy of linear feature j = i mod ``n_linear``
  with correlation ``correlation`` (ρ x_j + √(1 − ρ²) ε), never used by the label;
* ``n_irrelevant`` independent N(0, 1) features, never used.

Class scores s_k(x) = Σ_l w_kl x_l + Σ_p v_kp x_a(p) x_b(p). Two classes: the label is
1[s_1(x) > 0] with s_0 = 0 (only class 1's weights are drawn); K > 2 classes: argmax_k s_k(x).
Weights: |w| uniform in [0.5, 2], |v| in [0.5, 1.5], random signs (``weight_seed``); with
``label_noise`` a share of labels is replaced by a uniformly drawn class.

The truth: the contribution of feature i to s_t(x), the Shapley value of s_t with the features'
mean (0) as the reference: w_ti x_i for a linear feature, ½ v_tp x_a x_b for each feature of
an interacting pair (the product's value splits equally), 0 for the nuisance and irrelevant
ones (``true_attributions``); the relevant features (``relevant``) are the linear and
interacting ones. Rows are served standardised as every table here is
(``TabularDataModule``); the truth is computed on the raw values (served · std + mean).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from datamodules.tabular import TabularDataModule
from foundation.errors import InputError


class SyntheticTableDataModule(TabularDataModule):
    """The table of the module docstring, ``n_rows`` rows, ``num_classes`` classes."""

    name = "synthetic_table"

    def __init__(self, n_rows: int = 4000, n_linear: int = 4, n_interacting: int = 2, n_correlated: int = 2,
                 n_irrelevant: int = 4, correlation: float = 0.8, num_classes: int = 2, label_noise: float = 0.0,
                 sample_seed: int = 0, weight_seed: int = 0, **kwargs) -> None:  # fmt: skip
        super().__init__(**kwargs)
        counts = {"n_linear": n_linear, "n_interacting": n_interacting, "n_correlated": n_correlated,
                  "n_irrelevant": n_irrelevant}  # fmt: skip
        for option, value in {**counts, "n_rows": n_rows, "num_classes": num_classes}.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InputError(f"option {option}={value!r}; expected a non-negative integer")
        if n_interacting % 2:
            raise InputError(f"option n_interacting={n_interacting}; expected an even number (features in pairs)")
        if n_linear + n_interacting == 0:
            raise InputError("options n_linear and n_interacting are both 0; expected at least one relevant feature")
        if n_correlated and not n_linear:
            raise InputError(f"option n_correlated={n_correlated} copies linear features; expected n_linear >= 1")
        if num_classes < 2 or n_rows < 10 * num_classes:
            raise InputError(f"options num_classes={num_classes}, n_rows={n_rows}; expected at least 2 classes and "
                             "10 rows per class")  # fmt: skip
        if not 0 <= correlation < 1 or not 0 <= label_noise < 1:
            raise InputError(f"options correlation={correlation}, label_noise={label_noise}; expected shares in [0, 1)")
        self.n_rows, self.num_classes = n_rows, num_classes
        self.correlation, self.label_noise = correlation, label_noise
        self.counts, self.sample_seed, self.weight_seed = counts, sample_seed, weight_seed

    @classmethod
    def dataset_name(cls, options: dict) -> str:
        """The dataset part of a train.py run folder: ``synthetic_table``."""
        return cls.name

    @property
    def weights(self) -> tuple[np.ndarray, np.ndarray]:
        """(w (K, n_linear), v (K, n_interacting / 2)), float64; two classes: class 0's are 0."""
        rng = np.random.default_rng(self.weight_seed)
        k = 1 if self.num_classes == 2 else self.num_classes
        pairs = self.counts["n_interacting"] // 2

        def draw(n, low, high):
            return rng.uniform(low, high, (k, n)) * rng.choice([-1.0, 1.0], (k, n))

        w, v = draw(self.counts["n_linear"], 0.5, 2.0), draw(pairs, 0.5, 1.5)
        if self.num_classes == 2:
            w, v = np.vstack([np.zeros_like(w), w]), np.vstack([np.zeros_like(v), v])
        return w, v

    @property
    def relevant(self) -> torch.Tensor:
        """(d,) bool: the features the label depends on (the linear and interacting ones)."""
        relevant = self.counts["n_linear"] + self.counts["n_interacting"]
        return torch.arange(self.num_features) < relevant

    def pairs(self) -> tuple[slice, slice]:
        """The columns of the first and of the second feature of each interacting pair."""
        linear, interacting = self.counts["n_linear"], self.counts["n_interacting"]
        return slice(linear, linear + interacting, 2), slice(linear + 1, linear + interacting, 2)

    def scores(self, raw: np.ndarray) -> np.ndarray:
        """s_k(x) (N, K) of raw rows (N, d)."""
        w, v = self.weights
        first, second = self.pairs()
        return raw[:, :self.counts["n_linear"]] @ w.T + (raw[:, first] * raw[:, second]) @ v.T

    def load_raw(self) -> tuple[pd.DataFrame, np.ndarray, str]:
        rng = np.random.default_rng(self.sample_seed)
        linear, interacting = self.counts["n_linear"], self.counts["n_interacting"]
        relevant = rng.standard_normal((self.n_rows, linear + interacting))
        copies = [relevant[:, i % linear] * self.correlation + np.sqrt(1 - self.correlation**2)
                  * rng.standard_normal(self.n_rows) for i in range(self.counts["n_correlated"])]  # fmt: skip
        irrelevant = rng.standard_normal((self.n_rows, self.counts["n_irrelevant"]))
        raw = np.column_stack([relevant, *copies, irrelevant]) if copies else np.column_stack([relevant, irrelevant])
        label = self.scores(raw).argmax(1).astype(np.int64)
        noisy = rng.random(self.n_rows) < self.label_noise
        label[noisy] = rng.integers(0, self.num_classes, int(noisy.sum()))
        names = ([f"linear_{i}" for i in range(linear)] + [f"interacting_{i}" for i in range(interacting)]
                 + [f"correlated_{i}" for i in range(self.counts["n_correlated"])]
                 + [f"irrelevant_{i}" for i in range(self.counts["n_irrelevant"])])  # fmt: skip
        return pd.DataFrame(raw, columns=names), label, f"synthetic_table(sample_seed={self.sample_seed})"

    def raw_rows(self, x: torch.Tensor) -> np.ndarray:
        """Served (standardised) rows (N, d) as raw values, float64."""
        mean, std = self.standardisation
        return (x.double() * std.double() + mean.double()).numpy()

    def true_attributions(self, x: torch.Tensor, target: torch.Tensor | int) -> torch.Tensor:
        """(N, d) float64: each feature's contribution to s_t(x) of served rows ``x`` (the module
        docstring), t = ``target`` per row (or one class for all)."""
        if x.dim() != 2 or x.shape[1] != self.num_features:
            raise InputError(f"rows of shape {tuple(x.shape)}; expected (N, {self.num_features}) rows of this table")
        target = torch.as_tensor(target).expand(len(x)).numpy()
        if (target < 0).any() or (target >= self.num_classes).any():
            raise InputError(f"target {sorted(set(target.tolist()))}; expected classes 0 .. {self.num_classes - 1}")
        raw, (w, v), (first, second) = self.raw_rows(x), self.weights, self.pairs()
        linear = self.counts["n_linear"]
        out = np.zeros_like(raw)
        out[:, :linear] = raw[:, :linear] * w[target]
        out[:, first] = out[:, second] = 0.5 * raw[:, first] * raw[:, second] * v[target]
        return torch.from_numpy(out)

    def probe_truth(self, n: int, target: torch.Tensor | int, split: str = "test",
                    part: slice = slice(None)) -> dict[str, torch.Tensor]:  # fmt: skip
        """The truth of ``probe(n, split)``'s rows, of those at ``part`` of them (a protocol's
        chunk; all by default): ``mask`` (rows, d) the relevant features, ``attributions``
        (rows, d) float64 of class ``target`` (one per row of the part, or one for all:
        ``true_attributions``)."""
        x = self.probe(n, split)[0][part]
        return {"mask": self.relevant.expand(len(x), -1).clone(), "attributions": self.true_attributions(x, target)}


__all__ = ["SyntheticTableDataModule"]
