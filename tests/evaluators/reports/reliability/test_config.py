"""evaluators/reports/reliability/config.py: the report's options, each refused in one line naming
it and what was expected, checked when the config is made (before any work)."""

from __future__ import annotations

import re

import pytest

from evaluators.reports.reliability.config import ReportConfig
from foundation.errors import InputError


def test_a_population_takes_the_default_options(small_population):
    cfg = ReportConfig(population=small_population, device="cpu")
    assert cfg.modality.name == "rows" and cfg.k is None and cfg.permuted_population is None
    assert cfg.faithfulness[0] == "deletion" and set(cfg.aggregators) == {"mean", "ucb", "var"}


@pytest.mark.parametrize("option, value, message", [
    ("explainers", "saliency", "option explainers='saliency'; expected a list of explainer names"),
    ("explainers", ["gradcam"], "option explainers: ['gradcam'] do not take rows"),
    ("options", [1], "option options=[1]; expected a mapping explainer -> its options"),
    ("measure", "ssim", "option measure='ssim'; expected one of ['spearman_abs', 'spearman'] (rows)"),
    ("faithfulness", [], "option faithfulness=[]; expected a non-empty list from"),
    ("faithfulness", ["road_morf"], "option faithfulness=['road_morf']"),
    ("n_points", 1, "option n_points=1; expected at least 2"),
    ("n_bootstrap", 9, "option n_bootstrap=9; expected at least 10"),
    ("cascade_steps", 0, "option cascade_steps=0; expected at least 1"),
    ("k", 0, "option k=0; expected a positive integer or null"),
    ("accuracy_tolerance", 1.5, "option accuracy_tolerance=1.5; expected a share in [0, 1]"),
    ("log_to", "paper", "option log_to='paper'"),
    ("normalisation", "max", "option normalisation='max'; expected one of"),
    ("ensemble_size", True, "option ensemble_size=True; expected an integer of at least 2"),
    ("aggregators", {"ucb": {"q": 3}}, "option aggregators: ucb: {'q': 3}; expected a mapping of some of ['eps']"),
    ("permuted_population", "nowhere.pt", "option permuted_population='nowhere.pt': no such file or folder"),
])  # fmt: skip
def test_bad_options_are_refused_naming_them(small_population, option, value, message):
    with pytest.raises(InputError, match=re.escape(message)):
        ReportConfig(population=small_population, device="cpu", **{option: value})
