"""Adebayo et al. (NeurIPS 2018)'s model-randomisation sanity check and Sixt et al. (2020)'s
random-logit test: ``evaluate.py sanity --config configs/sanity/<name>.yaml``.

From a trained model (a ``train.py`` run folder or a model file: an image classifier or a
tabular MLP):

1. ``n_inputs`` test inputs (images evenly spaced through the test split; the first rows of a
   tabular test split), each explained for the original model's predicted class, which
   stays the explained class after every randomisation;
2. for each ``mode`` (``cascading``: the layers with parameters re-initialised one more at a
   time from the top (output) layer down, Adebayo §3.1; ``independent``: one layer at a time,
   the others as trained), each explainer's maps after each stage, compared with the original
   model's maps of the same input by each similarity ``measure``
   (``evaluators.metrics.similarity``: Spearman rank correlation of absolute and of signed
   maps; SSIM and the Pearson correlation of HOG features for images). Image maps are first
   reduced to one value per pixel by ``reduction``. The randomisation itself, its seed and what
   happens to BatchNorm's running statistics: ``evaluators.sanity``;
3. per stage × explainer × measure: the mean over inputs with a 95 % confidence interval
   (normal approximation, mean ± 1.96 s/√n, ``evaluators.protocols.aggregation.interval``);
   a similarity that is undefined for an input (a constant map has no rank correlation) is
   left out of that mean and counted (``n`` says how many inputs it averages);
4. ``random_logit``: each explainer's maps for a random other class (drawn from ``seed``)
   against its maps for the explained class, by the same measures (Quantus's ``RandomLogit``);
5. Hedström et al. (2023)'s repairs of the test, where asked: ``smooth_mprt`` (the stages of
   a bottom-up cascade compared on denoised maps, ``smooth_samples`` noisy copies of each input
   with noise ``smooth_noise`` of its value range; reported as the pseudo-mode
   ``smooth_mprt`` beside the modes) and ``efficient_mprt`` (the relative rise of each map's
   discrete entropy from the original to the fully randomised model, ``n_bins`` bins; higher
   is better); both ``evaluators.sanity``.

Everything lands in the report folder: ``similarities/`` (per mode and explainer, as each
finishes, so an interrupted run continues with ``--resume``; ``efficient_mprt/`` likewise) and
at the end ``sanity.json``, ``sanity.csv``, ``random_logit.csv``, ``efficient_mprt.csv``,
``table.md`` and the figures of
``evaluators.reports.sanity_figures`` (maps after each stage; similarity against stage).

Given a population in place of one run (``evaluators.inputs.members``), each member is
evaluated as one run into ``members/<name>/`` and the report is the seed-level one of
``evaluators.protocols.sanity_population`` (docs/sanity_checks.md, "Over a population").
"""

from __future__ import annotations

import csv
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from evaluators.inputs.counts import counted, default_of
from evaluators.inputs.members import load_members, model_options, population_name, population_path
from evaluators.inputs.model_source import ModelSource
from evaluators.inputs.runs import Inputs, cached, explainer_options, load_inputs, load_run
from evaluators.maps import EXPLAINERS, explainer_names
from foundation.modality import REDUCTIONS
from evaluators.metrics.similarity import checked_measures
from evaluators.protocols.aggregation import interval
from evaluators.protocols.sanity_population import evaluate_population, write_population_report
from evaluators.reports.sanity_figures import plot_similarity_curves, plot_stage_maps, stage_labels
from evaluators.reports.wandb_log import ReportLogging, log_report, table_scalars
from evaluators.sanity import MODES, efficient_mprt, model_randomisation, random_logit
from evaluators.protocols.registry import PROTOCOLS
from foundation.devices import resolve_device
from foundation.errors import InputError
from foundation.files import atomic_open, write_json, write_text

BOTH = ("cascading", "independent")  # Adebayo et al.'s two modes, option mode=both
MODE_OPTIONS = (*MODES, "both")
EFFICIENT = ("scores", "entropy", "randomised_entropy")  # the efficient MPRT's numbers per explainer


def _adebayo_explainers() -> dict:
    """Adebayo et al.'s Figure 2 explainers that the registry has, with their settings where
    the paper gives them (SmoothGrad: 50 samples, σ = 0.15 of the input range)."""
    return {
        "saliency": {},
        "integrated_gradients": {"n_steps": 50},
        "smoothgrad": {"nt_samples": 50, "stdevs": 0.15},
        "guided_backprop": {},
        "gradcam": {},
        "deeplift": {},
        "input_x_gradient": {},
    }


@dataclass
class SanityConfig(ReportLogging, ModelSource):
    """Options of the sanity-check protocol (configs/sanity/<name>.yaml); the model and where it runs:
    ``evaluators.inputs.model_source.ModelSource``."""

    mode: str = "cascading"  # cascading, independent or both
    explainers: dict = field(default_factory=_adebayo_explainers)  # registry name -> options
    measures: list[str] | None = None  # None: every measure the data takes (tables: the Spearman ones)
    n_inputs: int = 100
    n_baselines: int = 64  # training inputs behind the option value ``training``
    reduction: str = "sum"  # image maps (C, H, W) -> (H, W); ``sum`` keeps the sign for the signed measures
    random_logit: bool = True
    smooth_mprt: bool = False  # Hedström et al.'s smooth MPRT beside the modes (pseudo-mode smooth_mprt)
    smooth_samples: int = 50  # noisy copies per input (their ImageNet setting, Quantus's default)
    smooth_noise: float = 0.1  # the noise's std as a share of each input's value range
    efficient_mprt: bool = False  # Hedström et al.'s efficient MPRT
    n_bins: int = 100  # its histogram bins
    seed: int = 0  # the randomised weights, the random logits and the explainers' draws
    max_batch: int | None = None  # rows per pass; None: resolve_max_batch
    n_figure: int = 3  # images in the map figure, spread through the n_inputs
    output_dir: str = "runs/sanity"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, value, allowed in (("mode", self.mode, MODE_OPTIONS), ("reduction", self.reduction, REDUCTIONS)):
            if value not in allowed:
                raise InputError(f"option {name}={value!r}; expected one of {list(allowed)}")
        if self.measures is not None:
            checked_measures(self.measures)
        if not self.explainers or not all(isinstance(v, dict) or v is None for v in self.explainers.values()):
            raise InputError(f"option explainers={self.explainers!r}; expected explainers, name: {{options}}")
        if self.n_inputs < 2:
            raise InputError(f"option n_inputs={self.n_inputs}; expected at least 2 (for a confidence interval)")
        if self.n_figure < 0:
            raise InputError(f"option n_figure={self.n_figure}; expected 0 (no map figure) or more images")
        for option in ("smooth_samples", "n_bins"):
            if isinstance(getattr(self, option), bool) or not isinstance(getattr(self, option), int) \
                    or getattr(self, option) < 1:
                raise InputError(f"option {option}={getattr(self, option)!r}; expected a positive integer")
        if not isinstance(self.smooth_noise, (int, float)) or not 0 <= self.smooth_noise < float("inf"):
            raise InputError(f"option smooth_noise={self.smooth_noise!r}; expected a non-negative share of the "
                             "input's value range")  # fmt: skip

    @property
    def modes(self) -> tuple[str, ...]:
        return BOTH if self.mode == "both" else (self.mode,)

    @property
    def stage_runs(self) -> dict[str, tuple[str, int, float]]:
        """Each reported mode -> (randomisation mode, noisy copies per input, noise): the
        modes on plain maps, and ``smooth_mprt`` (bottom up, denoised) where asked."""
        runs = {mode: (mode, 1, 0.0) for mode in self.modes}
        if self.smooth_mprt:
            runs["smooth_mprt"] = ("bottom_up", self.smooth_samples, float(self.smooth_noise))
        return runs

    def report_name(self) -> str:
        """The report folder's prefix: the run's dataset folder (train.py's runs/<dataset>/<run>), or a
        population's dataset."""
        population = population_path(self.run)
        return Path(self.run).resolve().parent.name if population is None else population_name(population)


# --- evaluation -----------------------------------------------------------------------
def stage_scores(cfg: SanityConfig, model, inputs: Inputs, mode: str, name: str, options: dict,
                 measures: list[str], shown: torch.Tensor, n_samples: int = 1, noise: float = 0.0) -> dict:  # fmt: skip
    """One explainer's scores (S, M, N) at the S stages of ``mode``: stage 0 the original
    model's maps against themselves (1, or NaN where a map is constant), then after each
    layer's randomisation (``evaluators.sanity.model_randomisation``, maps denoised over
    ``n_samples`` noisy copies where more than 1); the stages' names, the maps of the
    ``shown`` inputs at each stage (S, n, ...) and the seconds it took."""
    start = time.perf_counter()
    options = {"max_batch": cfg.max_batch, **explainer_options(options or {}, inputs)}
    result = model_randomisation(model, inputs.x, inputs.target, {name: options}, mode, measures, cfg.seed,
                                 cfg.reduction, keep_maps=shown, n_samples=n_samples,
                                 noise_magnitude=noise)  # fmt: skip
    scores = torch.cat([result.itself[None, 0], result.scores[:, 0]]).cpu()  # (1 + L, M, N)
    return {"scores": scores, "stages": ["original", *result.layers], "shown": result.maps[name].cpu(),
            "seconds": time.perf_counter() - start}


def random_logit_scores(cfg: SanityConfig, model, inputs: Inputs, name: str, options: dict,
                        measures: list[str]) -> dict:  # fmt: skip
    """One explainer's random-logit scores (M, N) (``evaluators.sanity.random_logit``)."""
    options = {"max_batch": cfg.max_batch, **explainer_options(options or {}, inputs)}
    scores = random_logit(model, inputs.x, inputs.target, {name: options}, measures, cfg.seed, cfg.reduction)[name]
    return {"scores": torch.stack([scores[m] for m in measures]).cpu()}


def efficient_scores(cfg: SanityConfig, model, inputs: Inputs, name: str, options: dict) -> dict:
    """One explainer's efficient-MPRT scores (N,) and the two entropies (N,) (``evaluators.sanity.efficient_mprt``)."""
    options = {"max_batch": cfg.max_batch, **explainer_options(options or {}, inputs)}
    result = efficient_mprt(model, inputs.x, inputs.target, {name: options}, cfg.seed, cfg.n_bins, cfg.reduction)
    return {"scores": result.scores[0].cpu(), "entropy": result.entropy[0].cpu(),
            "randomised_entropy": result.randomised_entropy[0].cpu()}


def evaluate_sanity(cfg: SanityConfig, run_dir: Path) -> dict:
    """The report of ``cfg.run``: one model's, or, for a population, every member's (in
    ``members/<name>/``) and their seed-level report (``evaluators.protocols.sanity_population``)."""
    device = resolve_device(cfg.device)
    population = population_path(cfg.run)
    if population is not None:
        members = load_members(population, device, cfg.data_dir, cfg.kind, model_options(cfg))
        return evaluate_population(cfg, members, run_dir, evaluate_model)
    model, data, _ = load_run(Path(cfg.run), cfg.checkpoint, data_location=cfg.data_dir, kind=cfg.kind,
                              where=f"option run={cfg.run!r}", **model_options(cfg))  # fmt: skip
    return evaluate_model(cfg, model.to(device).eval(), data, run_dir)


def evaluate_model(cfg: SanityConfig, model, data, run_dir: Path) -> dict:
    """The report of one model (on its device, in eval mode) trained on ``data``, its caches in ``run_dir``."""
    device = next(model.parameters()).device
    inputs = load_inputs(model, data, cfg.n_inputs, cfg.n_baselines, cfg.seed, cfg.max_batch, device,
                         {option: default_of(cfg, option) for option in ("n_inputs", "n_baselines")})  # fmt: skip
    measures = checked_measures(cfg.measures, inputs.modality)
    names = explainer_names(model, inputs.x)
    unknown = sorted(set(cfg.explainers) - set(names))
    if unknown:
        raise InputError(f"option explainers: unknown explainer(s) {unknown} for this model; expected some of {names}")
    n_figure = 0 if inputs.modality.figure != "heatmap" or cfg.n_figure == 0 else counted(
        "n_figure", cfg.n_figure, len(inputs.x), "n_inputs selection", "inputs", default_of(cfg, "n_figure"))
    shown = torch.linspace(0, len(inputs.x) - 1, n_figure).long()  # across the classes
    results: dict[tuple[str, str], dict] = {}
    runs = cfg.stage_runs
    for label, (mode, n_samples, noise) in runs.items():
        for name, options in cfg.explainers.items():
            print(f"  {label}: {name}", flush=True)
            results[label, name] = cached(run_dir / "similarities" / f"{label}__{name}.pt", lambda: stage_scores(
                cfg, model, inputs, mode, name, options, measures, shown, n_samples, noise), [name])  # fmt: skip
    efficient = {}
    for name, options in cfg.explainers.items() if cfg.efficient_mprt else ():
        print(f"  efficient MPRT: {name}", flush=True)
        efficient[name] = cached(run_dir / "efficient_mprt" / f"{name}.pt",
                                 lambda: efficient_scores(cfg, model, inputs, name, options), [name])
    logit = {}
    for name, options in cfg.explainers.items() if cfg.random_logit else ():
        print(f"  random logit: {name}", flush=True)
        logit[name] = cached(run_dir / "random_logit" / f"{name}.pt",
                             lambda: random_logit_scores(cfg, model, inputs, name, options, measures), [name])
    first, modules = next(iter(cfg.explainers)), dict(model.named_modules())
    summary = {
        "config": asdict(cfg), "n_inputs": len(inputs.x), "measures": measures,
        "stages": {mode: results[mode, first]["stages"] for mode in runs},
        "layer_types": {mode: ["", *(type(modules[layer]).__name__ for layer in results[mode, first]["stages"][1:])]
                        for mode in runs},  # each stage's randomised layer's class
        "similarity": {mode: {name: summarise_stages(results[mode, name]["scores"], results[mode, name]["stages"],
                                                     measures) for name in cfg.explainers} for mode in runs},
        "random_logit": {name: {m: interval_of_defined(r["scores"][j]) for j, m in enumerate(measures)}
                         for name, r in logit.items()},
        "efficient_mprt": {name: {key: interval_of_defined(r[key]) for key in EFFICIENT}
                           for name, r in efficient.items()},
        "seconds": {f"{mode}/{name}": r["seconds"] for (mode, name), r in results.items()},
    }  # fmt: skip
    summary["_figure"] = None if not n_figure else {
        "x": inputs.x[shown.to(device)].cpu(), "normalization": getattr(data, "normalization", None),
        "maps": {mode: {name: results[mode, name]["shown"] for name in cfg.explainers} for mode in runs}}
    return summary


# --- summaries ------------------------------------------------------------------------
def interval_of_defined(values: torch.Tensor) -> dict:
    """Mean and 95 % half-width (``aggregation.interval``) over the defined (not NaN) values
    of ``values`` (n,), and their count ``n``; None where fewer than 1 (mean) or 2 (interval)."""
    defined = values[~values.isnan()]
    if len(defined) == 0:
        return {"mean": None, "ci95": None, "n": 0}
    if len(defined) == 1:
        return {"mean": defined.double().item(), "ci95": None, "n": 1}
    return {**interval(defined), "n": len(defined)}


def summarise_stages(scores: torch.Tensor, stages: list[str], measures: list[str]) -> dict[str, list[dict]]:
    """Scores (S, M, N) of S stages, M measures, N inputs -> measure -> per stage
    ``{"stage", "mean", "ci95", "n"}``."""
    return {measure: [{"stage": stage, **interval_of_defined(scores[s, m])} for s, stage in enumerate(stages)]
            for m, measure in enumerate(measures)}  # fmt: skip


# --- report ---------------------------------------------------------------------------
def _fmt(entry: dict, n_inputs: int) -> str:
    """``mean ± ci95``, with ``(n=...)`` where fewer than all ``n_inputs`` scores were defined."""
    if entry["mean"] is None:
        return "undefined"
    text = f"{entry['mean']:.3f}" + (f" ± {entry['ci95']:.3f}" if entry["ci95"] is not None else "")
    return text + (f" (n={entry['n']})" if entry["n"] != n_inputs else "")


def markdown_table(summary: dict) -> str:
    """Per mode and measure: explainers (rows) × stages (columns), mean ± 95 % half-width;
    then the random-logit scores."""
    lines = []
    n = summary["n_inputs"]
    for mode, by_explainer in summary["similarity"].items():
        stages = summary["stages"][mode]
        for measure in summary["measures"]:
            lines += [f"### {mode}: {measure} (of {n} inputs)", "",
                      "| explainer | " + " | ".join(stages) + " |", "|---" * (len(stages) + 1) + "|"]  # fmt: skip
            for name, by_measure in by_explainer.items():
                cells = [_fmt(e, n) for e in by_measure[measure]]
                lines.append(f"| {name} | " + " | ".join(cells) + " |")
            lines.append("")
    if summary["random_logit"]:
        lines += [f"### random logit (of {n} inputs)", "", "| explainer | " + " | ".join(summary["measures"]) + " |",
                  "|---" * (len(summary["measures"]) + 1) + "|"]  # fmt: skip
        for name, by_measure in summary["random_logit"].items():
            lines.append(f"| {name} | " + " | ".join(_fmt(by_measure[m], n) for m in summary["measures"])
                         + " |")  # fmt: skip
    if summary.get("efficient_mprt"):
        lines += ["", f"### efficient MPRT (of {n} inputs; higher is better)", "",
                  "| explainer | eMPRT | entropy, original | entropy, randomised |", "|---|---|---|---|"]  # fmt: skip
        lines += [f"| {name} | " + " | ".join(_fmt(entry[key], n) for key in EFFICIENT) + " |"
                  for name, entry in summary["efficient_mprt"].items()]  # fmt: skip
    return "\n".join(lines) + "\n"


def write_csvs(summary: dict, out_dir: Path) -> None:
    """``sanity.csv``: one row per mode × stage × explainer × measure; ``random_logit.csv``."""
    with atomic_open(out_dir / "sanity.csv", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["mode", "stage_index", "stage", "explainer", "measure", "mean", "ci95", "n"])
        for mode, by_explainer in summary["similarity"].items():
            for name, by_measure in by_explainer.items():
                for measure, entries in by_measure.items():
                    for s, e in enumerate(entries):
                        writer.writerow([mode, s, e["stage"], name, measure, e["mean"], e["ci95"], e["n"]])
    if summary["random_logit"]:
        with atomic_open(out_dir / "random_logit.csv", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["explainer", "measure", "mean", "ci95", "n"])
            for name, by_measure in summary["random_logit"].items():
                for measure, e in by_measure.items():
                    writer.writerow([name, measure, e["mean"], e["ci95"], e["n"]])
    if summary.get("efficient_mprt"):
        with atomic_open(out_dir / "efficient_mprt.csv", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["explainer", "number", "mean", "ci95", "n"])
            for name, entry in summary["efficient_mprt"].items():
                for key in EFFICIENT:
                    writer.writerow([name, key, entry[key]["mean"], entry[key]["ci95"], entry[key]["n"]])


def write_sanity_report(summary: dict, out_dir: Path) -> None:
    if "members" in summary:  # a population's report
        write_population_report(summary, out_dir)
        return
    figure = summary.pop("_figure")
    pngs = []
    for mode, by_explainer in summary["similarity"].items():
        stages = stage_labels(summary, mode)
        title = f"{mode} randomisation, {summary['n_inputs']} inputs"
        pngs.append(plot_similarity_curves(by_explainer, stages, out_dir / f"similarity_{mode}.png", title))
        if figure is not None:
            pngs.append(plot_stage_maps(figure["x"], figure["maps"][mode], stages, figure["normalization"],
                                        out_dir / f"maps_{mode}.png", f"{mode} randomisation"))  # fmt: skip
    write_json(out_dir / "sanity.json", summary)
    write_csvs(summary, out_dir)
    write_text(out_dir / "table.md", markdown_table(summary))
    columns = ["mode", "stage", "explainer", "measure", "mean", "ci95", "n"]
    rows = [[mode, e["stage"], name, measure, e["mean"], e["ci95"], e["n"]]
            for mode, by_explainer in summary["similarity"].items() for name, by_measure in by_explainer.items()
            for measure, entries in by_measure.items() for e in entries]  # fmt: skip
    tables = {"sanity": (columns, rows)}
    if summary["efficient_mprt"]:
        tables["efficient_mprt"] = (["explainer", "number", "mean", "ci95", "n"],
                                    [[name, key, e[key]["mean"], e[key]["ci95"], e[key]["n"]]
                                     for name, e in summary["efficient_mprt"].items() for key in EFFICIENT])
    keys = {"sanity": 4, "efficient_mprt": 2}  # the cells that name a row
    scalars = {k: v for name, (c, r) in tables.items() for k, v in table_scalars(name, c, r, keys[name]).items()}
    log_report(summary["config"]["log_to"], out_dir, "sanity", summary["config"], tables, {p.stem: p for p in pngs},
               scalars, summary["config"]["run"])  # fmt: skip
    print((out_dir / "table.md").read_text())


PROTOCOLS.add("sanity", evaluate_sanity,
              help="model-randomisation sanity check of explainers and the random-logit test (Adebayo et al.)",
              config=SanityConfig, write=write_sanity_report, report="sanity.json", resumable=True,
              source="run", choices={"explainers": (EXPLAINERS, {})})  # fmt: skip
