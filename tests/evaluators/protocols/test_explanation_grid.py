"""``evaluate.py explain``: a grid of test images x explainers for an image model's run."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

import evaluate
from evaluators.inputs.runs import load_run
from evaluators.maps import explain
from foundation.modality import reduce_map
from foundation.errors import InputError
from tests.support.wandb_runs import assert_logged


def test_grid_png_and_json_hold_every_method_and_image(tiny_run):
    methods = ["saliency", "gradcam", "gradient_shap", "rise"]
    report = evaluate.main(["explain", str(tiny_run), "--methods", ",".join(methods), "--n_images", "3",
                            "--log_to", "none"])  # fmt: skip
    out = json.loads((tiny_run / report["png"].split("/")[-2] / "explanations.json").read_text())
    assert out == report and out["methods"] == methods and len(out["images"]) == 3
    assert set(out["seconds"]) == set(methods)
    with Image.open(out["png"]) as png:  # 3 rows, 1 + 4 columns of 1.6 in at 110 dpi
        assert png.size == (round(1.6 * 5 * 110), round(1.6 * 3 * 110))


def test_grid_maps_are_the_explainers_maps_of_the_predicted_class(tiny_run, monkeypatch, tmp_path):
    import evaluators.protocols.explanation_grid as grid

    drawn = {}
    monkeypatch.setattr(grid, "plot_grid", lambda x, y, predicted, maps, data, path: drawn.update(maps=maps, x=x)
                        or path)  # fmt: skip
    grid.explanation_grid(tiny_run, tmp_path / "grid", ["saliency"], n_images=2, log_to="none")
    model, _, _ = load_run(tiny_run)
    expected = reduce_map(explain(model, drawn["x"], "saliency"), "abs_sum")
    torch.testing.assert_close(drawn["maps"]["saliency"], expected)


def test_grid_maps_of_sampling_explainers_are_the_same_in_every_run(tiny_run, monkeypatch, tmp_path):
    """Expected Gradients and SmoothGrad draw from the grid's seed alone, not from the global generators."""
    import random

    import numpy as np

    import evaluators.protocols.explanation_grid as grid

    drawn = []
    monkeypatch.setattr(grid, "plot_grid", lambda x, y, predicted, maps, data, path: drawn.append(maps) or path)
    methods = ["gradient_shap", "smoothgrad"]
    for k, seed in enumerate((1, 2)):
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        grid.explanation_grid(tiny_run, tmp_path / f"grid{k}", methods, n_images=3, n_baselines=4, log_to="none")
    for method in methods:
        assert torch.equal(drawn[0][method], drawn[1][method]), method
    grid.explanation_grid(tiny_run, tmp_path / "grid2", methods, n_images=3, n_baselines=4, log_to="none", seed=1)
    assert not torch.equal(drawn[2]["gradient_shap"], drawn[0]["gradient_shap"])


def test_grid_logs_to_wandb_offline(tiny_run):
    report = evaluate.main(["explain", str(tiny_run), "--methods", "saliency", "--n_images", "1"])
    out_dir = tiny_run / report["png"].split("/")[-2]
    scalars = {"maps/saliency/seconds": report["seconds"]["saliency"],
               "maps/saliency/all_zero": report["blank_maps"]["saliency"]["all_zero"]}
    assert_logged(out_dir, "explain", tiny_run, scalars, ["maps"], ["explanations"])


@pytest.mark.parametrize(("args", "message"), [
    (["--methods", "saliency,lime"], "unknown explainer(s) ['lime']"),
    (["--n_images", "0"], "--n_images=0"),
])  # fmt: skip
def test_bad_options_name_the_option(tiny_run, args, message):
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        evaluate.main(["explain", str(tiny_run), "--log_to", "none", *args])


def test_data_dir_points_the_grid_at_the_run_images_new_place(tiny_run, tmp_path):
    import shutil

    shutil.copytree(tiny_run.parents[2] / "tiny", tmp_path / "moved")
    with pytest.raises(InputError, match=r"image root '.*nowhere' does not exist"):
        evaluate.main(["explain", str(tiny_run), "--data_dir", str(tmp_path / "nowhere"), "--log_to", "none"])
    here = evaluate.main(["explain", str(tiny_run), "--methods", "saliency", "--n_images", "2", "--log_to", "none"])
    moved = evaluate.main(["explain", str(tiny_run), "--methods", "saliency", "--n_images", "2", "--log_to", "none",
                           "--data_dir", str(tmp_path / "moved")])  # fmt: skip
    assert moved["images"] == here["images"]


def test_blank_maps_are_named_on_their_cells_counted_and_printed(tiny_run, monkeypatch, tmp_path, capsys):
    """An all-zero map (GradCAM's where no channel has positive evidence) is not left as a
    silent black square: its cell says so, the JSON counts it per method, a line names it."""
    import matplotlib.axes

    import evaluators.protocols.explanation_grid as grid

    explain = grid.explain

    def with_blanks(model, x, method, **options):
        maps = explain(model, x, method, **options)
        if method == "gradcam":
            maps[1] = 0.0  # all zero
            maps[2] = 0.5  # constant
        return maps

    written = []
    text = matplotlib.axes.Axes.text
    monkeypatch.setattr(matplotlib.axes.Axes, "text", lambda ax, *a, **k: written.append(a[2]) or text(ax, *a, **k))
    monkeypatch.setattr(grid, "explain", with_blanks)
    report = grid.explanation_grid(tiny_run, tmp_path / "grid", ["saliency", "gradcam"], n_images=3, log_to="none")
    assert report["blank_maps"] == {"saliency": {"all_zero": 0, "constant": 0, "images": []},
                                    "gradcam": {"all_zero": 1, "constant": 1, "images": [1, 2]}}  # fmt: skip
    assert json.loads((tmp_path / "grid" / "explanations.json").read_text())["blank_maps"] == report["blank_maps"]
    assert sorted(written) == ["all zero", "constant"]
    assert "blank maps (of 3 per explainer): gradcam 1 all zero, 1 constant" in capsys.readouterr().out


def test_explain_help_says_how_the_images_are_chosen(capsys):
    with pytest.raises(SystemExit):
        evaluate.main(["explain", "--help"])
    assert "evenly spaced through the run's test split" in " ".join(capsys.readouterr().out.split())
    assert "first test images" not in evaluate.__doc__ and "evenly spaced through the" in evaluate.__doc__
