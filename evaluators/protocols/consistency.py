"""Ley et al.'s explanation-consistency protocol (§5, Table 1 and Figure 6).

From a population: for each number n of pre-trained models per ensemble, draw
``n_sets`` disjoint sets of n members; build one ensemble per set and strategy
(``single``: the set's first member; ``average``, ``majority``, ``perturb``,
``connect``, ``combine``: see ``lightning_modules.ensembles``); explain the first
``n_points`` test points with each method; score every pair of the ``n_sets``
ensembles of a strategy with SA@k, SSA@k, CDC@k (the paper's reading, over the
features in both top-k sets) and CDC@d (all features, Table 1's column). Per
individual the scores are averaged over pairs; the summary over individuals is mean ±
std and median with the central decile (45th-55th percentiles).

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

Explainers that draw random numbers (SmoothGrad's noise, from the global generator
as Captum's NoiseTunnel) start each explanation of set s's ensemble from a seed of
(seed, n, s) alone: an ensemble's explanations do not depend on which methods or
strategies ran before it, and the strategies' ensembles of one set see the same
noise, so strategies are compared on paired draws.

Given a run folder, each ensemble's test accuracy and explanations are kept in
``<run>/sets/n<n>/<strategy>/set-<s>.pt``. A run started again on that folder loads
the finished ensembles and computes only the missing ones, so it ends with the
numbers an uninterrupted run gives.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from rich.progress import Progress

from datamodules.errors import InputError
from datamodules.files import atomic_write
from evaluators.metrics.agreement_functional import ley_agreements
from evaluators.config import PopulationSource
from evaluators.maps import TABULAR_EXPLAINERS, explain
from evaluators.population_sets import disjoint_sets, member_pairs, split_per_set, train_curves
from lightning_modules.ensembles import ENSEMBLES

STRATEGIES = ["single", "average", "majority", "perturb", "connect", "combine"]
METRICS = ["sa", "ssa", "cdc_k", "cdc_d"]
CURVE_MODES = ["fixed", "trained"]
T_SAMPLINGS = ["uniform", "even"]


@dataclass
class ConsistencyConfig(PopulationSource):
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
    seed: int = 0
    output_dir: str = "runs/consistency"

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = [s for s in self.strategies if s not in STRATEGIES]
        if unknown:
            raise InputError(f"unknown strategy(ies) {unknown}; expected some of {STRATEGIES}")
        unknown = [m for m in self.methods if m not in TABULAR_EXPLAINERS]
        if unknown:
            raise InputError(f"unknown explainer(s) {unknown}; expected some of {sorted(TABULAR_EXPLAINERS)}")
        for option, allowed in (("curve_mode", CURVE_MODES), ("t_sampling", T_SAMPLINGS),
                                ("explain_output", [None, "logit", "probability"])):  # fmt: skip
            if getattr(self, option) not in allowed:
                raise InputError(f"option {option}={getattr(self, option)!r}; expected one of {allowed}")


def summarise(per_individual: torch.Tensor) -> dict[str, float]:
    values = per_individual.double().numpy()
    q45, median, q55 = np.quantile(values, [0.45, 0.5, 0.55])
    return {"mean": float(values.mean()), "std": float(values.std()), "median": float(median),
            "q45": float(q45), "q55": float(q55)}  # fmt: skip


def build_ensemble(strategy: str, s: int, members: list[int], population, curves, cfg: ConsistencyConfig):
    """Set s's ensemble of a strategy (built one at a time: a ``combine`` ensemble holds
    2,500-5,000 MLPs, and 50 of them at once outgrow a 24 GB machine)."""
    noise = {"n_perturb": cfg.n_perturb, "sigma": cfg.sigma, "layer": cfg.layer, "part": cfg.part}
    t_seed = cfg.seed + s if cfg.t_sampling == "uniform" else None
    if strategy == "single":
        return ENSEMBLES["average"](population, members[:1])
    if strategy in ("average", "majority"):
        return ENSEMBLES[strategy](population, members)
    if strategy == "perturb":
        return ENSEMBLES["perturb"](population, members, **noise, seed=cfg.seed + s)
    if strategy == "connect":
        return ENSEMBLES["connect"](curves[s], n_t=cfg.n_t, t_seed=t_seed)
    return ENSEMBLES["combine"](curves[s], n_t=cfg.n_t, **noise, seed=cfg.seed + s, t_seed=t_seed)


def explanation_seed(seed: int, n: int, s: int) -> int:
    """The global generator's seed for explaining set s's ensembles (every strategy's)."""
    return int(np.random.SeedSequence([seed, n, s]).generate_state(1)[0])


def ensemble_results(ensemble, x_test, y_test, background, cfg: ConsistencyConfig, seed: int) -> tuple[float, dict]:
    """An ensemble's test accuracy and its explanations of the first test points, per
    method, each method's random draws starting from ``seed``."""
    with torch.no_grad():
        accuracy = (ensemble.predict(x_test) == y_test).float().mean().item()
    points = {"deepshap": cfg.n_points_deepshap, "smoothgrad": cfg.n_points_smoothgrad}
    options = {"deepshap": {"baselines": background}, "smoothgrad": {"stdevs": cfg.smoothgrad_sigma}}
    explained = {}
    for method in cfg.methods:
        torch.manual_seed(seed)
        x = x_test[: points.get(method, cfg.n_points)]
        explained[method] = explain(ensemble, x, method, **options.get(method, {})).detach()
    return accuracy, explained


def set_file(run_dir: Path, n: int, strategy: str, s: int) -> Path:
    return run_dir / "sets" / f"n{n}" / strategy / f"set-{s:03d}.pt"


def save_set(path: Path, accuracy: float, explanations: dict[str, torch.Tensor]) -> None:
    """One ensemble's results, written atomically."""
    payload = {"accuracy": accuracy, "explanations": {m: e.cpu() for m, e in explanations.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: torch.save(payload, tmp))


def load_set(path: Path, methods: list[str], device: torch.device) -> tuple[float, dict[str, torch.Tensor]]:
    """A finished ensemble's results."""
    payload = torch.load(path, weights_only=True)
    if sorted(payload["explanations"]) != sorted(methods):
        raise InputError(f"{path}: holds explanations {sorted(payload['explanations'])}; this run's methods are "
                         f"{sorted(methods)}")  # fmt: skip
    return payload["accuracy"], {m: e.to(device) for m, e in payload["explanations"].items()}


def evaluate_consistency(cfg: ConsistencyConfig, run_dir: Path | None = None) -> dict:
    """The protocol's rows; with ``run_dir``, finished ensembles are kept there and taken
    from there (see the module's docstring)."""
    population, payload, data = cfg.load()
    if cfg.explain_output is not None:  # every ensemble and curve takes the output to explain from here
        population.hparams.explain_output = cfg.explain_output
    meta, device = payload["metadata"], population.device
    x_train, _ = data.train_tensors
    x_test, y_test = (t.to(device) for t in data.test_tensors)
    order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(cfg.seed))
    background = x_train[order[: cfg.n_background]].to(device)  # DeepSHAP's background sample

    def kept(n: int, strategy: str, s: int) -> bool:
        """Whether this ensemble's results are kept in the run folder from an earlier start."""
        return run_dir is not None and set_file(run_dir, n, strategy, s).exists()

    rows = []
    with Progress() as progress:  # a bar per strategy, over its sets: a combine pass takes minutes
        for n in cfg.n_models:
            sets = disjoint_sets(population.size, n, cfg.n_sets, cfg.seed)
            curves = []
            on_curves = [(st, s) for st in {"connect", "combine"} & set(cfg.strategies) for s in range(len(sets))]
            if not all(kept(n, st, s) for st, s in on_curves):
                set_pairs = [member_pairs(members) for members in sets]
                all_pairs = [pair for pairs in set_pairs for pair in pairs]
                trained = train_curves(population, all_pairs, data, meta["max_epochs"], cfg.curve_kind, cfg.curve_mode)
                curves = split_per_set(trained, set_pairs)
            for strategy in cfg.strategies:
                task = progress.add_task(f"n={n} {strategy}", total=len(sets))
                explanations: dict[str, list[torch.Tensor]] = {method: [] for method in cfg.methods}
                accuracies = []
                for s, members in enumerate(sets):
                    if kept(n, strategy, s):
                        accuracy, explained = load_set(set_file(run_dir, n, strategy, s), cfg.methods, device)
                    else:
                        ensemble = build_ensemble(strategy, s, members, population, curves, cfg)
                        seed = explanation_seed(cfg.seed, n, s)
                        accuracy, explained = ensemble_results(ensemble, x_test, y_test, background, cfg, seed)
                        del ensemble
                        if run_dir is not None:
                            save_set(set_file(run_dir, n, strategy, s), accuracy, explained)
                    accuracies.append(accuracy)
                    for method in cfg.methods:
                        explanations[method].append(explained[method])
                    progress.advance(task)
                accuracy = float(np.mean(accuracies))
                for method in cfg.methods:
                    scores = ley_agreements(torch.stack(explanations[method]), cfg.k)
                    for metric in METRICS:
                        per_individual = scores[metric].mean(0).cpu()  # over the pairs of ensembles
                        rows.append({"n_models": n, "strategy": strategy, "method": method, "metric": metric,
                                     "test_acc": accuracy, **summarise(per_individual)})  # fmt: skip
                    scored = " ".join(f"{r['metric']} {r['mean']:.3f}" for r in rows[-len(METRICS) :])
                    progress.console.print(f"n={n} {strategy:8s} {method:10s} {scored}  acc {accuracy:.4f}")
    return {"dataset": meta["dataset"]["dataset"], "config": asdict(cfg), "rows": rows}


def markdown_table(summary: dict) -> str:
    """Rows: strategies; columns: method x (SA@k, SSA@k, CDC@d), as mean ± std (Table 1's
    layout)."""
    rows = summary["rows"]
    n = max(r["n_models"] for r in rows)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    head = "| strategy | " + " | ".join(f"{m} SA | {m} SSA | {m} CDC@d" for m in methods) + " | test acc |"
    lines = [f"{summary['dataset']}, ensembles of {n} pre-trained models", "", head,
             "|" + "---|" * (3 * len(methods) + 2)]  # fmt: skip
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        cells, acc = [], ""
        for method in methods:
            for metric in ("sa", "ssa", "cdc_d"):
                key = (n, strategy, method, metric)
                (r,) = [r for r in rows if (r["n_models"], r["strategy"], r["method"], r["metric"]) == key]
                cells.append(f"{r['mean']:.2f} ± {r['std']:.2f}")
                acc = f"{100 * r['test_acc']:.1f} %"
        lines.append(f"| {strategy} | " + " | ".join(cells) + f" | {acc} |")
    return "\n".join(lines) + "\n"


def write_consistency_report(summary: dict, out_dir: Path) -> None:
    (out_dir / "consistency.json").write_text(json.dumps(summary, indent=2))
    keys = ["n_models", "strategy", "method", "metric", "mean", "std", "median", "q45", "q55", "test_acc"]
    lines = [",".join(keys)] + [",".join(str(r[k]) for k in keys) for r in summary["rows"]]
    (out_dir / "consistency.csv").write_text("\n".join(lines) + "\n")
    (out_dir / "table1.md").write_text(markdown_table(summary))
    plot_agreement(summary, out_dir)


def plot_agreement(summary: dict, out_dir: Path) -> Path:
    """Figure 6 (``agreement_vs_models.png``: SA@k against n, a line per strategy) when
    the run has several n; with one n, ``agreement_by_strategy.png``: SA@k, SSA@k and
    CDC@d per strategy (mean ± std over individuals), strategies on the x axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fig.tight_layout()
    path = out_dir / ("agreement_vs_models.png" if several_n else "agreement_by_strategy.png")
    fig.savefig(path)
    plt.close(fig)
    return path
