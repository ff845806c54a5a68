"""Localisation: how well a map finds a known ground truth, as Quantus 0.6's localisation
metrics (Hedström et al. 2023) and OpenXAI's ground-truth feature agreement (Agarwal et al.
2022) define them.

A map φ of one input has d entries (the H·W pixels of an (H, W) map, the d features of a
row); a = φ, or |φ| with ``abs=True``; the truth is a boolean mask s ∈ {0, 1}^d of the
relevant entries (the planted region of an image, the relevant features of a row), with
S = {i : s_i = 1}, |S| ≥ 1 entries. Entries are ranked by a, largest first (ties: to the
lower index, a stable sort; Quantus's ``np.argsort`` leaves ties in no fixed order, so the
two can differ on maps with ties only); T_k is the top k. Then, per input:

* ``pointing_game`` (Zhang et al. 2018): 1 if an entry of S holds the largest a (any of
  several tied largest), else 0; ``weighted=True``: a hit scores 1 − |S|/d (a hit in a
  small region is worth more), Quantus's documented intent: its 0.6 ``weighted=True``
  raises a TypeError (it assigns an (n, 1) array through a boolean index).
* ``attribution_localisation`` (Kohlbrenner et al. 2020): μ = Σ_{i∈S} a_i / Σ_i a_i, with
  a = |φ| by default (``abs=True``, Quantus's default) or max(φ, 0) (``positive=True``);
  undefined (NaN) where μ > 1 (a signed map whose inside outweighs its total, as Quantus).
  Quantus adds 1e-9 to the denominator (a difference below 1e-9 after its normalisation)
  and its ``weighted`` variant multiplies μ by |S| over a size it takes from the batch
  axis (``x_batch[2:]``), so this module offers no weighted variant.
* ``top_k_intersection`` (Theiner et al. 2021): |T_k ∩ S| / k, default k = 1000 (Quantus's,
  for 32 × 32 images and larger: a table needs a k of its own, 1 ≤ k ≤ d);
  ``concept_influence=True`` multiplies by d/|S|.
* ``relevance_mass_accuracy`` (Arras et al. 2022): Σ_{i∈S} a_i / Σ_i a_i (signed unless
  ``abs``).
* ``relevance_rank_accuracy`` (Arras et al. 2022): |T_{|S|} ∩ S| / |S|.
* ``localisation_auc`` (Fawcett 2006, as Quantus's ``AUC``): the area under the ROC curve of
  a as a score for s, Σ_{i∈S} r_i − |S|(|S| + 1)/2 over |S|(d − |S|), r the ranks of a
  ascending with ties given their mean rank (the Mann-Whitney form of scikit-learn's
  ``roc_curve`` and ``auc``: a tie between inside and outside counts one half); it needs an
  entry outside S too.
* ``ground_truth_agreement`` (OpenXAI's feature agreement, FA, against the true attributions
  of a synthetic table): |T_k(|φ|) ∩ T_k(|t|)| / k, the truth t (N, d) real attributions (or
  a mask) ranked by |t| as the map is, ties to the lower index:
  ``agreement_functional.feature_agreement`` of the pair (map, truth).

Quantus's default ``normalise=True`` divides the maps by their largest |value| (over the
batch): a positive scale to which every score above is invariant, so these take no
``normalise`` option. Higher is better for all. A map whose a sums to 0 has no mass
(attribution localisation, relevance mass accuracy: NaN, counted in ``left_out`` by the
Metrics). Each function takes maps (N, d), (N, H, W) or (N, 1, H, W) and a truth of the same
shape (a (N, 1, H, W) mask or map is read as (N, H, W)) and returns (N,) in the maps' dtype;
maps with NaN or ±inf, a truth of another shape, a mask with a value other than 0 and 1, or
an input whose mask is empty are refused with an ``InputError`` naming which.

**Over a population.** The scores of M members' maps of the same inputs are M calls (or one
call on the maps flattened to (M·N, ...) with the truth repeated M times); their means over
inputs, a (M, R) table of R rows (explainers, aggregators), give the seed-level intervals and
ranking stability of ``evaluators.metrics.seed_robustness`` (docs/fidelity_metrics.md).
"""

from __future__ import annotations

import torch

from evaluators.metrics.agreement_functional import average_ranks, feature_agreement
from evaluators.metrics.registry import register_function
from foundation.errors import InputError
from foundation.finite import check_finite


def _units(t: torch.Tensor) -> torch.Tensor:
    """An (N, 1, H, W) tensor read as (N, H, W)."""
    return t[:, 0] if t.dim() == 4 and t.shape[1] == 1 else t


def check_maps_and_truth(maps, truth, mask: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``maps`` and ``truth`` flattened to (N, d): finite float maps (N, d), (N, H, W) or
    (N, 1, H, W) and a truth of the same shape; ``mask``: the truth is a mask (values 0 and 1,
    returned boolean, at least one 1 per input), else finite values (returned as float)."""
    if (not isinstance(maps, torch.Tensor) or _units(maps).dim() not in (2, 3) or len(maps) == 0
            or not maps.is_floating_point()):  # fmt: skip
        raise InputError(f"maps of shape {tuple(getattr(maps, 'shape', ()))}; expected float maps (N, d), (N, H, W) "
                         "or (N, 1, H, W)")  # fmt: skip
    check_finite(maps, "maps", "map")
    what = "a boolean mask" if mask else "true attributions"
    if not isinstance(truth, torch.Tensor) or _units(truth).shape != _units(maps).shape:
        raise InputError(f"truth of shape {tuple(getattr(truth, 'shape', ()))} for maps of shape "
                         f"{tuple(maps.shape)}; expected {what} of the maps' shape")  # fmt: skip
    a, s = _units(maps).flatten(1), _units(truth).flatten(1)
    if not mask:
        s = s.to(a.dtype)
        check_finite(s, "truth", "row")
        return a, s
    if s.dtype != torch.bool:
        if bool(((s != 0) & (s != 1)).any()):
            raise InputError("truth: a mask with values other than 0 and 1; expected a boolean mask")
        s = s != 0
    empty = (~s.any(1)).nonzero()
    if len(empty):
        raise InputError(f"truth: the mask of input {empty[0].item()} is empty ({len(empty)} of {len(s)} inputs); "
                         "expected at least one relevant entry per input")  # fmt: skip
    return a, s


def _check_k(k, d: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= d:
        raise InputError(f"option k={k!r}; expected an integer 1 <= k <= d={d} (the entries of one map)")
    return k


def _values(maps, truth, abs: bool) -> tuple[torch.Tensor, torch.Tensor]:
    a, s = check_maps_and_truth(maps, truth)
    return (a.abs() if abs else a), s


def _ranked_mask(a: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """s reordered by a, largest first (ties to the lower index)."""
    return s.gather(1, torch.sort(a, dim=1, descending=True, stable=True).indices)


def pointing_game(maps: torch.Tensor, truth: torch.Tensor, abs: bool = False, weighted: bool = False) -> torch.Tensor:
    """Whether the largest value of the map lies inside the mask (1 - |S|/d if ``weighted``)."""
    a, s = _values(maps, truth, abs)
    hit = (s & (a == a.amax(1, keepdim=True))).any(1).to(a.dtype)
    return hit * (1 - s.sum(1).to(a.dtype) / s.shape[1]) if weighted else hit


def _mass_inside(a: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    total = a.sum(1)
    return torch.where(total != 0, (a * s).sum(1) / total, torch.nan)


def attribution_localisation(maps: torch.Tensor, truth: torch.Tensor, abs: bool = True,
                             positive: bool = False) -> torch.Tensor:  # fmt: skip
    """The share of the map's mass inside the mask (Kohlbrenner et al.'s μ); NaN where above 1."""
    a, s = _values(maps, truth, abs)
    mu = _mass_inside(a.clamp(min=0) if positive else a, s)
    return torch.where(mu > 1, torch.nan, mu)


def top_k_intersection(maps: torch.Tensor, truth: torch.Tensor, k: int = 1000, abs: bool = False,
                       concept_influence: bool = False) -> torch.Tensor:  # fmt: skip
    """The share of the map's k largest entries inside the mask (times d/|S| if ``concept_influence``)."""
    a, s = _values(maps, truth, abs)
    d = s.shape[1]
    k = _check_k(k, d)
    share = _ranked_mask(a, s)[:, :k].sum(1).to(a.dtype) / k
    return share * d / s.sum(1).to(a.dtype) if concept_influence else share


def relevance_mass_accuracy(maps: torch.Tensor, truth: torch.Tensor, abs: bool = False) -> torch.Tensor:
    """The map's sum inside the mask over its total sum; NaN where the total is 0."""
    return _mass_inside(*_values(maps, truth, abs))


def relevance_rank_accuracy(maps: torch.Tensor, truth: torch.Tensor, abs: bool = False) -> torch.Tensor:
    """The share of the map's |S| largest entries inside the mask (|S| the mask's size)."""
    a, s = _values(maps, truth, abs)
    size = s.sum(1, keepdim=True)
    top = torch.arange(s.shape[1], device=s.device) < size
    return (_ranked_mask(a, s) & top).sum(1).to(a.dtype) / size[:, 0].to(a.dtype)


def localisation_auc(maps: torch.Tensor, truth: torch.Tensor, abs: bool = False) -> torch.Tensor:
    """The area under the ROC curve of the map's values as scores of the mask."""
    a, s = _values(maps, truth, abs)
    inside = s.sum(1).double()
    full = (inside == s.shape[1]).nonzero()
    if len(full):
        raise InputError(f"truth: the mask of input {full[0].item()} covers the whole map; expected an entry "
                         "outside the mask too (the ROC curve needs both classes)")  # fmt: skip
    ranks = average_ranks(a.double())
    u = (ranks * s).sum(1) - inside * (inside + 1) / 2
    return (u / (inside * (s.shape[1] - inside))).to(a.dtype)


def ground_truth_agreement(maps: torch.Tensor, truth: torch.Tensor, k: int = 5) -> torch.Tensor:
    """OpenXAI's feature agreement of the map with the true attributions: the share of the k
    largest |φ| among the k largest |t|."""
    a, t = check_maps_and_truth(maps, truth, mask=False)
    return feature_agreement(torch.stack([a, t]), _check_k(k, a.shape[1]))[0]


for _name, _function in {"pointing_game": pointing_game, "attribution_localisation": attribution_localisation,
                         "top_k_intersection": top_k_intersection, "relevance_mass_accuracy": relevance_mass_accuracy,
                         "relevance_rank_accuracy": relevance_rank_accuracy, "localisation_auc": localisation_auc,
                         }.items():  # fmt: skip
    register_function(_name, _function, higher_is_better=True, needs=("maps", "truth"))
register_function("ground_truth_agreement", ground_truth_agreement, higher_is_better=True, needs=("maps", "truth"),
                  modalities=("rows",))  # fmt: skip
