"""Ley et al.'s explanation-consistency protocol (§5, Table 1 and Figure 6).

From a population: for each number n of pre-trained models per ensemble, draw
``n_sets`` disjoint sets of n members; build one ensemble per set and strategy
(``single``: the set's first member; ``average``, ``majority``, ``perturb``,
``connect``, ``combine``: see ``lightning_modules.ensembles``); explain the first
``n_points`` test points with each method; score every pair of the ``n_sets``
ensembles of a strategy with SA@k, SSA@k, CDC@k (the paper's reading, over the
features in both top-k sets) and CDC@d (all features, Table 1's column), and Watson et
al.'s C (``watson_c``: per pair of ensembles 1 − S(a, b), S from a logistic regression telling
their explanations apart; its mean over pairs is C), and those of ``rank_agreements`` named:
Krishna et al.'s rank correlation ``rc`` and pairwise rank agreement ``pra`` over all features
(``agreement_functional.RANK_AGREEMENTS``; none by default). Per individual the scores are averaged
over pairs (where defined: RC is undefined for a constant map); the summary over individuals
(over pairs, for C) is mean ± std and median with the central decile (45th-55th percentiles),
and the number of individuals without a defined score where there are any (``undefined``).

Curves (``connect``, ``combine``) join the set's n/2 pairs of members. By default
(``curve_mode: fixed``) their end points are the two trained members and the bend is
trained (Garipov et al.'s code, which the paper's Appendix C says it used); ``trained``
trains them from scratch as the main text describes (the start point from member a's
seed, the end point from member b's, the members' own hyperparameters, the loss at a
uniformly drawn t per batch). The paper reports such start points landing near the
members (Figure 9); here they do on Default Credit but not on German Credit, and on
GMSC fixed end points reproduce the paper's connect cells while trained ones fall 0.05
(SA) and 0.24 (SSA) short (docs/table1.md). The ``n_t`` models taken from
each curve sit at t drawn from U(0, 1) with the seed ``seed + set`` (``t_sampling:
uniform``, the paper's "uniformly sampling models along each mode connecting path")
or evenly spaced on [0, 1] (``even``); on GMSC the two agree within 0.01.

Explainers that draw random numbers (SmoothGrad's noise, Expected Gradients' references)
explain set s's ensembles with a seed of (seed, n, s) alone (``evaluators.maps.explain``'s
``seed``; images: each image's draws from that seed and its index): an ensemble's
explanations do not depend on which methods or strategies ran before it, and the
strategies' ensembles of one set see the same noise, so strategies are compared on
paired draws.

A table's population of a user's networks (a ``ModulePopulation`` of ``inputs="rows"``) goes
the tabular way, its ensembles over its networks (``ImageNetworks``), its curves one pair after
another (``population_sets.CURVE_TRAINERS``, by the population's ``CURVES``; docs/your_model.md).
An image population (a folder of image runs or an ``ImagePopulation`` file; see
``population_task``) goes through the same loop: ensembles from the same registry, test
images explained for their labels, maps reduced per pixel and flattened, SA/SSA/CDC over
the top-k pixels plus the angular difference and Watson et al.'s C
(docs/image_consistency.md).

Given a run folder, each ensemble's test accuracy and explanations are kept in
``<run>/sets/n<n>/<strategy>/set-<s>.pt``. A run started again on that folder loads
the finished ensembles and computes only the missing ones, so it ends with the
numbers an uninterrupted run gives. Each file records its methods' definitions
(``evaluators.maps.registry.outdated``): maps kept under another definition than today's (a
file written before issue 42 holds SmoothGrad's of one draw per call) are computed again,
with a warning naming the file, and the file rewritten; the others are read. An ensemble
whose maps hold NaN or ±inf (a member that outputs NaN) ends the run with one line naming
the population member whose own maps are not finite (else the ensemble), the explainer and
the input (``check_set_maps``), before its file is kept; a kept file with such maps is
refused naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from rich.progress import Progress

from evaluators.inputs.config import PopulationSource
from evaluators.inputs.counts import counted, default_of
from evaluators.protocols.registry import PROTOCOLS, TABLE_DEFAULT
from foundation.finite import check_finite
from evaluators.maps import EXPLAINERS, explain
from evaluators.maps.registry import definitions, outdated
from evaluators.maps.stacked_deepshap import SOFTMAX_RULES
from evaluators.reports.wandb_log import ReportLogging, log_report, table_scalars
from evaluators.metrics.agreement_functional import (
    RANK_AGREEMENTS, angular_difference, ley_agreements, pair_separations,
)  # fmt: skip
from evaluators.protocols.population_sets import (
    CURVE_TRAINERS, disjoint_sets, member_pairs, split_per_set,
)  # fmt: skip
from foundation.batching import rows_within
from foundation.errors import InputError
from foundation.modality import IMAGES, REDUCTIONS, ROWS, Modality, modality_of
from foundation.files import atomic_write, pyplot, save_figure, write_json, write_text
from lightning_modules.ensembles import ENSEMBLES, build_ensemble
from lightning_modules.interface import default_targets

STRATEGIES = ["single", *ENSEMBLES.names()]  # one member, or an ensemble of the registry (Ley et al.'s five)
TABLE_AGREEMENTS = ["sa", "ssa", "cdc_k", "cdc_d"]  # Ley et al.'s Table 1 agreements, kept per pair of ensembles
MODEL_ROWS = 4096  # the most images x ensemble members one forward pass of an image ensemble sees
MODEL_PIXELS = MODEL_ROWS * 32 * 32  # and the most input pixels they hold (83 images at 224 x 224)
POINTS = {"deepshap": "n_points_deepshap", "smoothgrad": "n_points_smoothgrad"}  # a method's own count; others n_points
TARGET_ROWS = 256  # test rows per pass of the whole population when its predicted classes are taken
CURVE_MODES = ["fixed", "trained"]
T_SAMPLINGS = ["uniform", "even"]


@dataclass
class ConsistencyConfig(ReportLogging, PopulationSource):
    """Options of the protocol (configs/consistency/<dataset>.yaml)."""

    strategies: list[str] = field(default_factory=lambda: list(STRATEGIES))
    methods: list[str] = field(default_factory=lambda: ["saliency"])
    n_models: list[int] = field(default_factory=lambda: [4])
    n_sets: int = 50
    n_points: int = 1000
    n_points_smoothgrad: int = 1000
    n_points_deepshap: int = 100
    n_background: int = 100
    smoothgrad_sigma: float = 0.1  # std of SmoothGrad's input noise (Ley et al.: 0.1 on standardised features)
    smoothgrad_samples: int = 50  # noisy copies per SmoothGrad explanation (Ley et al.: 50)
    k: int = 5
    n_t: int = 25
    n_perturb: int = 50
    sigma: float = 0.2
    layer: int = 0
    part: str = "weight"
    curve_kind: str = "bezier"
    curve_mode: str = "fixed"
    t_sampling: str = "uniform"
    explain_output: str | None = None  # logit | probability; None: the population's own (logit by default)
    # DeepSHAP of the probability: "gradient" (Captum through the softmax) or "rescale" (the softmax
    # taken element-wise by the rescale rule, as shap's DeepExplainer does: Ley et al.'s reference pipeline)
    deepshap_softmax_rule: str = "gradient"
    curve_epochs: int | None = None  # epochs of curve training; None: the members' own
    map_reduction: str = "sum"  # images: how (C, H, W) maps become per-pixel maps (Modality.reduce)
    # Watson et al.'s C: one logistic regression per pair of sets, n_sets(n_sets - 1)/2 per strategy and method
    watson_c: bool = True
    rank_agreements: list[str] = field(default_factory=list)  # Krishna et al.'s rc and pra, over all features
    n_accuracy_images: int = 2000  # images: test images an ensemble's accuracy is measured on
    seed: int = 0
    output_dir: str = "runs/consistency"

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = [s for s in self.strategies if s not in STRATEGIES]
        if unknown:
            raise InputError(f"unknown strategy(ies) {unknown}; expected some of {STRATEGIES}")
        registry = EXPLAINERS.names(modality=self.modality.name)
        unknown = [m for m in self.methods if m not in registry]
        if unknown:
            raise InputError(f"unknown explainer(s) {unknown}; expected some of {sorted(registry)}")
        unknown = [m for m in self.rank_agreements if m not in RANK_AGREEMENTS]
        if unknown:
            raise InputError(f"option rank_agreements: unknown metric(s) {unknown}; expected some of "
                             f"{list(RANK_AGREEMENTS)}")  # fmt: skip
        if self.n_sets < 2:
            raise InputError(f"option n_sets={self.n_sets}: agreement is scored between pairs of disjoint sets; "
                             "expected at least 2")  # fmt: skip
        if self.modality is not ROWS and self.curve_mode != "fixed":
            raise InputError(f"option curve_mode={self.curve_mode!r}; image populations take 'fixed' (curves "
                             "between the trained members)")  # fmt: skip
        for option, allowed in (("curve_mode", CURVE_MODES), ("t_sampling", T_SAMPLINGS),
                                ("explain_output", [None, "logit", "probability"]),
                                ("deepshap_softmax_rule", list(SOFTMAX_RULES)),
                                ("map_reduction", list(REDUCTIONS))):  # fmt: skip
            if getattr(self, option) not in allowed:
                raise InputError(f"option {option}={getattr(self, option)!r}; expected one of {allowed}")
        if self.deepshap_softmax_rule == "rescale" and self.explain_output != "probability":
            raise InputError(f"option deepshap_softmax_rule='rescale' with explain_output={self.explain_output!r}; "
                             "the rule explains the probability: set explain_output=probability")  # fmt: skip


SUMMARY_KEYS = ("mean", "std", "median", "q45", "q55")
UNDEFINED_EVERYWHERE = "no individual has a defined score (e.g. a rank correlation of constant maps)"  # JSON's reason


def summarise(per_individual: torch.Tensor) -> dict[str, float]:
    """Mean, std, median and 45th/55th percentiles of the defined values; ``undefined``:
    how many values are NaN, where any are."""
    values = per_individual.double().numpy()
    defined = values[~np.isnan(values)]
    undefined = {"undefined": len(values) - len(defined)} if len(defined) < len(values) else {}
    if not len(defined):
        return dict.fromkeys(SUMMARY_KEYS, float("nan")) | undefined
    q45, median, q55 = np.quantile(defined, [0.45, 0.5, 0.55])
    return {"mean": float(defined.mean()), "std": float(defined.std()), "median": float(median),
            "q45": float(q45), "q55": float(q55)} | undefined  # fmt: skip


def set_ensemble(strategy: str, s: int, members: list[int], population, curves, cfg: ConsistencyConfig,
                 loader=None):  # fmt: skip
    """Set s's ensemble of a strategy (``lightning_modules.ensembles.build_ensemble``; built one
    at a time: a ``combine`` ensemble holds 2,500-5,000 MLPs, and 50 of them at once outgrow a
    24 GB machine). ``single``: the set's first member. ``loader``: the training batches over which
    a network on a curve recomputes its BatchNorm statistics (None: the population's default)."""
    if strategy == "single":
        return build_ensemble(population, "average", members[:1])
    noise = {"n_perturb": cfg.n_perturb, "sigma": cfg.sigma, "layer": cfg.layer, "part": cfg.part, "seed": cfg.seed + s}
    along = {"n_t": cfg.n_t, "t_seed": cfg.seed + s if cfg.t_sampling == "uniform" else None, "loader": loader}
    if strategy in ("average", "majority", "perturb"):
        return build_ensemble(population, strategy, members, **(noise if strategy == "perturb" else {}))
    return build_ensemble(population, strategy, members, curves[s], **along, **(noise if strategy == "combine" else {}))


def explanation_seed(seed: int, n: int, s: int) -> int:
    """The explainers' seed for set s's ensembles (every strategy's)."""
    return int(np.random.SeedSequence([seed, n, s]).generate_state(1)[0])


def set_file(run_dir: Path, n: int, strategy: str, s: int) -> Path:
    return run_dir / "sets" / f"n{n}" / strategy / f"set-{s:03d}.pt"


def save_set(path: Path, accuracy: float, explanations: dict[str, torch.Tensor]) -> None:
    """One ensemble's results, written atomically with each method's definition (``definitions``)."""
    payload = {"accuracy": accuracy, "explanations": {m: e.cpu() for m, e in explanations.items()},
               "definitions": definitions(explanations)}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: torch.save(payload, tmp))


def load_set(path: Path, methods: list[str], device: torch.device) -> tuple[float, dict[str, torch.Tensor]]:
    """A finished ensemble's results (explanations with NaN or ±inf refused, naming the file),
    less the maps kept under another definition of their method than today's (``outdated``:
    one warning naming the file; a file of before issue 42 holds SmoothGrad's of one draw per
    call), which the caller computes again."""
    payload = torch.load(path, weights_only=True)
    if sorted(payload["explanations"]) != sorted(methods):
        raise InputError(f"{path}: holds explanations {sorted(payload['explanations'])}; this run's methods are "
                         f"{sorted(methods)}")  # fmt: skip
    for method, maps in payload["explanations"].items():
        check_finite(maps, f"{path}: explainer {method!r}", "map")
    old = outdated(payload.get("definitions"), methods, str(path))
    return payload["accuracy"], {m: e.to(device) for m, e in payload["explanations"].items() if m not in old}


def check_set_maps(maps: torch.Tensor, method: str, ensemble: str, members: list[int],
                   member_maps: Callable[[int], torch.Tensor]) -> None:  # fmt: skip
    """InputError unless the maps (N, ...) that ``method`` gave of an ensemble of the population's
    ``members`` are finite: the error names the first member whose own maps (``member_maps(m)``,
    computed on this error path only) are not, else the ensemble (``ensemble``: which one)."""
    if bool(torch.isfinite(maps.sum())):
        return
    for member in members:
        check_finite(member_maps(member), f"population member {member}: explainer {method!r}", "map")
    check_finite(maps, f"{ensemble} (population members {members}): explainer {method!r}", "map")


class Task(NamedTuple):
    """What the protocol's loop needs of a population: its size, the curves between
    pairs of its members, one ensemble's (accuracy, explanations per method) and the
    scores of S ensembles' explanations (metric -> values to summarise)."""

    size: int
    device: torch.device
    curves: Callable[[list[tuple[int, int]]], list]
    results: Callable[[str, int, list[int], list, int, list[str]], tuple[float, dict]]
    scores: Callable[[torch.Tensor], dict[str, torch.Tensor]]


def split_size(cfg: ConsistencyConfig, option: str, available: int, split: str, modality: Modality) -> int:
    """How many of a split's ``available`` inputs ``option`` takes (``evaluators.inputs.counts``)."""
    return counted(option, getattr(cfg, option), available, split, modality.noun, default_of(ConsistencyConfig, option))


def explained_points(cfg: ConsistencyConfig, method: str, available: int, modality: Modality) -> int:
    """How many of the ``available`` test inputs ``method`` explains: its own count (``POINTS``)
    or ``n_points`` of a table's whole test split; of ``n_points`` inputs probed through the
    split (images, already counted), all of them, or its own count where one other than the
    default is set."""
    option = POINTS.get(method, "n_points")
    if modality.whole_splits:
        return split_size(cfg, option, available, "test split", modality)
    if option == "n_points" or getattr(cfg, option) == default_of(ConsistencyConfig, option):
        return available
    return split_size(cfg, option, available, "n_points selection", modality)


def deepshap_background(x_train: torch.Tensor, cfg: ConsistencyConfig) -> torch.Tensor:
    """DeepSHAP's background sample: ``n_background`` training rows drawn with ``seed``."""
    order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(cfg.seed))
    return x_train[order[: cfg.n_background]]


def image_rows_per_pass(x: torch.Tensor, ensemble_size: int) -> int:
    """Images per pass of an image ensemble, all its members' rows together at most
    ``MODEL_ROWS`` and ``MODEL_PIXELS`` input pixels (the members run one after another in
    the forward pass, and the backward pass keeps every member's activations)."""
    return max(1, rows_within(x, MODEL_ROWS, MODEL_PIXELS) // ensemble_size)


def population_task(cfg: ConsistencyConfig, population, meta: dict, data) -> Task:
    """The protocol's inputs and scores for a population of either modality (``modality_of``).

    Tabular (Ley et al.'s Table 1): the first ``n_points`` test rows, each explained for the
    positive class of a binary table; of a multi-class table for the class the whole population
    predicts for it (the argmax of its members' mean probability: ``interface.default_targets``),
    one class per row for every ensemble compared (docs/tabular_population.md: why); test
    accuracy on the whole test split; DeepSHAP's background ``n_background`` training rows
    drawn with ``seed``; SA/SSA/CDC over the top-k features and (``watson_c``) per pair of
    ensembles Watson et al.'s 1 - S(a, b) of their explanations; a network with BatchNorm on a
    curve takes its statistics at t from one pass over the training rows, in order.
    Images: ``n_points`` test images spread through the test split, each explained for its
    label; maps reduced per pixel (``map_reduction``) and flattened to (N, H·W); test accuracy
    on ``n_accuracy_images`` spread test images; Gradient SHAP's references ``n_background``
    training images spread through the split; scores: SA/SSA/CDC over the top-k pixels, the
    angular difference per image (both averaged over pairs of ensembles) and per pair of
    ensembles Watson et al.'s 1 - S(a, b) (its mean over pairs is their C)."""
    modality = modality_of(population)
    device, epochs = population.device, cfg.curve_epochs or meta["max_epochs"]
    options = {"smoothgrad": {"stdevs": cfg.smoothgrad_sigma, "nt_samples": cfg.smoothgrad_samples}}
    if not modality.whole_splits:  # images: probes spread through the splits
        curve_loader = None  # the population's own (``ImageMembers``: the training images, not augmented)
        x_test, y_test = (t.to(device) for t in data.probe(cfg.n_points, "test"))
        x_acc, y_acc = (t.to(device) for t in data.probe(cfg.n_accuracy_images, "test"))
        split_size(cfg, "n_points", len(x_test), "test split", modality)
        split_size(cfg, "n_accuracy_images", len(x_acc), "test split", modality)
        if "gradient_shap" in cfg.methods:
            references = data.probe(cfg.n_background, "train")[0]
            split_size(cfg, "n_background", len(references), "training split", modality)
            options["gradient_shap"] = {"baselines": references.to(device)}
    else:
        if cfg.explain_output is not None:  # every ensemble and curve takes the output to explain from here
            population.hparams.explain_output = cfg.explain_output
        x_test, y_test = (t.to(device) for t in data.test_tensors)
        curve_loader = data.tensor_loader(*data.train_tensors, train=False)  # BatchNorm on curves: the training rows
        if "deepshap" in cfg.methods:
            split_size(cfg, "n_background", len(data.train_tensors[0]), "training split", modality)
            background = deepshap_background(data.train_tensors[0], cfg).to(device)
            options["deepshap"] = {"baselines": background, "softmax_rule": cfg.deepshap_softmax_rule}
    points = {method: explained_points(cfg, method, len(x_test), modality) for method in cfg.methods}
    if modality.fixed_class:
        targets = default_targets(population, x_test[: max(points.values(), default=0)], rows=TARGET_ROWS)

    def curves(pairs):
        if epochs is None:  # e.g. a population assembled from a data config without trainer.max_epochs
            raise InputError("option curve_epochs: the population names no max_epochs to train its curves for; "
                             "expected curve_epochs (an integer)")  # fmt: skip
        return CURVE_TRAINERS[population.CURVES](population, pairs, data, epochs, cfg.curve_kind, cfg.curve_mode)

    def results(strategy, s, members, set_curves, seed, methods):
        ensemble = set_ensemble(strategy, s, members, population, set_curves, cfg, curve_loader)
        if not modality.whole_splits:
            rows = image_rows_per_pass(x_test, ensemble.size)
            accuracy = torch.cat([ensemble.predict(x) for x in x_acc.split(rows)]).eq(y_acc).double().mean().item()
        else:
            with torch.no_grad():
                accuracy = (ensemble.predict(x_test) == y_test).float().mean().item()
        explained = {}
        for method in methods:
            n = points[method]
            per_image = {"target": targets[:n]} if modality.fixed_class else {"target": y_test[:n], "max_batch": rows}

            def maps_of(model):
                return explain(model, x_test[:n], method, seed=seed, **per_image, **options.get(method, {})).detach()

            explained[method] = maps_of(ensemble)
            check_set_maps(explained[method], method, f"{strategy} ensemble of set {s}", members,
                           lambda m: maps_of(build_ensemble(population, "average", [m])))  # fmt: skip
        return accuracy, explained

    def scores(maps):
        e = modality.reduce(maps.flatten(0, 1), cfg.map_reduction).flatten(1).unflatten(0, maps.shape[:2])
        agreements = ley_agreements(e, cfg.k)
        values = {metric: agreements[metric].mean(0).cpu() for metric in TABLE_AGREEMENTS}  # over pairs of ensembles
        if modality is IMAGES:  # the image protocol's own score
            values["angular"] = angular_difference(e).mean(0).cpu()
        for name in cfg.rank_agreements:
            values[name] = RANK_AGREEMENTS[name](e).nanmean(0).cpu()  # NaN where no pair is defined
        if cfg.watson_c:
            values["watson_c"] = 1 - torch.tensor(pair_separations(e, cfg.seed), dtype=torch.float64)
        return values

    return Task(population.size, device, curves, results, scores)


def evaluate_consistency(cfg: ConsistencyConfig, run_dir: Path | None = None) -> dict:
    """The protocol's rows; with ``run_dir``, finished ensembles are kept there and taken
    from there (see the module's docstring)."""
    population, payload, data = cfg.load()
    meta = payload["metadata"]
    task = population_task(cfg, population, meta, data)

    stored: dict[Path, tuple[float | None, dict[str, torch.Tensor]]] = {}

    def kept(n: int, strategy: str, s: int) -> tuple[float | None, dict[str, torch.Tensor]]:
        """This ensemble's results kept in the run folder from an earlier start, the maps of today's
        definitions only (``load_set``; each file read once); (None, {}) where none are kept."""
        path = set_file(run_dir, n, strategy, s) if run_dir is not None else None
        if path is None or not path.exists():
            return None, {}
        if path not in stored:
            stored[path] = load_set(path, cfg.methods, task.device)
        return stored[path]

    def complete(accuracy, explained) -> bool:  # a kept set that needs nothing computed again
        return accuracy is not None and len(explained) == len(cfg.methods)

    rows = []
    with Progress() as progress:  # a bar per strategy, over its sets: a combine pass takes minutes
        for n in cfg.n_models:
            sets = disjoint_sets(task.size, n, cfg.n_sets, cfg.seed)
            curves = []
            on_curves = [(st, s) for st in {"connect", "combine"} & set(cfg.strategies) for s in range(len(sets))]
            if not all(complete(*kept(n, st, s)) for st, s in on_curves):
                set_pairs = [member_pairs(members) for members in sets]
                all_pairs = [pair for pairs in set_pairs for pair in pairs]
                curves = split_per_set(task.curves(all_pairs), set_pairs)
            for strategy in cfg.strategies:
                bar = progress.add_task(f"n={n} {strategy}", total=len(sets))
                explanations: dict[str, list[torch.Tensor]] = {method: [] for method in cfg.methods}
                accuracies = []
                for s, members in enumerate(sets):
                    accuracy, explained = kept(n, strategy, s)
                    missing = [method for method in cfg.methods if method not in explained]
                    if missing or accuracy is None:
                        seed = explanation_seed(cfg.seed, n, s)
                        computed, fresh = task.results(strategy, s, members, curves, seed, missing)
                        accuracy = computed if accuracy is None else accuracy
                        explained = {method: {**explained, **fresh}[method] for method in cfg.methods}
                        if run_dir is not None:
                            save_set(set_file(run_dir, n, strategy, s), accuracy, explained)
                    accuracies.append(accuracy)
                    for method in cfg.methods:
                        explanations[method].append(explained[method])
                    progress.advance(bar)
                accuracy = float(np.mean(accuracies))
                for method in cfg.methods:
                    scores = task.scores(torch.stack(explanations[method]))
                    for metric, values in scores.items():
                        rows.append({"n_models": n, "strategy": strategy, "method": method, "metric": metric,
                                     "test_acc": accuracy, **summarise(values)})  # fmt: skip
                    scored = " ".join(f"{r['metric']} {r['mean']:.3f}" for r in rows[-len(scores) :])
                    progress.console.print(f"n={n} {strategy:8s} {method:10s} {scored}  acc {accuracy:.4f}")
    return {"dataset": meta["dataset"]["dataset"], "config": asdict(cfg), "rows": rows}


TABLE_COLUMNS = {"sa": "SA", "ssa": "SSA", "cdc_d": "CDC@d", "rc": "RC", "pra": "PRA", "angular": "angle",
                 "watson_c": "Watson C"}


def markdown_table(summary: dict) -> str:
    """Rows: strategies; columns: method x (SA@k, SSA@k, CDC@d; RC and PRA where asked; for
    images also the angular difference; Watson's C where computed), as mean ± std (Table 1's layout)."""
    rows = summary["rows"]
    n = max(r["n_models"] for r in rows)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    present = {r["metric"] for r in rows}
    columns = {m: label for m, label in TABLE_COLUMNS.items() if m in present}
    head = "| strategy | " + " | ".join(f"{m} {label}" for m in methods for label in columns.values()) + " | test acc |"
    lines = [f"{summary['dataset']}, ensembles of {n} pre-trained models", "", head,
             "|" + "---|" * (len(columns) * len(methods) + 2)]  # fmt: skip
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        cells, acc = [], ""
        for method in methods:
            for metric in columns:
                key = (n, strategy, method, metric)
                (r,) = [r for r in rows if (r["n_models"], r["strategy"], r["method"], r["metric"]) == key]
                cells.append(f"{r['mean']:.2f} ± {r['std']:.2f}")
                acc = f"{100 * r['test_acc']:.1f} %"
        lines.append(f"| {strategy} | " + " | ".join(cells) + f" | {acc} |")
    return "\n".join(lines) + "\n"


def write_consistency_report(summary: dict, out_dir: Path) -> None:
    """``consistency.json``, ``consistency.csv``, ``table1.md``, the figure and the W&B run: the
    table and each cell's numbers as scalars ``table1/<n>/<strategy>/<method>/<metric>/<mean|std|...>``."""
    write_json(out_dir / "consistency.json", summary, reasons=dict.fromkeys(SUMMARY_KEYS, UNDEFINED_EVERYWHERE))
    keys = ["n_models", "strategy", "method", "metric", "mean", "std", "median", "q45", "q55", "test_acc"]
    table = [[r[k] for k in keys] for r in summary["rows"]]
    write_text(out_dir / "consistency.csv", "\n".join(",".join(map(str, row)) for row in [keys, *table]) + "\n")
    write_text(out_dir / "table1.md", markdown_table(summary))
    png = plot_agreement(summary, out_dir)
    config = summary["config"]
    log_report(config["log_to"], out_dir, "consistency", config, {"table1": (keys, table)},
               {png.stem: png}, table_scalars("table1", keys, table, 4), config["population"])


def plot_agreement(summary: dict, out_dir: Path) -> Path:
    """Figure 6 (``agreement_vs_models.png``: SA@k against n, a line per strategy) when
    the run has several n; with one n, ``agreement_by_strategy.png``: SA@k, SSA@k and
    CDC@d per strategy (mean ± std over individuals), strategies on the x axis."""
    plt = pyplot()

    rows, k = summary["rows"], summary["config"]["k"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    several_n = len({r["n_models"] for r in rows}) > 1
    fig, axes = plt.subplots(1, len(methods), figsize=(5.5 * len(methods), 4), dpi=110, squeeze=False)
    for ax, method in zip(axes[0], methods):
        if several_n:
            for strategy in strategies:
                pts = [r for r in rows if (r["strategy"], r["method"], r["metric"]) == (strategy, method, "sa")]
                ax.errorbar([r["n_models"] for r in pts], [r["mean"] for r in pts], yerr=[r["std"] for r in pts],
                            marker="o", capsize=3, label=strategy)  # fmt: skip
            ax.set(xlabel="pre-trained models per ensemble", ylabel=f"SA@{k}")
        else:
            labels = {"sa": f"SA@{k}", "ssa": f"SSA@{k}", "cdc_d": "CDC@d"}
            for offset, (metric, label) in zip((-0.2, 0.0, 0.2), labels.items()):
                pts = [next(r for r in rows if (r["strategy"], r["method"], r["metric"]) == (s, method, metric))
                       for s in strategies]  # fmt: skip
                ax.errorbar(np.arange(len(strategies)) + offset, [r["mean"] for r in pts],
                            yerr=[r["std"] for r in pts], fmt="o", capsize=3, label=label)  # fmt: skip
            ax.set_xticks(range(len(strategies)), strategies)
            ax.set(xlabel=f"strategy ({rows[0]['n_models']} pre-trained models per ensemble)", ylabel="agreement",
                   ylim=(-0.05, 1.05))  # fmt: skip
        ax.set_title(method)
        ax.legend()
    fig.suptitle(f"{summary['dataset']}: agreement of ensembles" + (" (Figure 6)" if several_n else ""))
    path = out_dir / ("agreement_vs_models.png" if several_n else "agreement_by_strategy.png")
    save_figure(fig, path)
    return path


PROTOCOLS.add("consistency", evaluate_consistency, help="Ley et al.'s consistency protocol (Table 1, Figure 6)",
              config=ConsistencyConfig, write=write_consistency_report, report="consistency.json", has_sets=True,
              resumable=True, default_configs={"tabular population": TABLE_DEFAULT,
                                               "tabular network population": TABLE_DEFAULT},
              choices={"methods": (EXPLAINERS, {})})  # fmt: skip
