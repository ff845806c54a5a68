"""Localisation and axiomatic metrics: Quantus 0.6 against ``evaluators.metrics.localisation``
and ``evaluators.metrics.axiomatic`` on the same maps.

    python bench/localisation.py   (Quantus: pip install quantus==0.6.0, see setup.cfg)

Localisation (seeded random data; the scores' equality and the time need no trained model):
``N_IMAGES`` maps of ``SIZE`` × ``SIZE`` pixels (float64 standard normal) with masks of a
random rectangle each (a planted region: 4 to ``SIZE`` / 2 pixels a side), and a table of
``N_ROWS`` rows of ``D_TABLE`` features with ``RELEVANT`` relevant features per row (Quantus
reads a row as a 1 × d image). Each metric of ``LOCALISATION`` with the settings that match
(Quantus's defaults but ``k``; its ``normalise`` is a positive scale to which every score is
invariant), ``batch_size`` = all maps.

Axiomatic: ``N_AXIOMATIC`` random images 1 × ``SIZE_AXIOMATIC`` × ``SIZE_AXIOMATIC`` and a
seeded CNN (an unpadded 3 × 3 convolution, ReLU, a linear layer, float32), gradient × input maps
of the labels: ``Completeness`` (``normalise=False``), ``NonSensitivity`` (each map normalised
by its own largest value, ``normalise_axes``) and ``InputInvariance`` (gradients, every entry
shifted: Quantus 0.6's ``perturb_batch`` skips entry 0, docs/fidelity_metrics.md).

Check (``check``): every score equal to Quantus's within ``TOLERANCE`` = 1e-6: both compute the
same sums and ranks in float64 (localisation; the differences are Quantus's 1e-9 added to a
denominator of at least 1 after its normalisation, and summation order, about 1e-15), or the
same model's float32 outputs compared with the same thresholds (axiomatic: 0/1 scores and
counts, equal unless an output lies within rounding of a threshold). A score of another map or
metric differs by far more (0.01 to 1 here).

The last line is one JSON object: ``ratio`` = Quantus's seconds over ours (all metrics, same
run), ``max_abs_diff`` (over all metrics and inputs), each side's seconds per metric.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from evaluators.metrics import axiomatic, localisation  # noqa: E402
from foundation.files import json_text  # noqa: E402

N_IMAGES, SIZE, N_ROWS, D_TABLE, RELEVANT, K = 256, 32, 512, 20, 5, 100
N_AXIOMATIC, SIZE_AXIOMATIC, SEED = 16, 12, 0
TOLERANCE = 1e-6
# our function and options, Quantus's class and options
LOCALISATION = {
    "pointing_game": (localisation.pointing_game, {}, "PointingGame", {}),
    "attribution_localisation": (localisation.attribution_localisation, {}, "AttributionLocalisation", {}),
    "top_k_intersection": (localisation.top_k_intersection, {"k": K}, "TopKIntersection", {"k": K}),
    "relevance_mass_accuracy": (localisation.relevance_mass_accuracy, {}, "RelevanceMassAccuracy", {}),
    "relevance_rank_accuracy": (localisation.relevance_rank_accuracy, {}, "RelevanceRankAccuracy", {}),
    "localisation_auc": (localisation.localisation_auc, {}, "AUC", {}),
}  # fmt: skip


def image_case(n: int, size: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Maps (n, 1, size, size) and masks of one random rectangle each."""
    maps = torch.randn(n, 1, size, size, generator=g, dtype=torch.float64)
    mask = torch.zeros(n, 1, size, size, dtype=torch.bool)
    sides = torch.randint(4, size // 2 + 1, (n, 2), generator=g)
    for i, (h, w) in enumerate(sides.tolist()):
        top = torch.randint(0, size - h + 1, (1,), generator=g).item()
        left = torch.randint(0, size - w + 1, (1,), generator=g).item()
        mask[i, 0, top:top + h, left:left + w] = True
    return maps, mask


def table_case(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Maps (N_ROWS, 1, 1, D_TABLE) and masks of ``RELEVANT`` random features per row."""
    maps = torch.randn(N_ROWS, 1, 1, D_TABLE, generator=g, dtype=torch.float64)
    chosen = torch.rand(N_ROWS, D_TABLE, generator=g).argsort(1)[:, :RELEVANT]
    return maps, torch.zeros(N_ROWS, D_TABLE, dtype=torch.bool).scatter_(1, chosen, True).view(maps.shape)


def cnn() -> nn.Module:
    torch.manual_seed(SEED)
    side = SIZE_AXIOMATIC - 2
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * side * side, 10)).eval()


def gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor, times_input: bool) -> torch.Tensor:
    """(N, H, W) gradient (× input) of the label's logit, summed over channels."""
    v = torch.as_tensor(x).detach().requires_grad_()
    (grad,) = torch.autograd.grad(model(v).gather(1, torch.as_tensor(y)[:, None]).sum(), v)
    return (grad * v if times_input else grad).sum(1).detach()


def shift_every_entry(arr, indices, input_shift, **_):
    return arr + input_shift


def timed(run) -> tuple[object, float]:
    start = time.perf_counter()
    out = run()
    return out, time.perf_counter() - start


def quantus_localisation(cases: dict) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    import quantus

    scores, seconds = {}, {}
    for case, (maps, mask) in cases.items():
        x, y = np.zeros(maps.shape), np.zeros(len(maps), dtype=int)
        for name, (_, _, cls, options) in LOCALISATION.items():
            if case == "table" and name == "top_k_intersection":
                options = {**options, "k": RELEVANT}
            metric = getattr(quantus, cls)(disable_warnings=True, **options)
            scores[f"{case}/{name}"], seconds[f"{case}/{name}"] = timed(lambda: np.asarray(metric(
                model=None, x_batch=x, y_batch=y, a_batch=maps.numpy(), s_batch=mask.numpy().astype(float),
                batch_size=len(maps), channel_first=True), dtype=float))  # fmt: skip
    return scores, seconds


def ours_localisation(cases: dict) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    scores, seconds = {}, {}
    for case, (maps, mask) in cases.items():
        if case == "table":  # a table's (N, d) maps and mask, as a user passes them
            maps, mask = maps.flatten(1), mask.flatten(1)
        for name, (function, options, _, _) in LOCALISATION.items():
            if case == "table" and name == "top_k_intersection":
                options = {**options, "k": RELEVANT}
            scores[f"{case}/{name}"], seconds[f"{case}/{name}"] = timed(lambda: function(maps, mask, **options).numpy())
    return scores, seconds


def quantus_axiomatic(model, x, y, maps, grads) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    import quantus

    def explain(model, inputs, targets, **_):
        return gradients(model, inputs, targets, times_input=False)[:, None].numpy()

    runs = {"completeness": (quantus.Completeness(normalise=False, disable_warnings=True), maps, {}),
            "non_sensitivity": (quantus.NonSensitivity(normalise_func_kwargs={"normalise_axes": (1, 2, 3)},
                                                       disable_warnings=True), maps, {"softmax": True}),
            "input_invariance": (quantus.InputInvariance(perturb_func=shift_every_entry, disable_warnings=True),
                                 grads, {"explain_func": explain})}  # fmt: skip
    scores, seconds = {}, {}
    for name, (metric, a, options) in runs.items():
        scores[name], seconds[name] = timed(lambda: np.asarray(metric(
            model=model, x_batch=x.numpy(), y_batch=y.numpy(), a_batch=a[:, None].numpy(), batch_size=len(x),
            **options), dtype=float))  # fmt: skip
    return scores, seconds


def ours_axiomatic(model, x, y, maps, grads) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    def explain(v, t):
        return gradients(model, v, t, times_input=False)

    runs = {"completeness": lambda: axiomatic.completeness(model, x, maps, y),
            "non_sensitivity": lambda: axiomatic.non_sensitivity(model, x, maps, y, max_batch=len(x) * 64),
            "input_invariance": lambda: axiomatic.input_invariance(model, x, grads, explain, y)}  # fmt: skip
    scores, seconds = {}, {}
    for name, run in runs.items():
        scores[name], seconds[name] = timed(lambda: run().numpy())
    return scores, seconds


def check(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> float:
    """The module docstring's check: the largest |ours − Quantus| over metrics and inputs;
    AssertionError above ``TOLERANCE``, on a metric missing on either side, or on scores of
    another shape or undefined (NaN) on one side only."""
    if set(ours) != set(theirs):
        raise AssertionError(f"metrics differ: ours {sorted(ours)}, Quantus's {sorted(theirs)}")
    difference = 0.0
    for name, mine in ours.items():
        other = np.asarray(theirs[name], dtype=np.float64)
        if mine.shape != other.shape or not np.array_equal(np.isnan(mine), np.isnan(other)):
            raise AssertionError(f"{name}: scores of shape {mine.shape} against Quantus's {other.shape}, or NaN apart")
        gap = np.nan_to_num(np.abs(mine - other))
        if not gap.max() <= TOLERANCE:
            raise AssertionError(f"{name}: ours and Quantus's scores differ by {gap.max():.2e} (> {TOLERANCE})")
        difference = max(difference, float(gap.max()))
    return difference


def main() -> dict:
    try:
        import quantus  # noqa: F401
    except ImportError:
        result = {"ratio": None, "error": "quantus is not installed (pip install quantus==0.6.0)"}
        print(json_text(result))
        return result
    warnings.filterwarnings("ignore", module="quantus")
    g = torch.Generator().manual_seed(SEED)
    cases = {"images": image_case(N_IMAGES, SIZE, g), "table": table_case(g)}
    model = cnn()
    x = torch.randn(N_AXIOMATIC, 1, SIZE_AXIOMATIC, SIZE_AXIOMATIC, generator=g)
    y = torch.randint(0, 10, (N_AXIOMATIC,), generator=g)
    maps, grads = gradients(model, x, y, times_input=True), gradients(model, x, y, times_input=False)
    ours_localisation(cases)  # warm-up, untimed
    theirs, t_theirs = quantus_localisation(cases)
    mine, t_mine = ours_localisation(cases)
    theirs_ax, t_theirs_ax = quantus_axiomatic(model, x, y, maps, grads)
    mine_ax, t_mine_ax = ours_axiomatic(model, x, y, maps, grads)
    difference = check({**mine, **mine_ax}, {**theirs, **theirs_ax})
    seconds = {name: {"quantus": round(t_theirs[name], 4), "ours": round(t_mine[name], 4)} for name in t_mine}
    seconds.update({name: {"quantus": round(t_theirs_ax[name], 4), "ours": round(t_mine_ax[name], 4)}
                    for name in t_mine_ax})  # fmt: skip
    quantus_s = sum(t_theirs.values()) + sum(t_theirs_ax.values())
    ours_s = sum(t_mine.values()) + sum(t_mine_ax.values())
    for name, pair in seconds.items():
        print(f"{name:36s} Quantus {pair['quantus']:8.4f} s  ours {pair['ours']:8.4f} s")
    result = {"ratio": round(quantus_s / ours_s, 2), "max_abs_diff": difference,
              "ratio_localisation": round(sum(t_theirs.values()) / sum(t_mine.values()), 2),
              "ratio_axiomatic": round(sum(t_theirs_ax.values()) / sum(t_mine_ax.values()), 2),
              "quantus_s": round(quantus_s, 3), "ours_s": round(ours_s, 3), "seconds": seconds,
              "n_images": N_IMAGES, "size": SIZE, "n_rows": N_ROWS, "d_table": D_TABLE, "k": K,
              "n_axiomatic": N_AXIOMATIC, "size_axiomatic": SIZE_AXIOMATIC,
              "threads": torch.get_num_threads()}  # fmt: skip
    print(json_text(result))
    return result


if __name__ == "__main__":
    main()
