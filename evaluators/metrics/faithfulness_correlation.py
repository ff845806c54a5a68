"""Faithfulness correlation (Bhatt, Weller & Moura 2020, "Evaluating and aggregating
feature-based model explanations", IJCAI: their faithfulness μ_F), as Decker et al.
(2024, §3 "FCOR" and App. C.1) score aggregated explanations with it.

For an input x with map φ (one value per unit), its explained output f and random
binary perturbations I (1 on the units of a random subset S, replaced by x_b), with
h(x, x_b, I) the perturbed input,

    FCOR(φ) = corr_I( Iᵀφ , f(x) − f(h(x, x_b, I)) ),

the Pearson correlation, over n samples I_1 … I_n, of the map's mass on the removed units
with the output's drop. Higher is better (range [−1, 1]). It is undefined (NaN) where
either side is constant over the n samples (a constant map on subsets of equal size, a
model blind to the removals).

The samples are those of infidelity, ``evaluators.metrics.infidelity.subset_perturbations``
(Decker et al. "use the same kind of perturbation" for both): ``faithfulness_correlation
(maps, samples)`` scores every map of the same inputs, for FCOR and INFD alike, on one set
of N n forward passes. Their defaults are Decker et al.'s:

* **f**: the explained output, the raw logit of the target class (default: the predicted
  class) of an image classifier, a tabular model's ``explained_output``.
* **Subsets** (``share``, ``units``): a random 20 % (``share=0.2``) of each image's SLIC
  superpixels (``units="superpixels"``; Decker et al.'s "image area of 20 %") or of its
  pixels (``units="pixels"``: |S| = ⌊share H W⌋ pixels, at least 1), or of a tabular row's
  features; all C channels of a pixel together.
* **Replacement** x_b (``baseline``): a Gaussian-blurred copy of each image (σ = 10;
  Decker et al.'s main FCOR), or a tensor of x's shape or one input's: zeros for their
  FCOR_0 (the training mean on standardised inputs), the training set's feature means for
  tabular rows.
* **n** = 200 samples (``n_samples``, Decker et al.'s m_eval), seeded per input and kept
  apart from the aggregators' fitting samples (``stream``).

How these compare with Decker et al.'s code and Quantus: docs/fidelity_metrics.md.

``FaithfulnessCorrelation`` (a torchmetrics ``Metric``) averages FCOR over the inputs
passed to ``update(model, x, maps, target=None)`` where it is defined.
"""

from __future__ import annotations

import torch

from evaluators.metrics.infidelity import SubsetMetric, SubsetSamples, check_maps
from evaluators.metrics.registry import METRICS


def pearson(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise Pearson correlation of (N, n) a and b; NaN where a row of either is
    constant (its spread within n ε max|row|, ε the dtype's resolution: sums of the same
    values in another order differ by rounding only)."""

    def centred(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = v - v.mean(1, keepdim=True)
        return c, c.abs().amax(1) <= v.abs().amax(1) * v.shape[1] * torch.finfo(v.dtype).eps

    (a, flat_a), (b, flat_b) = centred(a), centred(b)
    correlation = (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))
    return torch.where(flat_a | flat_b, torch.nan, correlation)


def faithfulness_correlation(maps: torch.Tensor, samples: SubsetSamples) -> torch.Tensor:
    """(N,) FCOR of ``maps`` (N, *S) on ``samples`` (from ``subset_perturbations``), in the
    maps' and deltas' common dtype, on the maps' device; NaN where undefined."""
    check_maps(maps, samples)
    deltas = samples.deltas.to(maps.device)
    dtype = torch.promote_types(maps.dtype, deltas.dtype)
    return pearson(samples.attribution_sums(maps.to(dtype)), deltas.to(dtype))


@METRICS.register("fcor", needs=("model", "maps"), higher_is_better=True, function=faithfulness_correlation)
class FaithfulnessCorrelation(SubsetMetric):
    """The mean faithfulness correlation (higher is better) over the inputs where it is
    defined; the others are counted in the state ``left_out``. Args: those of ``SubsetMetric``
    (input i of each update has the samples of index i)."""

    higher_is_better = True
    leaves_out_undefined = True

    def score(self, maps: torch.Tensor, samples: SubsetSamples) -> torch.Tensor:
        return faithfulness_correlation(maps, samples)


# The public, checked entry points (maps with NaN or ±inf refused: tests/faults/test_nonfinite_maps.py);
# the other functions here are steps inside ``faithfulness_correlation``, which checks their maps once.
__all__ = ["FaithfulnessCorrelation", "faithfulness_correlation"]
