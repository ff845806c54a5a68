"""Pixel-level aggregation of explanations scored by insertion and deletion (Mahlau &
Nolde 2022, §4): ``evaluate.py aggregation --config configs/aggregation/<name>.yaml``.

From a trained model (a ``train.py`` run folder: an image classifier or a tabular MLP):

1. ``n_inputs`` test inputs (images evenly spaced through the test split; the first
   rows of a tabular test split), each explained for its predicted class (images) or the
   positive class (tabular models) by every base explainer of ``explainers`` (registry
   name -> options; the option value ``training`` stands for a sample of ``n_baselines``
   training inputs, ``blur`` for each image blurred as Mahlau & Nolde's Integrated
   Gradients baseline, ``mean`` for the training-set feature means); image maps are
   reduced to one value per pixel by ``reduction``;
2. the k base maps of an input are normalised (``normalisation``, eq. 1-4) and stacked;
3. rows of the report, each one map per input, each scored by its insertion and deletion
   AUC per input (``evaluators.metrics.insertion_deletion``):
   ``base/<explainer>`` (each explainer alone), ``agg/<aggregator>`` (Table 1),
   ``norm/<normalisation>`` (the mean after each normalisation, Figure 10) and
   ``sweep/<aggregator>/<parameter>=<value>`` (Figures 5-9);
4. per row: mean AUC over inputs with a 95 % confidence interval (normal approximation,
   mean ± 1.96 s/√n), and the paired difference to the mean aggregator, whose interval
   says whether a row is better, worse or within noise of it; per explainer, how many of
   its maps are blank (all zero or constant, ``evaluators.reports.map_grid``: they carry no ranking,
   and the grid writes so on their cells);
5. where the data know the inputs' ground truth (``probe_truth``: docs/ground_truth.md), every
   row's maps scored against it per input as well, by the localisation metrics of
   ``evaluators.metrics.ground_truth`` (on each map less its minimum, as insertion and
   deletion read it), mean and 95 % interval as in 4. (inputs where
   a metric is undefined left out): columns of their own (``truth_metrics`` names them); none
   where the data know no truth.

Everything lands in the report folder: ``maps/`` (base maps per explainer) and
``scores/`` (per-input AUCs and mean curves per row) as they are computed, so an
interrupted run continues with ``--resume`` where it stopped; with ``chunk_size`` the
inputs are read, explained and scored that many at a time, each chunk's ``maps/`` and
``scores/`` in ``inputs/chunk-<j>/`` (``evaluators.inputs.chunks``: a split that does not fit in
memory, e.g. an image folder served from files, streams through); at the end
``aggregation.json``, ``aggregation.csv``, ``table.md`` (beside the paper's Table 1),
``sweeps.png``, ``normalisations.png``, ``grid.png``, logged to W&B (offline by default).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import yaml

from evaluators.inputs.model_source import ModelSource
from evaluators.aggregators.normalisations import NORMALISATIONS, normalise
from evaluators.aggregators.pixel_aggregators import aggregate
from evaluators.aggregators.registry import AGGREGATORS
from evaluators.inputs.chunks import Chunk, InputSource, check_chunk_size, concatenated
from evaluators.inputs.counts import counted, default_of
from evaluators.protocols.registry import PROTOCOLS
from foundation.finite import check_finite
from evaluators.inputs.members import population_name, population_path
from evaluators.inputs.runs import cached, explainer_options
from evaluators.maps import EXPLAINERS, explain, explainer_names
from foundation.modality import REDUCTIONS
from evaluators.metrics.ground_truth import scores_against_truth
from evaluators.metrics.insertion_deletion import auc
from evaluators.metrics.registry import METRICS
from evaluators.protocols.members import evaluate_run, population_summary, write_population_report
from evaluators.reports.map_grid import blank_note, count_blank_maps, plot_map_grid
from evaluators.reports.wandb_log import ReportLogging, log_report, table_scalars
from foundation.errors import InputError
from foundation.files import atomic_open, pyplot, save_figure, write_json, write_text

# Mahlau & Nolde's Table 1 (ResNet-18; z-score normalisation; 2,000 images each):
# (ImageNet insertion, ImageNet deletion, GTSRB insertion, GTSRB deletion).
PAPER_TABLE_1 = {
    "mean": (0.3808, 0.0296, 0.6740, 0.0667),
    "rbm": (0.3827, 0.0301, 0.6312, 0.0744),
    "var": (0.3819, 0.0296, 0.6739, 0.0671),
    "ucb": (0.3896, 0.0298, 0.6798, 0.0657),
    "percentile": (0.3713, 0.0295, 0.6720, 0.0675),
    "pi": (0.3098, 0.0304, 0.6306, 0.0817),
    "ei": (0.3397, 0.0298, 0.6681, 0.0673),
    "ci": (0.2646, 0.0324, 0.5908, 0.0827),
    "api": (0.3546, 0.0299, 0.6726, 0.0672),
    "aei": (0.3692, 0.0298, 0.6721, 0.0672),
}
MODES = ("insertion", "deletion")
Z95 = 1.959964  # two-sided 95 % quantile of the standard normal


def _image_explainers() -> dict:
    """Mahlau & Nolde's base explainers that the registry has (Appendix A), at 32x32 scale."""
    return {
        "smoothgrad": {"nt_samples": 256, "stdevs": 0.1},
        "integrated_gradients": {"n_steps": 30, "baselines": "blur"},
        "gradient_shap": {"n_samples": 20, "baselines": "training"},
        "gradcam": {},
        "rise": {"n_masks": 5000, "s": 10, "seed": 0},
    }


@dataclass
class AggregationConfig(ReportLogging, ModelSource):
    """Options of the aggregation evaluator (configs/aggregation/<name>.yaml); the model and where it runs:
    ``evaluators.inputs.model_source.ModelSource``."""

    n_inputs: int = 500
    explainers: dict = field(default_factory=_image_explainers)
    n_baselines: int = 64  # training inputs behind the option value ``training``
    reduction: str = "abs_sum"  # image maps (C, H, W) -> (H, W)
    normalisation: str = "z"
    normalisations: list[str] = field(default_factory=lambda: list(NORMALISATIONS))
    aggregators: dict = field(default_factory=lambda: {name: {} for name in AGGREGATORS.names(kind="pixel")})
    sweeps: dict = field(default_factory=lambda: {  # the paper's Figures 5-9, fewer points
        "percentile": {"q": [0, 10, 25, 40, 50, 75, 100]},
        "ucb": {"eps": [-2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0]},
        "pi": {"eps": [-8.0, -6.0, -4.0, -2.0, 0.0, 1.0]},
        "ei": {"eps": [-10.0, -6.0, -4.0, -2.0, 0.0, 1.0]},
        "var": {"eps": [1e-10, 1e-8, 1e-7, 1e-6, 1e-4, 1e-2, 1.0]},
    })  # fmt: skip
    steps: int | None = None  # insertion/deletion increments; None: about 50 pixels (features: 1) per step
    baseline: str = "normal"
    baseline_stats: str = "image"  # the normal baseline's mean and std per channel: the image's or the training set's
    seed: int = 0
    max_batch: int | None = None  # rows per pass; None: resolve_max_batch (256 at 32x32, 5 at 224x224 on a CPU)
    chunk_size: int | None = None  # inputs read and scored at a time (evaluators.inputs.chunks); None: all at once
    n_grid: int = 6
    output_dir: str = "runs/aggregation"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_chunk_size(self.chunk_size)
        for name, value, allowed in (("reduction", self.reduction, REDUCTIONS),
                                     ("normalisation", self.normalisation, NORMALISATIONS),
                                     ("baseline_stats", self.baseline_stats, ("image", "training"))):  # fmt: skip
            if value not in allowed:
                raise InputError(f"option {name}={value!r}; expected one of {sorted(allowed)}")
        unknown = sorted(set(self.normalisations) - set(NORMALISATIONS))
        unknown += sorted(set(self.aggregators) - set(AGGREGATORS.names(kind="pixel")))
        unknown += sorted(set(self.sweeps) - set(AGGREGATORS.names(kind="pixel")))
        if unknown:
            raise InputError(f"unknown normalisation(s) or aggregator(s) {unknown}; expected some of "
                             f"{sorted(NORMALISATIONS)} and {sorted(AGGREGATORS.names(kind='pixel'))}")  # fmt: skip
        for name, sweep in self.sweeps.items():
            if not isinstance(sweep, dict) or len(sweep) != 1 or not isinstance(next(iter(sweep.values())), list):
                raise InputError(f"option sweeps.{name}={sweep!r}; expected one parameter and its values, "
                                 "e.g. {eps: [-1, 0, 1]}")  # fmt: skip
        if self.n_inputs < 2:
            raise InputError(f"option n_inputs={self.n_inputs}; expected at least 2 (for a confidence interval)")
        if not self.explainers:
            raise InputError("option explainers is empty; expected base explainers, name: {options}")

    def report_name(self) -> str:
        """The report folder's prefix: the run's dataset folder (train.py's runs/<dataset>/<run>), or a
        population's dataset."""
        population = population_path(self.run)
        return Path(self.run).resolve().parent.name if population is None else population_name(population)


def base_maps(cfg: AggregationConfig, model, chunk: Chunk) -> dict[str, torch.Tensor]:
    """Each explainer's maps (n, H, W) or (n, d) of a chunk's n inputs, cached per explainer
    under the chunk's ``maps/``; the k-th explainer draws from seed ``seed + k`` and the
    inputs' indices (``evaluators.maps.explain``), so a resumed or chunked run's maps are an
    uninterrupted run's; maps with NaN or ±inf are refused (the error names the explainer)
    before caching."""
    device = next(model.parameters()).device
    maps = {}
    for k, (name, options) in enumerate(cfg.explainers.items()):
        def compute(name=name, options=options, k=k) -> dict:
            inputs = chunk.inputs
            options = {"seed": cfg.seed + k, "index": chunk.index,  # an explainer's own seed wins
                       **explainer_options(options or {}, inputs)}  # fmt: skip
            m = explain(model, inputs.x, name, target=inputs.target, max_batch=cfg.max_batch, **options)
            m = inputs.modality.reduce(m.detach(), cfg.reduction)
            where = "" if chunk.index is None else f" (the chunk of inputs {chunk.start} … {chunk.stop - 1})"
            check_finite(m, f"explainer {name!r}{where}", "map")
            return {"maps": m.cpu()}

        print(f"  base maps: {name}", flush=True)
        maps[name] = cached(chunk.folder / "maps" / f"{name}.pt", compute, [name])["maps"].to(device)
    return maps


# --- rows -----------------------------------------------------------------------------
def report_rows(cfg: AggregationConfig, maps: dict[str, torch.Tensor], map_dims: int) -> dict[str, Callable]:
    """Row name -> a function computing that row's maps (N, *S), in report order."""
    stack = {how: torch.stack([normalise(m, how, map_dims, f"explainer {name!r}") for name, m in maps.items()])
             for how in dict.fromkeys([cfg.normalisation, *cfg.normalisations])}  # fmt: skip
    main = stack[cfg.normalisation]
    rows: dict[str, Callable] = {}
    for k, name in enumerate(maps):
        rows[f"base/{name}"] = lambda k=k: main[k]
    for name, params in cfg.aggregators.items():
        rows[f"agg/{name}"] = lambda name=name, params=params: aggregate(main, name, map_dims, **(params or {}))
    for how in cfg.normalisations:
        rows[f"norm/{how}"] = lambda how=how: aggregate(stack[how], "mean", map_dims)
    for name, sweep in cfg.sweeps.items():
        ((param, values),) = sweep.items()
        for value in values:
            rows[f"sweep/{name}/{param}={value}"] = lambda n=name, p=param, v=value: aggregate(
                main, n, map_dims, **{p: v})
    return rows


def score_row(cfg: AggregationConfig, model, chunk: Chunk, maps: torch.Tensor) -> dict:
    """Per-input insertion and deletion AUCs of one row's maps of a chunk's inputs, and the mean curves."""
    result, inputs = {}, chunk.inputs
    for mode in MODES:
        fractions, curves = METRICS[mode].function(
            model, inputs.x, maps, **METRICS[mode].fixed, target=inputs.target, steps=cfg.steps, baseline=cfg.baseline,
            stats=None if cfg.baseline_stats == "image" and inputs.modality.own_statistics else inputs.stats,
            seed=cfg.seed,
            max_batch=cfg.max_batch, **chunk.part,
        )  # fmt: skip
        result[mode] = auc(curves, fractions).cpu()
        result[f"{mode}_curve"] = curves.mean(0).cpu()
        result["fractions"] = fractions.cpu()
    return result


def merged_scores(parts: list[dict], sizes: list[int]) -> dict:
    """Per row: the chunks' per-input AUCs in order and their mean curves averaged (weighted by size)."""
    if len(parts) == 1:
        return parts[0]
    merged = {}
    for row, first in parts[0].items():
        merged[row] = {"fractions": first["fractions"]}
        for mode in MODES:
            merged[row][mode] = torch.cat([p[row][mode] for p in parts])
            total = sum(p[row][f"{mode}_curve"].double() * n for p, n in zip(parts, sizes))
            merged[row][f"{mode}_curve"] = (total / sum(sizes)).to(first[f"{mode}_curve"].dtype)
    return merged


def interval(values: torch.Tensor) -> dict[str, float]:
    """Mean and the half-width of its 95 % confidence interval (normal approximation), over the
    inputs where the score is defined (not NaN)."""
    v = values.double()
    v = v[~v.isnan()]
    return {"mean": v.mean().item(), "ci95": Z95 * v.std().item() / math.sqrt(len(v))}


def summarise(scores: dict[str, dict], reference: str = "agg/mean") -> dict:
    """Per row and mode: mean ± CI, and the paired difference to ``reference`` ± CI."""
    rows = {}
    for row, s in scores.items():
        rows[row] = {}
        for mode in MODES:
            entry = interval(s[mode])
            if reference in scores and row != reference:
                diff = interval(s[mode] - scores[reference][mode])
                entry["minus_mean"], entry["minus_mean_ci95"] = diff["mean"], diff["ci95"]
            rows[row][mode] = entry
    return rows


def paired(scores: dict[str, dict], row: str, other: str, mode: str) -> dict[str, float]:
    """``row`` minus ``other`` per input: mean and 95 % half-width."""
    return interval(scores[row][mode] - scores[other][mode])


def findings(scores: dict[str, dict], rows: dict) -> dict:
    """The paper's four claims on these numbers (insertion: higher is better; deletion:
    lower). "Within noise" of the best: the paired 95 % interval of the difference to the
    best aggregator includes 0."""
    agg = [r for r in rows if r.startswith("agg/")]
    base = [r for r in rows if r.startswith("base/")]
    norm = [r for r in rows if r.startswith("norm/")]
    out: dict = {}
    if "agg/mean" in rows and base:
        gaps = {b[5:]: paired(scores, "agg/mean", b, "insertion") for b in base}
        out["i_mean_minus_base_insertion"] = gaps
        out["i_mean_beats_every_base_on_insertion"] = all(g["mean"] - g["ci95"] > 0 for g in gaps.values())
    for mode, sign in (("insertion", 1), ("deletion", -1)):
        if not agg:
            continue
        ranked = sorted(agg, key=lambda r: sign * rows[r][mode]["mean"], reverse=True)
        out[f"aggregators_best_first_by_{mode}"] = [r[4:] for r in ranked]
        if "agg/ucb" in rows:
            gap = paired(scores, "agg/ucb", ranked[0], mode)
            out[f"ii_ucb_minus_best_{mode}"] = {"best": ranked[0][4:], **gap}
            out[f"ii_ucb_best_or_within_noise_{mode}"] = abs(gap["mean"]) <= gap["ci95"] or ranked[0] == "agg/ucb"
        out[f"iii_two_worst_by_{mode}"] = [r[4:] for r in ranked[-2:]]
    if norm:
        balance = {n[5:]: rows[n]["insertion"]["mean"] - rows[n]["deletion"]["mean"] for n in norm}
        out["iv_normalisations_by_insertion_minus_deletion"] = sorted(balance, key=balance.get, reverse=True)
    return out


def evaluate_aggregation(cfg: AggregationConfig, run_dir: Path) -> dict:
    """The report of ``cfg.run``: one model's, or, for a population, every member's
    (``evaluators.protocols.members``: in ``members/<name>/``) and their seed-level report."""

    def summarise(summaries: dict[str, dict]) -> dict:
        rows = list(next(iter(summaries.values()))["rows"])
        groups = {"explainers": [r for r in rows if r.startswith("base/")],
                  "aggregators": [r for r in rows if r.startswith("agg/")]}  # fmt: skip
        truth = next(iter(summaries.values())).get("truth_metrics", [])
        metrics = {m: METRICS[m].higher_is_better for m in (*MODES, *truth)}
        summary = population_summary(asdict(cfg), summaries, metrics, "ci95", groups,
                                     lambda s: {k: v for k, v in s["findings"].items()
                                                if not k.startswith("aggregators_best_first")})  # fmt: skip
        return {**summary, "truth_metrics": truth} if truth else summary

    return evaluate_run(cfg, run_dir, evaluate_model, ("n_inputs", "rows", "findings", "blank_maps", "truth_metrics"),
                        summarise)  # fmt: skip


def evaluate_model(cfg: AggregationConfig, model, data, run_dir: Path) -> dict:
    """The report of one model (on its device, in eval mode) trained on ``data``, its caches in ``run_dir``."""
    device = next(model.parameters()).device
    source = InputSource(model, data, cfg.n_inputs, cfg.n_baselines, cfg.seed, cfg.max_batch, device,
                         {option: default_of(cfg, option) for option in ("n_inputs", "n_baselines")},
                         cfg.chunk_size)  # fmt: skip
    names = explainer_names(model, source.head.x)
    unknown = sorted(set(cfg.explainers) - set(names))
    if unknown:
        raise InputError(f"unknown explainer(s) {unknown} for this model; expected some of {names}")
    n_grid = counted("n_grid", cfg.n_grid, source.n, "n_inputs selection", "inputs", default_of(cfg, "n_grid"))
    shown = torch.linspace(0, source.n - 1, n_grid).long()  # across the classes
    map_dims = source.modality.map_dims
    parts, sizes, blanks, examples, truth_parts = [], [], [], {}, []
    for chunk in source.chunks(run_dir):
        if cfg.chunk_size is not None:
            print(f"  inputs {chunk.start} … {chunk.stop - 1} of {chunk.total}", flush=True)
        maps = base_maps(cfg, model, chunk)
        rows = report_rows(cfg, maps, map_dims)
        here = shown[(shown >= chunk.start) & (shown < chunk.stop)] - chunk.start
        scores, truth, against_truth = {}, source.truth(chunk), {}
        for k, (row, compute) in enumerate(rows.items()):
            print(f"  [{k + 1}/{len(rows)}] {row}", flush=True)
            row_maps = compute()
            if row.startswith(("base/", "agg/")):
                examples.setdefault(row, []).append(row_maps[here].cpu())
            file = chunk.folder / "scores" / (row.replace("/", "__") + ".pt")
            scores[row] = cached(file, lambda m=row_maps: score_row(cfg, model, chunk, m), cfg.explainers)
            if truth is not None:  # no model pass: not cached
                against_truth[row] = scores_against_truth(row_maps, truth, source.modality)
        parts.append(scores)
        truth_parts += [against_truth] if truth is not None else []
        sizes.append(chunk.stop - chunk.start)
        blanks.append(count_blank_maps(maps))
    scores = merged_scores(parts, sizes)
    table = summarise(scores)
    truth_scores = concatenated(truth_parts) if truth_parts else {}
    for row, values in truth_scores.items():
        table[row].update({metric: interval(v) for metric, v in values.items()})
    blank_maps = {name: {kind: sum(b[name][kind] for b in blanks) for kind in counts}
                  for name, counts in blanks[0].items()}  # fmt: skip
    summary = {"config": asdict(cfg), "n_inputs": source.n, "rows": table, "findings": findings(scores, table),
               "blank_maps": blank_maps,
               **({"truth_metrics": list(source.modality.truth_metrics)} if truth_scores else {}),
               "curves": {r: {"fractions": s["fractions"].tolist(), **{m: s[f"{m}_curve"].tolist() for m in MODES}}
                          for r, s in scores.items() if r.startswith(("base/", "agg/mean", "norm/"))}}  # fmt: skip
    summary["_grid"] = {"x": source.read(shown.tolist()).cpu(), "maps": {r: torch.cat(m) for r, m in examples.items()},
                        "figure": source.modality.figure,
                        "normalization": getattr(data, "normalization", None)}  # fmt: skip
    return summary


# --- report ---------------------------------------------------------------------------
def _fmt(entry: dict) -> str:
    return f"{entry['mean']:.4f} ± {entry['ci95']:.4f}"


def markdown_table(summary: dict) -> str:
    """Rows of Table 1 (and each base explainer) beside the paper's ImageNet and GTSRB columns,
    then the scores against the ground truth where the data know it."""
    rows, truth = summary["rows"], summary.get("truth_metrics", [])
    lines = ["| method | insertion ↑ | deletion ↓ | ins. − mean | del. − mean | paper ImageNet ins. / del. "
             f"| paper GTSRB ins. / del. |{''.join(f' {m} ↑ |' for m in truth)}",
             "|---" * (7 + len(truth)) + "|"]  # fmt: skip
    for row, v in rows.items():
        if not row.startswith(("base/", "agg/")):
            continue
        kind, name = row.split("/", 1)
        paper = PAPER_TABLE_1.get(name) if kind == "agg" else None
        diffs = [f"{v[m]['minus_mean']:+.4f} ± {v[m]['minus_mean_ci95']:.4f}" if "minus_mean" in v[m] else "—"
                 for m in MODES]  # fmt: skip
        cols = [f"{paper[0]:.4f} / {paper[1]:.4f}", f"{paper[2]:.4f} / {paper[3]:.4f}"] if paper else ["—", "—"]
        label = name if kind == "agg" else f"{name} (base)"
        lines.append(f"| {label} | {_fmt(v['insertion'])} | {_fmt(v['deletion'])} | {' | '.join(diffs)} | "
                     f"{' | '.join(cols)} |{''.join(f' {_fmt(v[m])} |' for m in truth)}")  # fmt: skip
    note = blank_note(summary.get("blank_maps", {}), summary["n_inputs"])
    return "\n".join(lines) + "\n" + (f"\n{note}: the base rows score them as they are\n" if note else "")


def write_csv(summary: dict, path: Path) -> None:
    truth = summary.get("truth_metrics", [])
    with atomic_open(path, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["row", "insertion", "insertion_ci95", "deletion", "deletion_ci95",
                         "insertion_minus_mean", "insertion_minus_mean_ci95",
                         "deletion_minus_mean", "deletion_minus_mean_ci95",
                         *[f"{m}{s}" for m in truth for s in ("", "_ci95")]])  # fmt: skip
        for row, v in summary["rows"].items():
            writer.writerow([row, v["insertion"]["mean"], v["insertion"]["ci95"], v["deletion"]["mean"],
                             v["deletion"]["ci95"]] + [v[m].get(k) for m in MODES
                                                       for k in ("minus_mean", "minus_mean_ci95")]
                            + [v[m][k] for m in truth for k in ("mean", "ci95")])  # fmt: skip


def plot_sweeps(summary: dict, path: Path) -> Path | None:
    """Figures 5-9: score vs parameter per swept aggregator, with the mean and the best
    base explainer as reference lines."""
    plt = pyplot()

    rows = summary["rows"]
    sweeps: dict[str, list[tuple[str, float, dict]]] = {}
    for row, v in rows.items():
        if row.startswith("sweep/"):
            _, name, setting = row.split("/")
            param, value = setting.split("=")
            sweeps.setdefault(name, []).append((param, float(value), v))
    if not sweeps:
        return None
    base = {r: v for r, v in rows.items() if r.startswith("base/")}
    fig, axes = plt.subplots(2, len(sweeps), figsize=(3.2 * len(sweeps), 5.2), dpi=110, squeeze=False)
    for j, (name, points) in enumerate(sweeps.items()):
        points.sort(key=lambda p: p[1])
        for i, (mode, best) in enumerate((("insertion", max), ("deletion", min))):
            ax = axes[i, j]
            xs = [p[1] for p in points]
            means = [p[2][mode]["mean"] for p in points]
            cis = [p[2][mode]["ci95"] for p in points]
            ax.errorbar(xs, means, yerr=cis, marker="o", ms=3, lw=1, capsize=2, label=name)
            if "agg/mean" in rows:
                ax.axhline(rows["agg/mean"][mode]["mean"], color="k", ls="--", lw=0.8, label="mean")
            if base:
                top = best(base, key=lambda r: base[r][mode]["mean"])
                ax.axhline(base[top][mode]["mean"], color="tab:red", ls=":", lw=0.8, label=f"best base ({top[5:]})")
            if name == "var":
                ax.set_xscale("log")
            ax.set_xlabel(points[0][0])
            ax.set_ylabel(f"{mode} AUC")
            ax.set_title(f"{name}: {mode}", fontsize=8)
            ax.legend(fontsize=5)
    save_figure(fig, path)
    return path


def plot_normalisations(summary: dict, path: Path) -> Path | None:
    """Figure 10: mean insertion and deletion curves of the mean aggregator after each normalisation."""
    plt = pyplot()

    curves = {r[5:]: c for r, c in summary["curves"].items() if r.startswith("norm/")}
    if not curves:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), dpi=110)
    for ax, mode in zip(axes, MODES):
        for how, c in curves.items():
            score = summary["rows"][f"norm/{how}"][mode]["mean"]
            ax.plot(c["fractions"], c[mode], lw=1, label=f"{how} ({score:.4f})")
        ax.set_xlabel("fraction of pixels (features)")
        ax.set_ylabel("probability of the explained class")
        ax.set_title(f"{mode}, mean aggregation", fontsize=9)
        ax.legend(fontsize=6)
    save_figure(fig, path)
    return path


def plot_grid(summary: dict, path: Path) -> Path | None:
    """Inputs (un-normalised), then each base map and each aggregated map (images only)."""
    grid = summary["_grid"]
    if grid["figure"] != "heatmap" or not grid["maps"]:
        return None
    maps = {row.split("/", 1)[1]: m for row, m in grid["maps"].items()}
    return plot_map_grid(grid["x"], maps, grid["normalization"], path, cell=1.3)


def write_aggregation_report(summary: dict, out_dir: Path) -> None:
    truth = summary.get("truth_metrics", [])
    if "members" in summary:  # a population's report
        write_population_report(summary, out_dir, "aggregation", {"insertion": "insertion ↑", "deletion": "deletion ↓",
                                                                  **{m: f"{m} ↑" for m in truth}})  # fmt: skip
        return
    pngs = [p for p in (plot_sweeps(summary, out_dir / "sweeps.png"),
                        plot_normalisations(summary, out_dir / "normalisations.png"),
                        plot_grid(summary, out_dir / "grid.png")) if p is not None]  # fmt: skip
    summary.pop("_grid")
    write_json(out_dir / "aggregation.json", summary)
    write_csv(summary, out_dir / "aggregation.csv")
    write_text(out_dir / "table.md", markdown_table(summary))
    columns = ["row", *[f"{m}{s}" for m in (*MODES, *truth) for s in ("", "_ci95")]]
    data = [[r, *[v[m][k] for m in (*MODES, *truth) for k in ("mean", "ci95")]] for r, v in summary["rows"].items()]
    log_report(summary["config"]["log_to"], out_dir, "aggregation", summary["config"],
               {"aggregation": (columns, data)}, {p.stem: p for p in pngs},
               table_scalars("aggregation", columns, data, 1), summary["config"]["run"])  # fmt: skip
    note = blank_note(summary["blank_maps"], summary["n_inputs"])
    print(yaml.safe_dump(summary["findings"], sort_keys=False) + (note if note else ""))


PROTOCOLS.add("aggregation", evaluate_aggregation,
              help="pixel-level aggregation of explanations, insertion and deletion (Mahlau & Nolde)",
              config=AggregationConfig, write=write_aggregation_report, report="aggregation.json",
              resumable=True, source="run",
              choices={"explainers": (EXPLAINERS, {}), "aggregators": (AGGREGATORS, {"kind": "pixel"})})  # fmt: skip
