"""Blank maps (all zero or constant): which they are, their counts and the reports' line."""

from __future__ import annotations

import torch

from evaluators.reports.map_grid import blank_kinds, blank_note, count_blank_maps


def test_blank_kinds_counts_and_note():
    maps = torch.tensor([[[0.0, 0.0], [0.0, 0.0]], [[2.0, 2.0], [2.0, 2.0]], [[0.0, 1.0], [0.0, 0.0]],
                         [[-0.0, 0.0], [0.0, 0.0]], [[float("nan")] * 2] * 2])  # fmt: skip
    assert blank_kinds(maps) == ["all_zero", "constant", None, "all_zero", None]
    counts = count_blank_maps({"gradcam": maps, "saliency": maps[2:3]})
    assert counts == {"gradcam": {"all_zero": 2, "constant": 1}, "saliency": {"all_zero": 0, "constant": 0}}
    assert blank_note(counts, 5) == "blank maps (of 5 per explainer): gradcam 2 all zero, 1 constant"
    assert blank_note({"saliency": {"all_zero": 0, "constant": 0}}, 5) == ""
