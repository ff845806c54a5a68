"""σ ablation of perturbed models (Ley et al., Figures 4 and 5).

For n pre-trained members, each "perturbed model" averages m copies of its member
with N(0, σ²) noise on one layer's weights (or biases). For every layer and σ the
evaluator reports the perturbed models' mean pairwise top-k sign agreement (SA) of
their explanations on the test points, and their mean test accuracy: agreement
should rise with σ until accuracy starts to fall.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from evaluators.inputs.config import PopulationSource, stacked_mlps_only
from evaluators.inputs.counts import counted, default_of
from evaluators.protocols.registry import PROTOCOLS
from foundation.finite import check_finite
from evaluators.maps import EXPLAINERS, explain
from evaluators.metrics.agreement_functional import sign_agreement
from foundation.errors import InputError
from evaluators.reports.wandb_log import ReportLogging, log_report, table_scalars
from foundation.files import pyplot, save_figure, write_json, write_text
from lightning_modules.ensembles import build_ensemble


@dataclass
class SigmaAblationConfig(ReportLogging, PopulationSource):
    """Options of the σ ablation (configs/sigma/<dataset>.yaml)."""

    KINDS, WHY_KINDS = stacked_mlps_only("perturbs every layer of", ", whose perturb ensembles use option layer")

    n_models: int = 10
    n_perturb: int = 50
    sigmas: list[float] = field(default_factory=lambda: [0.0, 0.05, 0.1, 0.2, 0.5, 1.0])
    layers: list[int] = field(default_factory=lambda: [0, 1, 2, 3])
    part: str = "weight"
    method: str = "saliency"
    k: int = 5
    n_points: int = 1000
    seed: int = 0
    output_dir: str = "runs/sigma"

    def __post_init__(self) -> None:
        super().__post_init__()
        names = sorted(EXPLAINERS.names(modality="rows"))
        if self.method not in names:
            raise InputError(f"option method={self.method!r}: unknown explainer; expected one of {names}")


def evaluate_sigma(cfg: SigmaAblationConfig) -> dict:
    population, payload, data = cfg.load()
    x_test, y_test = (t.to(population.device) for t in data.test_tensors)
    x = x_test[: counted("n_points", cfg.n_points, len(x_test), "test split", "rows", default_of(cfg, "n_points"))]
    members = torch.randperm(population.size, generator=torch.Generator().manual_seed(cfg.seed))[: cfg.n_models]
    rows = []
    for layer in cfg.layers:
        for sigma in cfg.sigmas:
            perturbed = [
                build_ensemble(population, "perturb", [int(i)], n_perturb=cfg.n_perturb, sigma=sigma, layer=layer,
                               part=cfg.part, seed=cfg.seed + j)  # fmt: skip
                for j, i in enumerate(members)
            ]
            explanations = torch.stack([explain(p, x, cfg.method) for p in perturbed])
            for i, maps in zip(members.tolist(), explanations):  # a NaN member named before its SA is scored
                check_finite(maps, f"population member {i} (perturbed: layer {layer}, sigma {sigma:g}): explainer "
                             f"{cfg.method!r}", "map")  # fmt: skip
            with torch.no_grad():
                accuracy = [(p.predict(x_test) == y_test).float().mean().item() for p in perturbed]
            rows.append({
                "layer": layer, "sigma": sigma, "sa": sign_agreement(explanations, cfg.k).mean().item(),
                "test_acc": float(np.mean(accuracy)), "test_acc_std": float(np.std(accuracy)),
            })  # fmt: skip
            row = rows[-1]
            print(f"layer {layer} sigma {sigma:g}: SA@{cfg.k} {row['sa']:.3f}, test acc {row['test_acc']:.4f}")
    return {"dataset": payload["metadata"]["dataset"]["dataset"], "config": asdict(cfg), "rows": rows}


def write_sigma_report(summary: dict, out_dir: Path) -> None:
    plt = pyplot()

    write_json(out_dir / "sigma_ablation.json", summary)
    lines = ["layer,sigma,sa,test_acc,test_acc_std"] + [
        f"{r['layer']},{r['sigma']},{r['sa']:.6f},{r['test_acc']:.6f},{r['test_acc_std']:.6f}" for r in summary["rows"]
    ]
    write_text(out_dir / "sigma_ablation.csv", "\n".join(lines) + "\n")
    fig, (ax_sa, ax_acc) = plt.subplots(1, 2, figsize=(11, 4), dpi=110)
    for layer in sorted({r["layer"] for r in summary["rows"]}):
        rows = [r for r in summary["rows"] if r["layer"] == layer]
        sigmas = [r["sigma"] for r in rows]
        ax_sa.plot(sigmas, [r["sa"] for r in rows], "o-", label=f"layer {layer + 1}")
        ax_acc.plot(sigmas, [100 * r["test_acc"] for r in rows], "o-", label=f"layer {layer + 1}")
    cfg = summary["config"]
    ax_sa.set(xlabel="σ", ylabel=f"SA@{cfg['k']} ({cfg['method']})", title="agreement of perturbed models")
    ax_acc.set(xlabel="σ", ylabel="test accuracy (%)", title="accuracy of perturbed models")
    for ax in (ax_sa, ax_acc):
        ax.legend()
    fig.suptitle(f"{summary['dataset']}: {cfg['part']} perturbations, {cfg['n_perturb']} per model")
    save_figure(fig, out_dir / "sigma_ablation.png")
    columns = ["layer", "sigma", "sa", "test_acc", "test_acc_std"]
    table = [[r[c] for c in columns] for r in summary["rows"]]
    log_report(cfg["log_to"], out_dir, "sigma", cfg, {"sigma_ablation": (columns, table)},
               {"figure": out_dir / "sigma_ablation.png"}, table_scalars("sigma_ablation", columns, table, 2),
               cfg["population"])  # fmt: skip


PROTOCOLS.add("sigma", evaluate_sigma, help="sigma ablation of perturbed models (Ley et al., Fig. 4-5)",
              modalities=("rows",), config=SigmaAblationConfig, write=write_sigma_report,
              report="sigma_ablation.json")  # fmt: skip
