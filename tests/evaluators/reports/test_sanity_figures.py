"""evaluators/reports/sanity_figures.py: what the figures draw, read back from the matplotlib figure
before it is saved: each cell the absolute map over its maximum, the image un-normalised, a blank map
named on its cell, the similarity curves' means with None as a gap; and the stage labels by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evaluators.reports import sanity_figures

STAGES = ["original", "logits", "conv"]


@pytest.fixture
def drawn(monkeypatch):
    """The figures that sanity_figures saves, kept (and still written)."""
    kept = []
    save = sanity_figures.save_figure

    def keep(fig, path, **options):
        kept.append(fig)
        save(fig, path, **options)

    monkeypatch.setattr(sanity_figures, "save_figure", keep)
    return kept


def test_stage_maps_show_the_image_and_abs_maps_scaled_to_their_maximum(drawn, tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 1, 4, 4, generator=g)
    maps = {"saliency": torch.randn(3, 2, 4, 4, generator=g), "input": torch.randn(3, 2, 4, 4, generator=g)}
    maps["input"][2, 1] = 0.0  # the last stage's map of image 1: all zero
    path = sanity_figures.plot_stage_maps(x, maps, STAGES, ([0.5], [0.25]), tmp_path / "maps.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    axes = np.array(drawn[0].axes).reshape(4, 4)  # rows (image, explainer); columns input and the 3 stages
    assert [ax.get_title() for ax in axes[0]] == ["input", *STAGES]
    for i in range(2):
        image = axes[2 * i, 0].get_images()[0].get_array()
        np.testing.assert_allclose(image, (x[i, 0] * 0.25 + 0.5).clamp(0, 1).numpy(), atol=1e-6)
        assert not axes[2 * i + 1, 0].get_images()  # the image once per block
        for k, name in enumerate(maps):
            assert axes[2 * i + k, 0].get_ylabel() == name
            for s in range(3):
                a = maps[name][s, i].abs()
                expected = a / a.max() if a.max() > 0 else a
                np.testing.assert_allclose(axes[2 * i + k, 1 + s].get_images()[0].get_array(), expected.numpy(),
                                           atol=1e-6)  # fmt: skip
    assert [t.get_text() for t in axes[3, 3].texts] == ["all zero"]
    assert all(not axes[r, c].texts for r in range(4) for c in range(1, 4) if (r, c) != (3, 3))


def test_similarity_curves_plot_the_means_with_none_as_a_gap(drawn, tmp_path):
    entry = [{"mean": 1.0, "ci95": 0.0}, {"mean": 0.5, "ci95": 0.1}, {"mean": None, "ci95": None}]
    similarity = {"saliency": {"spearman_abs": entry, "ssim": entry[:2] + [{"mean": 0.2, "ci95": 0.05}]}}
    sanity_figures.plot_similarity_curves(similarity, STAGES, tmp_path / "curves.png")
    spearman, ssim = drawn[0].axes
    assert (spearman.get_title(), ssim.get_title()) == ("spearman_abs", "ssim")
    np.testing.assert_array_equal(spearman.get_lines()[0].get_ydata(), [1.0, 0.5, np.nan])
    np.testing.assert_array_equal(ssim.get_lines()[0].get_ydata(), [1.0, 0.5, 0.2])
    assert [t.get_text() for t in ssim.get_xticklabels()] == STAGES


def test_stage_labels_put_the_layer_type_under_its_name():
    summary = {"stages": {"cascading": ["original", "fc2", "fc1"]},
               "layer_types": {"cascading": ["", "Linear", "Linear"]}}
    assert sanity_figures.stage_labels(summary, "cascading") == ["original", "fc2\nLinear", "fc1\nLinear"]
