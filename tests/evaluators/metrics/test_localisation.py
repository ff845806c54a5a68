"""The localisation metrics (evaluators.metrics.localisation): equal to Quantus 0.6's on random
maps and masks (float64, seeded), equal to a hand computation on a tiny case, and refusing bad
input with an InputError naming what."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evaluators.metrics import localisation as loc
from evaluators.metrics.registry import METRICS, score
from foundation.errors import InputError

N, H, W = 12, 10, 10


def random_case(ties: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Maps (N, 1, H, W) of signed values (rounded to one decimal: ties) and masks of about 30 %,
    none empty or full."""
    g = torch.Generator().manual_seed(7)
    maps = torch.randn(N, 1, H, W, generator=g, dtype=torch.float64)
    maps = maps.round(decimals=1) if ties else maps
    mask = torch.rand(N, 1, H, W, generator=g) < 0.3
    mask[:, 0, 0, 0], mask[:, 0, -1, -1] = True, False
    return maps, mask


# ours (function, options) -> Quantus's class name and options
PAIRS = {
    "pointing_game": (loc.pointing_game, {}, "PointingGame", {}),
    "pointing_game_abs": (loc.pointing_game, {"abs": True}, "PointingGame", {"abs": True}),
    "attribution_localisation": (loc.attribution_localisation, {}, "AttributionLocalisation", {}),
    "attribution_localisation_positive": (loc.attribution_localisation, {"abs": False, "positive": True},
                                          "AttributionLocalisation", {"abs": False, "positive_attributions": True}),
    "top_k_intersection": (loc.top_k_intersection, {"k": 17}, "TopKIntersection", {"k": 17}),
    "top_k_concept_influence": (loc.top_k_intersection, {"k": 17, "abs": True, "concept_influence": True},
                                "TopKIntersection", {"k": 17, "abs": True, "concept_influence": True}),
    "relevance_mass_accuracy": (loc.relevance_mass_accuracy, {}, "RelevanceMassAccuracy", {}),
    "relevance_mass_accuracy_abs": (loc.relevance_mass_accuracy, {"abs": True}, "RelevanceMassAccuracy", {"abs": True}),
    "relevance_rank_accuracy": (loc.relevance_rank_accuracy, {}, "RelevanceRankAccuracy", {}),
    "localisation_auc": (loc.localisation_auc, {}, "AUC", {}),
}  # fmt: skip


def quantus_scores(name: str, options: dict, maps: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
    """Quantus's scores with its defaults (``normalise=True``: a positive scale, see the module)."""
    quantus = pytest.importorskip("quantus")
    metric = getattr(quantus, name)(disable_warnings=True, **options)
    x = np.zeros(maps.shape)  # read for its shape only
    return np.asarray(metric(model=None, x_batch=x, y_batch=np.zeros(len(maps), dtype=int), a_batch=maps.numpy(),
                             s_batch=mask.numpy().astype(float)), dtype=float)  # fmt: skip


@pytest.mark.parametrize("case", PAIRS)
def test_each_metric_equals_quantus_on_random_maps_and_masks(case):
    function, ours, name, theirs = PAIRS[case]
    maps, mask = random_case()
    expected = quantus_scores(name, theirs, maps, mask)
    got = function(maps, mask, **ours)
    assert got.shape == (N,) and got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("case", ["pointing_game", "relevance_mass_accuracy", "localisation_auc"])
def test_ties_count_as_quantus_counts_them(case):
    """A tied largest value inside the mask is a hit; an AUC tie across the mask counts one half."""
    function, ours, name, theirs = PAIRS[case]
    maps, mask = random_case(ties=True)
    np.testing.assert_allclose(function(maps, mask, **ours).numpy(), quantus_scores(name, theirs, maps, mask), rtol=0,
                               atol=1e-6)  # fmt: skip


MAPS = torch.tensor([[0.1, 0.5, -0.9, 0.3], [0.2, 0.4, 0.6, -0.1]], dtype=torch.float64)
MASK = torch.tensor([[0, 1, 0, 1], [1, 0, 1, 0]], dtype=torch.bool)
HAND = {  # worked out on paper from the definitions in the module's docstring
    ("pointing_game", ()): [1, 1],  # largest 0.5 (inside), 0.6 (inside)
    ("pointing_game", (("abs", True),)): [0, 1],  # |−0.9| is largest, outside
    ("pointing_game", (("weighted", True),)): [0.5, 0.5],  # 1 − 2/4
    ("attribution_localisation", ()): [0.8 / 1.8, 0.8 / 1.3],
    ("attribution_localisation", (("abs", False), ("positive", True))): [0.8 / 0.9, 0.8 / 1.2],
    ("top_k_intersection", (("k", 2),)): [1, 0.5],  # top 2: {1, 3}; {2, 1}
    ("top_k_intersection", (("k", 2), ("concept_influence", True))): [2, 1],  # times 4 / 2
    ("relevance_mass_accuracy", (("abs", True),)): [0.8 / 1.8, 0.8 / 1.3],
    ("relevance_rank_accuracy", ()): [1, 0.5],
    ("localisation_auc", ()): [1, 0.75],  # ranks of the mask (4 + 3 − 3) / 4; (2 + 4 − 3) / 4
}  # fmt: skip


@pytest.mark.parametrize("key", HAND, ids=lambda key: f"{key[0]}{dict(key[1])}")
def test_each_metric_equals_a_hand_computation(key):
    name, options = key
    got = getattr(loc, name)(MAPS, MASK, **dict(options))
    torch.testing.assert_close(got, torch.tensor(HAND[key], dtype=torch.float64), equal_nan=True)


def test_a_map_without_mass_has_no_mass_accuracy():
    maps = MAPS.clone()
    maps[0] = 0
    assert loc.relevance_mass_accuracy(maps, MASK)[0].isnan() and loc.attribution_localisation(maps, MASK)[0].isnan()
    torch.testing.assert_close(loc.relevance_mass_accuracy(maps, MASK)[1], torch.tensor(0.8 / 1.1).double())


def test_ground_truth_agreement_is_openxais_feature_agreement_by_hand():
    """Row 0: top 2 of |φ| = {3, 1} and of |t| = {2, 3}: one shared of two; top 3 {3, 1, 2} and
    {2, 3, 0}: two of three. Row 1 (ties in |t| to the lower index): top 2 {0, 1} both; top 3
    {0, 1, 2} against {0, 1, 3}: two of three."""
    maps = torch.tensor([[0.1, -0.5, 0.2, 0.9], [3.0, -2.0, 1.0, 0.0]], dtype=torch.float64)
    truth = torch.tensor([[1.0, 0.0, -2.0, 1.5], [1.0, 1.0, 0.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(loc.ground_truth_agreement(maps, truth, k=2), torch.tensor([0.5, 1.0]).double())
    torch.testing.assert_close(loc.ground_truth_agreement(maps, truth, k=3), torch.tensor([2 / 3, 2 / 3]).double())


def test_a_channel_axis_of_one_and_a_table_read_as_their_units():
    maps, mask = random_case()
    for name in ("relevance_rank_accuracy", "localisation_auc"):
        function = getattr(loc, name)
        expected = function(maps, mask)
        torch.testing.assert_close(function(maps[:, 0], mask), expected)
        torch.testing.assert_close(function(maps.flatten(1), mask.flatten(1)), expected)


def test_the_metrics_by_name_average_over_inputs_and_read_the_truth():
    maps, mask = random_case()
    assert METRICS["localisation_auc"].needs == ("maps", "truth") and METRICS["localisation_auc"].higher_is_better
    assert METRICS["top_k_intersection"].defaults == {"k": 1000, "abs": False, "concept_influence": False}
    assert METRICS.names(modality="images", needs=("maps", "truth"))[:2] == ["pointing_game",
                                                                             "attribution_localisation"]
    assert "ground_truth_agreement" not in METRICS.names(modality="images")
    torch.testing.assert_close(score("top_k_intersection", None, None, maps, truth=mask, k=5),
                               loc.top_k_intersection(maps, mask, k=5))  # fmt: skip
    metric = METRICS["relevance_mass_accuracy"].obj()
    metric.update(None, None, maps[:5], truth=mask[:5])
    metric.update(None, None, maps[5:], truth=mask[5:])
    torch.testing.assert_close(metric.compute(), loc.relevance_mass_accuracy(maps, mask).mean())


@pytest.mark.parametrize("change, match", [
    (lambda m, s: (m, s[:, :, :-1]), r"truth of shape \(12, 1, 9, 10\) for maps of shape \(12, 1, 10, 10\)"),
    (lambda m, s: (m, s.index_fill(0, torch.tensor([3, 5]), False)), r"the mask of input 3 is empty \(2 of 12"),
    (lambda m, s: (m.index_put((torch.tensor([2]),), torch.tensor(float("nan"), dtype=m.dtype)), s),
     r"maps: map 2 has 100 NaN value"),
    (lambda m, s: (m, s.double() * 2), "mask with values other than 0 and 1"),
    (lambda m, s: (m, None), "truth of shape"),
    (lambda m, s: (m.long(), s), "expected float maps"),
])  # fmt: skip
def test_bad_input_is_refused_naming_what(change, match):
    maps, mask = change(*random_case())
    with pytest.raises(InputError, match=match):
        loc.relevance_rank_accuracy(maps, mask)


def test_a_k_beyond_the_map_and_a_full_mask_for_the_auc_are_refused():
    maps, mask = random_case()
    with pytest.raises(InputError, match=r"option k=101; expected an integer 1 <= k <= d=100"):
        loc.top_k_intersection(maps, mask, k=101)
    with pytest.raises(InputError, match=r"option k=5; expected an integer 1 <= k <= d=4"):
        loc.ground_truth_agreement(MAPS, MAPS, k=5)
    with pytest.raises(InputError, match="the mask of input 0 covers the whole map"):
        loc.localisation_auc(maps, torch.ones_like(mask))
