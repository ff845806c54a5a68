"""A grid of explanations of a trained image classifier: ``evaluate.py explain``.

Rows: ``n_images`` test images evenly spaced through the datamodule's test split (or
its validation split where it has no test split); columns: the image, then one map per
explainer of ``evaluators.maps`` for the model's predicted class, reduced
to (H, W) by ``Modality.reduce(..., "abs_sum")`` and scaled per map from its minimum to its
maximum. Expected Gradients (``gradient_shap``) takes its baselines from ``n_baselines`` training images
(the test images where the datamodule has no training split). A blank map (all zero, e.g.
GradCAM's where no channel of its layer has positive evidence, or constant;
``evaluators.reports.map_grid``) has its kind written on its cell, is counted per method in the
JSON and named in a printed line; a map with NaN or ±inf is refused, naming the explainer and
the image, before anything is written. Written to a new folder (``evaluate.py explain``:
``<run>/explanations-<stamp>/``): ``explanations.png``, ``explanations.json`` (the methods,
each image's label and predicted class, seconds per method, ``blank_maps``: per method the
number of all-zero and constant maps and which images they are) and, unless ``log_to`` is
``none``, the PNG logged to W&B (offline by default).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from evaluators.inputs.counts import counted
from foundation.finite import check_finite
from evaluators.inputs.runs import load_run
from evaluators.maps import EXPLAINERS, explain
from evaluators.reports.map_grid import BLANK_KINDS, blank_kinds, blank_note, count_blank_maps, plot_map_grid
from evaluators.reports.wandb_log import check_log_to, log_report, table_scalars
from foundation.errors import InputError
from foundation.modality import modality_of
from foundation.files import write_json
from lightning_modules.interface import default_classes


N_IMAGES, N_BASELINES = 8, 16  # the defaults: test images in the grid, Gradient SHAP's training images


def explanation_grid(run_dir: Path, out_dir: Path, methods: list[str], n_images: int = N_IMAGES,
                     n_baselines: int = N_BASELINES, checkpoint: str = "last.ckpt", log_to: str = "wandb",
                     seed: int = 0, data_location: str | None = None, **model_options) -> dict:  # fmt: skip
    """Explain ``n_images`` test images with every method; write the grid and its JSON
    into ``out_dir`` (made here; it must not exist yet). ``data_location``: where the run's
    images lie now, if they moved (its folder or archive, as ``evaluate.py run --data_dir``);
    ``model_options``: of a model file given as ``run_dir`` (``load_run``)."""
    names = sorted(EXPLAINERS.names(modality="images"))
    unknown = [m for m in methods if m not in names]
    if unknown:
        raise InputError(f"unknown explainer(s) {unknown}; expected some of {names}")
    if n_images < 1:
        raise InputError(f"option --n_images={n_images}; expected a positive integer")
    check_log_to(log_to, "--log_to")
    model, data, _ = load_run(run_dir, checkpoint, data_location=data_location, **model_options)
    modality = modality_of(data)
    if modality.figure != "heatmap":
        raise InputError(f"{run_dir}: its data is not an image datamodule; `explain` draws image grids")
    data.setup("test")
    x, y = data.probe(n_images, "test")
    counted("--n_images", n_images, len(x), "test split", "images", N_IMAGES)
    options: dict[str, dict] = {}
    if "gradient_shap" in methods:
        has_train = "train" in data.split_sizes
        if has_train:
            data.setup("fit")
        references = data.probe(n_baselines, "train" if has_train else "test")[0]
        counted("n_baselines", n_baselines, len(references), "training split" if has_train else "test split",
                "images", N_BASELINES)  # fmt: skip
        options["gradient_shap"] = {"baselines": references}
    predicted = default_classes(model, x)
    maps, seconds = {}, {}
    for method in methods:
        start = time.perf_counter()
        maps[method] = modality.reduce(explain(model, x, method, seed=seed, **options.get(method, {})).detach(),
                                       "abs_sum")  # fmt: skip
        check_finite(maps[method], f"explainer {method!r}", "image")  # a NaN map would be drawn blank
        seconds[method] = round(time.perf_counter() - start, 3)
    out_dir.mkdir(parents=True, exist_ok=True)
    png = plot_grid(x, y, predicted, maps, data, out_dir / "explanations.png")
    classes = data.classes
    blanks = {method: {**counts, "images": [i for i, kind in enumerate(blank_kinds(maps[method])) if kind]}
              for method, counts in count_blank_maps(maps).items()}  # fmt: skip
    report = {"run_dir": str(run_dir), "checkpoint": checkpoint, "methods": methods, "seconds": seconds,
              "images": [{"label": classes[int(a)], "predicted": classes[int(b)]} for a, b in zip(y, predicted)],
              "blank_maps": blanks, "png": str(png)}  # fmt: skip
    note = blank_note(count_blank_maps(maps), len(x))
    if note:
        print(f"{note} (written on their cells)")
    write_json(out_dir / "explanations.json", report)
    columns = ["method", "seconds", *BLANK_KINDS]
    rows = [[m, seconds[m], *(blanks[m][kind] for kind in BLANK_KINDS)] for m in methods]
    log_report(log_to, out_dir, "explain", {"run_dir": str(run_dir), "methods": methods}, {"maps": (columns, rows)},
               {"explanations": png}, table_scalars("maps", columns, rows, 1), run_dir)  # fmt: skip
    return report


def plot_grid(x, y, predicted, maps: dict[str, torch.Tensor], data, path: Path) -> Path:
    """Images (un-normalised, titled label → prediction) in the first column, each method's map in the next."""
    titles = [f"{data.classes[int(a)]} → {data.classes[int(b)]}" for a, b in zip(y, predicted)]
    return plot_map_grid(x, maps, data.normalization, path, titles)
