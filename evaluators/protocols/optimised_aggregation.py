"""Decker et al. (2024)'s evaluation of optimised aggregation: ``evaluate.py optimised
--config configs/optimised/<name>.yaml``.

From a trained model (a ``train.py`` run folder: an image classifier or a tabular MLP):

1. ``n_inputs`` test inputs (as ``evaluators.inputs.runs.load_inputs``), explained for their
   predicted class (images) or the positive class (tabular) by the k ``explainers``, each
   map post-processed by ``optimised_aggregators.explainer_maps`` (``absolute``: False keeps the sign);
2. Γ_robust and Γ_faith per input on ``m_agg`` fitting samples (the ``"fitting"`` stream),
   and the weights of ``agg_robust``, ``agg_faith`` and ``agg_opt`` from the exact simplex QP
   solver (the same computation as ``optimised_aggregation``, with each Γ computed once);
   ``agg_mean`` and ``agg_var`` beside them;
3. every row (each explainer alone, each aggregator) scored per input on fresh samples
   (the ``"evaluation"`` stream; the metrics of ``evaluators.metrics``): infidelity
   (β-normalised) and faithfulness correlation on ``m_eval`` superpixel (feature) subset
   perturbations, average and maximum sensitivity on ``m_sens`` noisy copies, ROAD MoRF and
   LeRF (the change in the target's probability, averaged over 10-90 %), and RIS, RRS, ROS
   (Decker et al.'s Table 3) on ``stability_samples`` noisy copies U[−r, r], r = ``stability_radius``, the
   representation L the input of module ``stability_layer`` (Decker et al.: the last layer
   before the classification, ``net.fc`` of the framework's ResNets, ``net.6`` of the
   tabular MLPs; None: the logits), the explanation's relative change taken as
   ``stability_change`` (a name of ``RELATIVE_CHANGES``);
   the aggregators' maps at a noisy copy being their weights (fixed at x) applied to the
   explainers' maps there (``agg_var``: recomputed there; why fixed, not refitted at x':
   docs/optimised_aggregation.md); and, if ``map_metrics`` names them, scores of each row's maps
   alone (``sparseness``, ``complexity``: ``evaluators.metrics.complexity``, of the maps as scored,
   after post-processing; none by default); where the data know the inputs' ground truth
   (``probe_truth``: docs/ground_truth.md), every row's maps scored against it as well, by the
   localisation metrics of ``evaluators.metrics.ground_truth`` (columns of their own after these,
   named by the summary's ``truth_metrics``; none where the data know no truth);
4. a table laid out like Decker's Tables 1-3 and 5-6 (rows × metrics, mean ± standard error
   over inputs; the paper's CIFAR-10 values beside a CIFAR-10 run's), the per-input weights
   (Figure 4 box plots), per explainer the number of blank (all-zero or constant) maps
   (``evaluators.reports.map_grid``), CSV/JSON/PNG and W&B.

Γ, maps and per-row scores are cached in the report folder (``maps.pt``, ``weights.pt``,
``scores.pt``: infidelity, FCOR, sensitivities; ``road.pt``; ``stability.pt``: RIS, RRS,
ROS), each with its explainers' definitions (``evaluators.inputs.runs.cached``: a file made
under an earlier definition of one, before issue 42, is computed again), so an interrupted run
continues with ``--resume``, and a report folder made before a
group of columns existed gains only that group (copy its cache files and ``config.yaml``
into a new folder and resume it). With ``chunk_size`` the inputs are read, explained and
scored that many at a time, each chunk's cache files in ``inputs/chunk-<j>/``
(``evaluators.inputs.chunks``: a split that does not fit in memory streams through; the
report from every chunk's per-input scores). The explainers' random draws (SmoothGrad's noise …)
come from ``seed`` for the inputs' maps, ``derived_seed(seed, 1)`` for the fitting copies
and ``derived_seed(seed, 2)`` for the evaluation copies, with each row's index
(``evaluators.maps.explain``): a resumed run gives an uninterrupted run's numbers, and image
maps do not depend on ``max_batch``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from evaluators.inputs.model_source import ModelSource
from evaluators.aggregators.optimised_aggregators import (
    combine, explainer_maps, faith_gamma, opt_gamma, robust_gamma, variance_aggregate,
)  # fmt: skip
from evaluators.aggregators.registry import AGGREGATORS
from evaluators.aggregators.simplex_qp import solve_simplex_qp
from evaluators.inputs.chunks import Chunk, InputSource, check_chunk_size, concatenated
from evaluators.inputs.counts import default_of
from evaluators.inputs.members import population_name, population_path
from evaluators.maps import EXPLAINERS, explainer_names
from evaluators.metrics.ground_truth import scores_against_truth
from evaluators.metrics.infidelity import M_EVAL, subset_perturbations
from evaluators.metrics.perturbations import RADIUS, uniform_noise
from evaluators.reports.map_grid import blank_note, count_blank_maps
from evaluators.protocols.registry import PROTOCOLS
from foundation.batching import resolve_max_batch
from foundation.errors import InputError
from foundation.files import atomic_open, pyplot, save_figure, write_json, write_text
from foundation.seeds import derived_seed
from evaluators.metrics.registry import METRICS
from evaluators.inputs.runs import cached, explainer_options
from evaluators.metrics.relative_stability import RELATIVE_CHANGES, STABILITIES
from evaluators.metrics.sensitivity import map_distances
from evaluators.protocols.members import evaluate_run, population_summary, write_population_report
from evaluators.reports.wandb_log import ReportLogging, log_report, table_scalars

# Decker et al.'s metrics (INFD, FCOR, SENS_AVG, SENS_MAX; ROAD; OpenXAI's relative stabilities), each a
# registered metric (an unknown name fails here): the report's columns, relative_stability's three in its place,
# each column's direction its metric's
PAPER_METRICS = ("infidelity", "fcor", "sens_avg", "sens_max", "road_morf", "road_lerf", "relative_stability")
COLUMNS = tuple(c for m in PAPER_METRICS for c in (STABILITIES if m == "relative_stability" else (METRICS[m].name,)))
HIGHER_IS_BETTER = {c: METRICS["relative_stability" if c in STABILITIES else c].higher_is_better for c in COLUMNS}
# Decker et al.'s CIFAR-10 column of Tables 5 (INFD, FCOR) and 6 (SENS_AVG, SENS_MAX): a
# pre-trained ResNet-18, 500 images; None where the paper prints no value.
PAPER_CIFAR10 = {
    "saliency": (4.129, 0.159, 0.916, 1.143), "deeplift": (3.928, 0.252, 0.805, 1.016),
    "integrated_gradients": (4.016, 0.229, 0.820, 1.029), "input_x_gradient": (4.326, 0.133, 0.910, 1.152),
    "smoothgrad": (3.736, 0.313, 0.818, 0.978), "vargrad": (3.607, 0.319, 0.617, 0.953),
    "agg_mean": (3.802, 0.290, 0.553, 0.699), "agg_var": (3.817, 0.290, 0.549, 0.689),
    "agg_opt": (3.538, 0.343, 0.492, 0.657), "agg_faith": (3.342, 0.378, None, None),
    "agg_robust": (None, None, 0.491, 0.650),
}  # fmt: skip
LABELS = ("INFD ↓", "FCOR ↑", "SENS_AVG ↓", "SENS_MAX ↓", "ROAD MoRF ↓", "ROAD LeRF ↑", "RIS ↓", "RRS ↓", "ROS ↓")
BASELINES = 64  # training inputs behind an explainer's option value ``training`` (load_inputs), at most
ROAD_PERCENTAGES = (10, 20, 30, 40, 50, 60, 70, 80, 90)  # pytorch-grad-cam's, as Decker et al.'s ROAD


def _decker_explainers() -> dict:
    """The explainers of Decker et al.'s CIFAR-10 tables (5-6; their ImageNet Table 1 adds
    GuidedBackprop, which ``explainers`` can name); the paper gives no settings: IG with 20
    steps, SmoothGrad and VarGrad with 10 noise samples (σ = 0.15) keep the CPU run short."""
    return {
        "saliency": {}, "deeplift": {}, "integrated_gradients": {"n_steps": 20}, "input_x_gradient": {},
        "smoothgrad": {"nt_samples": 10}, "vargrad": {"nt_samples": 10},
    }  # fmt: skip


@dataclass
class OptimisedAggregationConfig(ReportLogging, ModelSource):
    """Options of the optimised-aggregation evaluator (configs/optimised/<name>.yaml); the model and where it runs:
    ``evaluators.inputs.model_source.ModelSource``."""

    n_inputs: int = 200
    explainers: dict = field(default_factory=_decker_explainers)
    aggregators: list[str] = field(default_factory=lambda: AGGREGATORS.names(kind="optimised"))
    m_agg: int = 50
    m_eval: int = 200
    m_sens: int = 200
    radius: float = 0.1
    share: float = 0.2
    lam: float = 0.5
    stability_samples: int = M_EVAL
    stability_radius: float = RADIUS
    stability_layer: str | None = None
    # OpenXAI's ‖e − e'‖ / ‖e‖ (Decker et al. used OpenXAI): every min-max map has an exact zero, where
    # "elementwise" divides by ε_min = 1e-6, so that one pixel would make the whole score
    stability_change: str = "norm"
    # |φ| before the min-max normalisation, as the reference code; False keeps each attribution's
    # sign (a signed tabular attribution whose removal raises the output counts against FCOR and ROAD)
    absolute: bool = True
    map_metrics: list[str] = field(default_factory=list)  # registry metrics of the maps alone: extra columns
    seed: int = 0
    max_batch: int | None = None  # rows per pass; None: resolve_max_batch (256 at 32x32, 5 at 224x224 on a CPU)
    chunk_size: int | None = None  # inputs read and scored at a time (evaluators.inputs.chunks); None: all at once
    output_dir: str = "runs/optimised"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_chunk_size(self.chunk_size)
        unknown = sorted(set(self.aggregators) - set(AGGREGATORS.names(kind="optimised")))
        if unknown:
            raise InputError(f"unknown optimised aggregator(s) {unknown}; expected some of "
                             f"{AGGREGATORS.names(kind='optimised')}")  # fmt: skip
        for name in ("n_inputs", "m_agg", "m_eval", "m_sens", "stability_samples"):
            if getattr(self, name) < 2:
                raise InputError(f"option {name}={getattr(self, name)}; expected at least 2")
        if not self.stability_radius > 0:
            raise InputError(f"option stability_radius={self.stability_radius}; expected a positive number")
        if self.stability_change not in RELATIVE_CHANGES:
            raise InputError(f"option stability_change={self.stability_change!r}; expected one of "
                             f"{list(RELATIVE_CHANGES)}")  # fmt: skip
        if not self.explainers:
            raise InputError("option explainers is empty; expected explainer name: {options}")
        of_maps = METRICS.names(needs=("maps",))
        unknown = [name for name in self.map_metrics if name not in of_maps]
        if unknown:
            raise InputError(f"option map_metrics: unknown metric(s) {unknown}; expected some of {of_maps}")

    def report_name(self) -> str:
        population = population_path(self.run)
        return Path(self.run).resolve().parent.name if population is None else population_name(population)


def fit_weights(cfg: OptimisedAggregationConfig, model, x, target, explainers, maps, baseline,
                map_options: dict, chunk: Chunk) -> dict:  # fmt: skip
    """Γ_robust and Γ_faith (fitting samples) and each aggregator's weights (N, k) of a chunk's
    inputs x; ``maps`` and the noisy copies' maps made with ``map_options`` (``explainer_maps``' options)."""
    robust = robust_gamma(model, x, target, explainers, maps, cfg.m_agg, cfg.radius, cfg.seed, **map_options,
                          index=chunk.index)  # fmt: skip
    faith = faith_gamma(model, x, target, maps, cfg.m_agg, cfg.share, baseline, seed=cfg.seed,
                        max_batch=map_options["max_batch"], offset=chunk.start)  # fmt: skip
    k = maps.shape[1]
    weights = {"agg_mean": torch.full((len(x), k), 1 / k, dtype=torch.float64)}
    gammas = {"agg_robust": robust, "agg_faith": faith,
              "agg_opt": opt_gamma(robust, faith, cfg.lam)}
    weights.update({name: solve_simplex_qp(g).cpu() for name, g in gammas.items()})
    return {"gamma_robust": robust.cpu(), "gamma_faith": faith.cpu(), "weights": weights}


def row_maps(stack: torch.Tensor, weights: dict[str, torch.Tensor], names: list[str], aggregators: list[str],
             map_dims: int, repeat: int = 1) -> dict[str, torch.Tensor]:  # fmt: skip
    """Every row's maps from the explainers' maps ``stack`` (R, k, *S); weights per input
    are repeated ``repeat`` times (the noisy copies of one input are consecutive rows)."""
    rows = {name: stack[:, i] for i, name in enumerate(names)}
    for agg in aggregators:
        if agg == "agg_var":
            rows[agg] = variance_aggregate(stack, map_dims)
        else:
            rows[agg] = combine(stack, weights[agg].repeat_interleave(repeat, 0).to(stack.device))
    return rows


def evaluate_optimised(cfg: OptimisedAggregationConfig, run_dir: Path) -> dict:
    """The report of ``cfg.run``: one model's, or, for a population, every member's
    (``evaluators.protocols.members``: in ``members/<name>/``) and their seed-level report."""

    def summarise(summaries: dict[str, dict]) -> dict:
        names = next(iter(summaries.values()))["explainers"]
        groups = {"explainers": names, "aggregators": list(cfg.aggregators), "all": names + list(cfg.aggregators)}
        truth = next(iter(summaries.values())).get("truth_metrics", [])
        summary = population_summary(asdict(cfg), summaries, {**HIGHER_IS_BETTER, **{m: True for m in truth}}, "se",
                                     groups, lambda s: s["findings"])  # fmt: skip
        return {**summary, "truth_metrics": truth} if truth else summary

    return evaluate_run(cfg, run_dir, evaluate_model, ("dataset", "n_inputs", "explainers", "rows", "findings",
                                                       "blank_maps", "truth_metrics"), summarise)  # fmt: skip


def evaluate_model(cfg: OptimisedAggregationConfig, model, data, run_dir: Path) -> dict:
    """The report of one model (on its device, in eval mode) trained on ``data``, its caches in ``run_dir``."""
    device = next(model.parameters()).device
    unknown = sorted(set(cfg.explainers) - set(explainer_names(model)))
    if unknown:
        raise InputError(f"unknown explainer(s) {unknown} for this model; expected some of {explainer_names(model)}")
    modules = [name for name, _ in model.named_modules() if name]
    if cfg.stability_layer is not None and cfg.stability_layer not in modules:
        raise InputError(f"option stability_layer={cfg.stability_layer!r}; expected None (the logits) or a module "
                         f"name of the model, e.g. one of {modules[-3:]}")  # fmt: skip
    source = InputSource(model, data, cfg.n_inputs, BASELINES, cfg.seed, cfg.max_batch, device,
                         {"n_inputs": default_of(cfg, "n_inputs"), "n_baselines": BASELINES},
                         cfg.chunk_size)  # fmt: skip
    map_options = {"absolute": cfg.absolute, "max_batch": resolve_max_batch(cfg.max_batch, source.head.x)}
    parts = []
    for chunk in source.chunks(run_dir):
        if cfg.chunk_size is not None:
            print(f"  inputs {chunk.start} … {chunk.stop - 1} of {chunk.total}", flush=True)
        *part, rows = chunk_results(cfg, model, chunk, map_options, source.modality.map_dims)
        truth = source.truth(chunk)
        for row, maps in rows.items() if truth is not None else ():  # no model pass: not cached
            part[0][row].update(scores_against_truth(maps, truth, source.modality))
        parts.append(part)
    per_input, weights = concatenated([p[0] for p in parts]), concatenated([p[1] for p in parts])
    names = list(cfg.explainers)
    blanks = {name: {kind: sum(p[2][name][kind] for p in parts) for kind in counts}
              for name, counts in parts[0][2].items()}  # fmt: skip
    truth = [m for m in source.modality.truth_metrics if m in per_input[names[0]]]  # none where the data know no truth
    table = {row: {m: mean_and_error(v[m]) for m in (*columns(asdict(cfg)), *truth)} for row, v in per_input.items()}
    weights = {a: w.tolist() for a, w in weights.items() if a in cfg.aggregators}
    return {"config": asdict(cfg), "dataset": data.name, "n_inputs": source.n, "explainers": names, "rows": table,
            "weights": weights, "blank_maps": blanks, "findings": findings(table, names, cfg.aggregators),
            **({"truth_metrics": truth} if truth else {})}  # fmt: skip


def chunk_results(cfg: OptimisedAggregationConfig, model, chunk: Chunk, map_options: dict,
                  map_dims: int) -> tuple[dict, dict, dict, dict]:  # fmt: skip
    """A chunk's per-input scores (row -> metric -> (n,)), weights (aggregator -> (n, k)),
    blank-map counts and rows' maps (row -> (n, *S)), from its cache files (``maps.pt``,
    ``weights.pt``, ``scores.pt``, ``road.pt``, ``stability.pt`` in ``chunk.folder``), computed
    where missing."""
    device = next(model.parameters()).device
    max_batch, names = map_options["max_batch"], list(cfg.explainers)

    def inputs() -> tuple:
        """x, target, the explainers' options and the subset baseline (tabular: feature means; images:
        a blurred copy), read on first use."""
        got = chunk.inputs
        explainers = {name: explainer_options(options or {}, got) for name, options in cfg.explainers.items()}
        return got.x, got.target, explainers, None if got.modality.spatial else got.stats[0]

    def copies_seed(part: slice, m: int) -> dict:
        """The explainers' draws for the m noisy copies of each input of ``part`` (copy s of input i
        is row i·m + s, i the index among all inputs): from (``derived_seed(seed, 2)``, the row),
        whatever the chunking."""
        return {"seed": derived_seed(cfg.seed, 2),
                "index": torch.arange((chunk.start + part.start) * m, (chunk.start + part.stop) * m)}  # fmt: skip

    def clean_maps() -> dict:
        x, target, explainers, _ = inputs()
        return {"maps": explainer_maps(model, x, target, explainers, seed=cfg.seed, index=chunk.index,
                                       **map_options).cpu()}  # fmt: skip

    print("  explainer maps", flush=True)
    stack = cached(chunk.folder / "maps.pt", clean_maps, names)["maps"].to(device)
    print("  Γ_robust, Γ_faith and weights (fitting samples)", flush=True)

    def fitted_weights() -> dict:
        x, target, explainers, baseline = inputs()
        return fit_weights(cfg, model, x, target, explainers, stack, baseline, map_options, chunk)

    fitted = cached(chunk.folder / "weights.pt", fitted_weights, names)
    rows = row_maps(stack, fitted["weights"], names, cfg.aggregators, map_dims)

    def scores() -> dict:
        x, target, explainers, baseline = inputs()
        print("  infidelity and faithfulness correlation (evaluation samples)", flush=True)
        samples = subset_perturbations(model, x, target, cfg.m_eval, cfg.share, baseline, seed=cfg.seed,
                                       max_batch=max_batch, offset=chunk.start)  # fmt: skip
        out = {row: {name: METRICS[name].function(m, samples).cpu() for name in ("infidelity", "fcor")}
               for row, m in rows.items()}  # fmt: skip
        print("  sensitivity (evaluation samples)", flush=True)
        distances = {row: [] for row in rows}
        per_call = max(1, max_batch // cfg.m_sens)
        for start in range(0, len(x), per_call):
            part = slice(start, min(start + per_call, len(x)))
            noisy = uniform_noise(x[part], cfg.m_sens, cfg.radius, cfg.seed, "evaluation",
                                  offset=chunk.start + start).flatten(0, 1)  # fmt: skip
            noisy_target = target[part].repeat_interleave(cfg.m_sens)
            noisy_stack = explainer_maps(model, noisy, noisy_target, explainers, **map_options,
                                         **copies_seed(part, cfg.m_sens))  # fmt: skip
            weights = {a: w[part] for a, w in fitted["weights"].items()}
            for row, m in row_maps(noisy_stack, weights, names, cfg.aggregators, map_dims, cfg.m_sens).items():
                distances[row].append(map_distances(m, rows[row][part].double()))
            print(f"    {part.stop}/{len(x)} inputs", flush=True)
        for row in rows:
            d = torch.cat(distances[row]).cpu()
            out[row].update({"sens_avg": d.mean(1), "sens_max": d.amax(1)})
        return out

    def road() -> dict:
        x, target, _, baseline = inputs()
        print("  ROAD (MoRF, LeRF)", flush=True)
        out = {}
        for row, m in rows.items():
            out[row] = {}
            for name in ("road_morf", "road_lerf"):
                spec = METRICS[name]
                _, curves = spec.function(model, x, m, **spec.fixed, percentages=ROAD_PERCENTAGES, target=target,
                                          difference=True, feature_means=baseline, seed=cfg.seed,
                                          max_batch=max_batch, **chunk.part)  # fmt: skip
                out[row][name] = curves.mean(1).cpu()
        return out

    def stability() -> dict:
        x, target, explainers, _ = inputs()
        print("  relative stability (RIS, RRS, ROS)", flush=True)
        n = cfg.stability_samples
        parts = {row: {name: [] for name in STABILITIES} for row in rows}
        per_call = max(1, max_batch // n)
        for start in range(0, len(x), per_call):
            part = slice(start, min(start + per_call, len(x)))
            perturbed = uniform_noise(x[part], n, cfg.stability_radius, cfg.seed, "evaluation",
                                      offset=chunk.start + start)  # fmt: skip
            part_target = target[part]
            noisy_stack = explainer_maps(model, perturbed.flatten(0, 1), part_target.repeat_interleave(n),
                                         explainers, **map_options,
                                         **copies_seed(part, n))  # fmt: skip
            weights = {a: w[part] for a, w in fitted["weights"].items()}
            for row, m in row_maps(noisy_stack, weights, names, cfg.aggregators, map_dims, n).items():
                result = METRICS["relative_stability"].function(
                    model, x[part], rows[row][part], lambda v, t, m=m: m, part_target, radius=cfg.stability_radius,
                    change=cfg.stability_change, layer=cfg.stability_layer, perturbed=perturbed, seed=cfg.seed,
                    max_batch=max(max_batch, len(m)),
                )  # fmt: skip
                for name in STABILITIES:
                    parts[row][name].append(result[name].cpu())
            print(f"    {part.stop}/{len(x)} inputs", flush=True)
        return {row: {name: torch.cat(v) for name, v in values.items()} for row, values in parts.items()}

    per_input = cached(chunk.folder / "scores.pt", scores, names)
    extras = {"road.pt": road, "stability.pt": stability}
    for extra in (cached(chunk.folder / file, compute, names) for file, compute in extras.items()):
        for row, values in extra.items():
            per_input[row].update(values)
    for name in cfg.map_metrics:  # the maps alone: cheap, so not cached
        for row, m in rows.items():
            per_input[row][name] = METRICS[name].function(m).cpu()
    blanks = count_blank_maps({name: stack[:, i] for i, name in enumerate(names)})
    return per_input, fitted["weights"], blanks, rows


def columns(config: dict) -> tuple[str, ...]:
    """The report's metrics: ``COLUMNS`` and the config's ``map_metrics`` (none in older reports)."""
    return (*COLUMNS, *config.get("map_metrics", ()))


def report_columns(summary: dict) -> tuple[str, ...]:
    """A report's metrics: ``columns`` of its config, then its ``truth_metrics`` (where the data know a truth)."""
    return (*columns(summary["config"]), *summary.get("truth_metrics", ()))


def mean_and_error(values: torch.Tensor) -> dict[str, float]:
    """Mean and its standard error over inputs (Decker et al. report mean ± s.e.), leaving
    out inputs where the metric is undefined (NaN: FCOR of a constant map or response;
    relative stability of an input whose every noisy copy changed the prediction; the
    sparseness or complexity of an all-zero map)."""
    v = values.double()
    v = v[~v.isnan()]
    return {"mean": v.mean().item(), "se": v.std().item() / math.sqrt(len(v)), "n": len(v)}


def findings(table: dict, names: list[str], aggregators: list[str]) -> dict:
    """Decker et al.'s claims on these numbers: which row is lowest on each metric, and
    whether each optimised aggregator beats every single explainer and AGG_mean/AGG_var."""
    def better(a: str, b: str, metric: str) -> bool:
        sign = -1 if HIGHER_IS_BETTER[metric] else 1
        return sign * table[a][metric]["mean"] < sign * table[b][metric]["mean"]

    out = {"best": {m: min(table, key=lambda r: (-1 if HIGHER_IS_BETTER[m] else 1) * table[r][m]["mean"])
                    for m in COLUMNS}}  # fmt: skip
    for agg, metric in (("agg_faith", "infidelity"), ("agg_faith", "fcor"), ("agg_robust", "sens_avg"),
                        ("agg_robust", "sens_max"), ("agg_opt", "infidelity"), ("agg_opt", "sens_avg")):  # fmt: skip
        if agg in table:
            others = names + [a for a in ("agg_mean", "agg_var") if a in table]
            out[f"{agg}_beats_every_explainer_and_mean_var_on_{metric}"] = all(better(agg, r, metric) for r in others)
    return out


def is_cifar10(dataset: str | None) -> bool:
    """Whether a datamodule's name is CIFAR-10's (``cifar10``, ``cifar10-jpeg``, ``CIFAR-10`` …)."""
    return (dataset or "").lower().replace("-", "").replace("_", "").startswith("cifar10")


def markdown_table(summary: dict) -> str:
    """Rows × metrics (mean ± s.e.); for a CIFAR-10 run, INFD, FCOR and the sensitivities
    beside Decker et al.'s CIFAR-10 value (the paper has no CIFAR-10 ROAD or relative
    stability; for other datasets it has no comparable value, so no paper column); under
    the table, the explainers with blank (all-zero or constant) maps. The ``map_metrics`` follow
    the nine columns, then the ``truth_metrics``."""
    paper_columns = is_cifar10(summary.get("dataset"))
    extra = report_columns(summary)[len(COLUMNS):]
    head = [f"{name}{' | paper, CIFAR-10' if paper_columns and i < 4 else ''}" for i, name in enumerate(LABELS)]
    head += [f"{name} {'↑' if METRICS[name].higher_is_better else '↓'}" for name in extra]
    lines = [f"| method | {' | '.join(head)} |", "|---" * (10 + len(extra) + 4 * paper_columns) + "|"]
    for row, v in summary["rows"].items():
        paper = PAPER_CIFAR10.get(row, (None,) * 4) + ("",) * 5 if paper_columns else ("",) * 9
        cells = [f"{v[m]['mean']:.4f} ± {v[m]['se']:.4f}" + ("" if p == "" else f" | {'—' if p is None else p}")
                 for m, p in zip(report_columns(summary), paper + ("",) * len(extra))]  # fmt: skip
        lines.append(f"| {row} | {' | '.join(cells)} |")
    note = blank_note(summary.get("blank_maps", {}), summary["n_inputs"])
    return "\n".join(lines) + "\n" + (f"\n{note} (after post-processing): they score as they are\n" if note else "")


def plot_weights(summary: dict, path: Path) -> Path:
    """Figure 4: box plots of the per-input weights of each optimised aggregator."""
    plt = pyplot()

    aggs = [a for a in ("agg_robust", "agg_faith", "agg_opt") if a in summary["weights"]]
    fig, axes = plt.subplots(1, max(1, len(aggs)), figsize=(4 * max(1, len(aggs)), 3.4), dpi=110, squeeze=False)
    for ax, agg in zip(axes[0], aggs):
        w = torch.tensor(summary["weights"][agg])
        ax.boxplot([w[:, i].numpy() for i in range(w.shape[1])], showfliers=True)
        ax.set_xticks(range(1, w.shape[1] + 1), summary["explainers"], rotation=45, ha="right", fontsize=7)
        ax.set_ylabel("weight")
        ax.set_title(agg, fontsize=9)
    save_figure(fig, path)
    return path


def write_optimised_report(summary: dict, out_dir: Path) -> None:
    if "members" in summary:  # a population's report
        labels = {m: LABELS[i] if i < len(LABELS) else m for i, m in enumerate(COLUMNS)}  # a new column: its name
        labels.update({m: f"{m} ↑" for m in summary.get("truth_metrics", ())})
        write_population_report(summary, out_dir, "optimised_aggregation", labels)
        return
    png = plot_weights(summary, out_dir / "weights.png")
    write_json(out_dir / "optimised_aggregation.json", summary)
    write_text(out_dir / "table.md", markdown_table(summary))
    metrics = report_columns(summary)
    with atomic_open(out_dir / "optimised_aggregation.csv", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["row"] + [f"{m}{s}" for m in metrics for s in ("", "_se")])
        for row, v in summary["rows"].items():
            writer.writerow([row] + [v[m][k] for m in metrics for k in ("mean", "se")])
    data = [[r] + [v[m]["mean"] for m in metrics] for r, v in summary["rows"].items()]
    log_report(summary["config"]["log_to"], out_dir, "optimised_aggregation", summary["config"],
               {"optimised_aggregation": (["row", *metrics], data)}, {"weights": png},
               table_scalars("optimised_aggregation", ["row", *metrics], data, 1),
               summary["config"]["run"])  # fmt: skip
    print(markdown_table(summary))


PROTOCOLS.add("optimised", evaluate_optimised,
              help="optimised aggregation of explainers: infidelity and sensitivity (Decker et al.)",
              config=OptimisedAggregationConfig, write=write_optimised_report, report="optimised_aggregation.json",
              resumable=True, source="run",
              choices={"explainers": (EXPLAINERS, {}), "aggregators": (AGGREGATORS, {"kind": "optimised"}),
                       "map_metrics": (METRICS, {"needs": ("maps",)})})  # fmt: skip
