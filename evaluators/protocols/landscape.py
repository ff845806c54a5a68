"""Ensembles over the loss landscape on one dataset (Ley et al., §5 and Appendix C).

From a trained population: draw disjoint sets of n pre-trained members; for each
set, join its n/2 pairs with curves trained in mode ``trained`` (end points from the
members' seeds and hyperparameters, loss along the curve); build every ensemble type
(``single``, ``average``, ``majority``, ``perturb``, ``connect``, ``combine``) and
score its test accuracy. Also the weight-space diagnostics of Figure 9: ℓ2 distances
between curve start points, between pre-trained models, and between each start point
and the model trained alone from the same seed; and loss / accuracy along each curve
against the straight line between its end points. Beside them, a yardstick the paper
does not plot: the distance from each model to its own rerun from the same seed with
every initial parameter nudged by N(0, ``nudge``²).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from evaluators.inputs.config import PopulationSource, stacked_mlps_only
from evaluators.protocols.population_sets import disjoint_sets, member_pairs, quiet_trainer, split_per_set, train_curves
from evaluators.protocols.registry import PROTOCOLS
from evaluators.reports.wandb_log import ReportLogging, log_report, table_scalars
from foundation.files import pyplot, save_figure, write_json, write_text
from lightning_modules.curves import MLPCurve
from lightning_modules.ensembles import MLPEnsemble, build_ensemble
from lightning_modules.population import PopulationMLP


@dataclass
class LandscapeConfig(ReportLogging, PopulationSource):
    """Options of the landscape evaluator (configs/landscape/<dataset>.yaml)."""

    KINDS, WHY_KINDS = stacked_mlps_only("retrains members and curve end points from their seeds as")

    n_models: int = 4
    n_sets: int = 5
    set_seed: int = 0
    curve_kind: str = "bezier"
    curve_mode: str = "fixed"  # curves of the connect/combine ensembles: fixed (Garipov) or trained (Ley)
    n_t: int = 25
    n_perturb: int = 50
    sigma: float = 0.2
    layer: int = 0
    part: str = "weight"
    ts_diagnostics: list[float] = field(default_factory=lambda: [i / 10 for i in range(11)])
    nudge: float = 1e-7  # std of the noise on the initial parameters of the nudged reruns
    output_dir: str = "runs/landscape"


def vector(params) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


def nudged_reruns(population, members: list[int], data, epochs: int, nudge: float) -> dict[int, torch.Tensor]:
    """Each member trained again from its own seed, with its hyperparameters and data
    order, after adding N(0, nudge²) noise (generator seed 0) to every initial parameter;
    member -> the rerun's parameter vector. With ``nudge = 0`` a rerun is its member."""
    rerun = PopulationMLP(**population.init_kwargs(), seeds=[population.seeds[i] for i in members])
    noise = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in rerun.parameters():
            param.add_(nudge * torch.randn(param.shape, generator=noise))
    quiet_trainer(epochs, population.device).fit(rerun, datamodule=data)
    return {i: vector(rerun.member(j).net.parameters()) for j, i in enumerate(members)}


@torch.no_grad()
def accuracy(model: MLPEnsemble, x: torch.Tensor, y: torch.Tensor) -> float:
    return (model.predict(x) == y).float().mean().item()


@torch.no_grad()
def loss_and_accuracy(ensemble: MLPEnsemble, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per stacked model: cross-entropy and accuracy, each of shape (M,)."""
    logits = ensemble.member_logits(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.repeat(len(logits)), reduction="none").view(len(logits), -1)
    return loss.mean(1), (logits.argmax(-1) == y).float().mean(1)


def straight_line(curve: MLPCurve, ts: torch.Tensor) -> MLPEnsemble:
    """Models (1 - t) φ(0) + t φ(1) on the chord between the curve's end points."""
    (w0, b0), (w1, b1) = curve.stacked_at(torch.zeros(1)), curve.stacked_at(torch.ones(1))
    t = ts.view(-1, 1, 1).to(w0[0].device)
    return MLPEnsemble([(1 - t) * a + t * b for a, b in zip(w0, w1)], [(1 - t) * a + t * b for a, b in zip(b0, b1)])


def evaluate_landscape(cfg: LandscapeConfig) -> dict:
    population, payload, data = cfg.load()
    meta = payload["metadata"]
    x_train, y_train = (t.to(population.device) for t in data.train_tensors)
    x_test, y_test = (t.to(population.device) for t in data.test_tensors)
    sets = disjoint_sets(population.size, cfg.n_models, cfg.n_sets, cfg.set_seed)
    ts = torch.tensor(cfg.ts_diagnostics)
    accuracies = {k: [] for k in ["single", "average", "majority", "perturb", "connect", "combine"]}
    distances = {"start_to_own_model": [], "start_to_start": [], "model_to_model": [], "model_to_nudged_rerun": []}
    along = {"curve_train_loss": [], "line_train_loss": [], "curve_test_acc": [], "line_test_acc": []}
    set_pairs = [member_pairs(members) for members in sets]
    all_pairs = [pair for pairs in set_pairs for pair in pairs]
    for_sets = {
        mode: split_per_set(train_curves(population, all_pairs, data, meta["max_epochs"], cfg.curve_kind, mode),
                            set_pairs)  # fmt: skip
        for mode in dict.fromkeys([cfg.curve_mode, "trained"])
    }
    reruns = nudged_reruns(population, [i for members in sets for i in members], data, meta["max_epochs"], cfg.nudge)
    for k, (members, pairs) in enumerate(zip(sets, set_pairs)):
        seeds = [population.seeds[i] for i in members]
        curves, trained = for_sets[cfg.curve_mode][k], for_sets["trained"][k]
        accuracies["single"].append(accuracy(build_ensemble(population, "average", members[:1]), x_test, y_test))
        noise = {"n_perturb": cfg.n_perturb, "sigma": cfg.sigma, "layer": cfg.layer, "part": cfg.part, "seed": k}
        options = {"average": {}, "majority": {}, "perturb": noise, "connect": {"n_t": cfg.n_t},
                   "combine": {"n_t": cfg.n_t, **noise}}  # fmt: skip
        for name, chosen in options.items():
            ensemble = build_ensemble(population, name, members, curves, **chosen)
            accuracies[name].append(accuracy(ensemble, x_test, y_test))
        starts = [vector(c.point_state(0).values()).cpu() for c in trained]  # Figure 9: curves trained from seeds
        models = {i: vector(population.member(i).net.parameters()) for i in members}
        for (a, _), start in zip(pairs, starts):
            distances["start_to_own_model"].append((start - models[a]).norm().item())
        distances["start_to_start"] += [(p - q).norm().item() for p, q in itertools.combinations(starts, 2)]
        distances["model_to_model"] += [
            (models[i] - models[j]).norm().item() for i, j in itertools.combinations(members, 2)
        ]
        distances["model_to_nudged_rerun"] += [(models[i] - reruns[i]).norm().item() for i in members]
        for curve in curves:
            on_curve = MLPEnsemble(*curve.stacked_at(ts))
            on_line = straight_line(curve, ts)
            for name, ens in (("curve", on_curve), ("line", on_line)):
                along[f"{name}_train_loss"].append(loss_and_accuracy(ens, x_train, y_train)[0].tolist())
                along[f"{name}_test_acc"].append(loss_and_accuracy(ens, x_test, y_test)[1].tolist())
        print(f"set {k + 1}/{len(sets)} seeds {seeds}: " + ", ".join(f"{n} {v[-1]:.3f}" for n, v in accuracies.items()))
    summary = {
        "dataset": meta["dataset"]["dataset"],
        "config": asdict(cfg),
        "test_accuracy": {n: {**spread(v), "values": v} for n, v in accuracies.items()},
        "distances": {n: {**spread(v), "n": len(v)} for n, v in distances.items()},
        "along": {"t": ts.tolist(), **{n: np.mean(v, axis=0).tolist() for n, v in along.items()}},
    }
    return summary


def spread(values: list[float]) -> dict[str, float]:
    return {"mean": float(np.mean(values)), "std": float(np.std(values))}


def write_landscape_report(summary: dict, out_dir: Path) -> None:
    plt = pyplot()

    write_json(out_dir / "landscape.json", summary)
    lines = ["ensemble,mean_test_acc,std_test_acc"] + [
        f"{n},{v['mean']:.6f},{v['std']:.6f}" for n, v in summary["test_accuracy"].items()
    ]
    accuracy = [[n, v["mean"], v["std"]] for n, v in summary["test_accuracy"].items()]
    distances = [[n, v["mean"], v["std"], v["n"]] for n, v in summary["distances"].items()]
    tables = {"test_accuracy": (["ensemble", "mean", "std"], accuracy),
              "distances": (["distance", "mean", "std", "n"], distances)}
    write_text(out_dir / "ensemble_accuracy.csv", "\n".join(lines) + "\n")
    along = summary["along"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), dpi=110)
    axes[0].plot(along["t"], along["curve_train_loss"], "o-", label="Bezier curve")
    axes[0].plot(along["t"], along["line_train_loss"], "s--", label="straight line")
    axes[0].set(xlabel="t", ylabel="train loss", title="loss along the path")
    axes[1].plot(along["t"], 100 * np.array(along["curve_test_acc"]), "o-", label="Bezier curve")
    axes[1].plot(along["t"], 100 * np.array(along["line_test_acc"]), "s--", label="straight line")
    axes[1].set(xlabel="t", ylabel="test accuracy (%)", title="accuracy along the path")
    names = list(summary["distances"])
    means = [summary["distances"][n]["mean"] for n in names]
    stds = [summary["distances"][n]["std"] for n in names]
    axes[2].bar(range(len(names)), means, yerr=stds, color=["tab:green", "tab:orange", "tab:blue", "tab:gray"])
    axes[2].set_xticks(range(len(names)), [n.replace("_", " ") for n in names], rotation=15)
    axes[2].set(ylabel="ℓ2 distance", title="weight-space distances (Fig. 9)")
    for ax in axes[:2]:
        ax.legend()
    fig.suptitle(f"{summary['dataset']}: mode-connecting curves")
    save_figure(fig, out_dir / "landscape.png")
    config = summary["config"]
    log_report(config["log_to"], out_dir, "landscape", config, tables, {"landscape": out_dir / "landscape.png"},
               {k: v for name, (columns, rows) in tables.items()
                for k, v in table_scalars(name, columns, rows, 1).items()},
               config["population"])  # fmt: skip


PROTOCOLS.add("landscape", evaluate_landscape, help="ensembles over the loss landscape (Ley et al.)",
              modalities=("rows",), config=LandscapeConfig, write=write_landscape_report, report="landscape.json",
              has_sets=True)  # fmt: skip
