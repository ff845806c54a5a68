"""DeepSHAP as Ley et al.'s reference pipeline computes it: ``shap.DeepExplainer`` on a model
that ends in ``nn.Softmax`` (an ablation for docs/table1.md, not part of the protocol).

    pip install --target /tmp/shapsite shap slicer cloudpickle numba llvmlite --no-deps
    PYTHONPATH=/tmp/shapsite python tools/shap_softmax_ablation.py --config configs/consistency/adult.yaml \\
        --population runs/ablation/refloss/adult/adult-population/population.pt --strategy single --n_sets 50

Ley et al.'s public code (``nicole-hjlin/harvard_cs282_ptg``, ``datasets/tabular.py``) builds
each MLP with a final ``nn.Softmax``; given such a model, ``shap.DeepExplainer`` explains the
positive-class probability and treats the softmax as an element-wise nonlinearity (its
``nonlinear_1d`` rule: the multiplier Δp_1 / Δz_1 of each input-reference pair), unlike
Captum's DeepLiftShap through a softmax and unlike the logit our protocol explains. This
script explains, with ``shap``, the ensembles that ``evaluate.py consistency`` builds for a
strategy (``single``, ``average``, ``perturb``; members' probabilities averaged), the same
test points and background rows, and prints top-k SA, SSA and CDC@d beside Captum's
DeepLiftShap of the logit on the same ensembles. ``shap`` is not a project dependency: its
install above is for this ablation only. The protocol computes the same rule itself, on every
strategy and much faster (``--set explain_output=probability --set deepshap_softmax_rule=rescale``,
``evaluators.maps.stacked_deepshap.deeplift_shap_of_ensemble``); this script is the check of
that rule against ``shap`` on real populations (``tests/evaluators/maps/test_stacked_deepshap.py`` checks it on a small
one when ``shap`` is importable).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from the checkout
from evaluators.inputs.config import load_config  # noqa: E402
from evaluators.maps import explain  # noqa: E402
from evaluators.metrics.agreement_functional import ley_agreements  # noqa: E402
from evaluators.protocols.consistency import (  # noqa: E402
    ConsistencyConfig, deepshap_background, explanation_seed, set_ensemble,
)  # fmt: skip
from evaluators.protocols.population_sets import disjoint_sets  # noqa: E402
from foundation.errors import InputError, run_entry_point  # noqa: E402
from foundation.files import write_json  # noqa: E402

STRATEGIES = ("single", "average", "perturb")


class MeanSoftmax(nn.Module):
    """The members of a stacked ``MLPEnsemble`` as separate ``nn.Sequential`` MLPs, each
    ending in ``nn.Softmax`` (the reference code's model), their probabilities averaged:
    module by module, so that ``shap`` can hook every ReLU and softmax."""

    def __init__(self, weights: list[torch.Tensor], biases: list[torch.Tensor]) -> None:
        super().__init__()
        nets = []
        for m in range(weights[0].shape[0]):
            layers: list[nn.Module] = []
            for k, (w, b) in enumerate(zip(weights, biases)):
                linear = nn.Linear(w.shape[2], w.shape[1])
                linear.weight.data, linear.bias.data = w[m].clone(), b[m].reshape(-1).clone()
                layers += [linear, nn.ReLU() if k < len(weights) - 1 else nn.Softmax(dim=-1)]
            nets.append(nn.Sequential(*layers))
        self.nets = nn.ModuleList(nets)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([net(x) for net in self.nets]).mean(0)


def shap_positive_class(model: nn.Module, x: torch.Tensor, background: torch.Tensor) -> torch.Tensor:
    import shap

    values = np.asarray(shap.DeepExplainer(model, background).shap_values(x, check_additivity=False))
    positive = values[..., 1] if values.ndim == 3 and values.shape[-1] == 2 else values[1]  # shap's two layouts
    return torch.tensor(positive, dtype=torch.float32)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True, help="a configs/consistency/<dataset>.yaml")
    parser.add_argument("--population", help="override the config's population file")
    parser.add_argument("--data_dir", default="../shared/data")
    parser.add_argument("--strategy", default="single", choices=STRATEGIES)
    parser.add_argument("--n_sets", type=int, default=50)
    parser.add_argument("--out", type=Path, help="also write the result here as JSON (never overwritten)")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.exists():
        raise InputError(f"--out {args.out}: already exists; choose a new file name")
    overrides = {"data_dir": args.data_dir, "population": args.population, "n_sets": args.n_sets}
    cfg = load_config(args.config, ConsistencyConfig, overrides)
    population, _, data = cfg.load()
    x_train, _ = data.train_tensors
    x_test, _ = data.test_tensors
    background = deepshap_background(x_train, cfg)  # as the protocol draws it
    x = x_test[: cfg.n_points_deepshap]
    maps: dict[str, list[torch.Tensor]] = {"captum_logit": [], "shap_softmax": []}
    started = time.perf_counter()
    for s, members in enumerate(disjoint_sets(population.size, 4, cfg.n_sets, cfg.seed)):
        ensemble = set_ensemble(args.strategy, s, members, population, [], cfg)
        torch.manual_seed(explanation_seed(cfg.seed, 4, s))
        maps["captum_logit"].append(explain(ensemble, x, "deepshap", baselines=background).detach())
        maps["shap_softmax"].append(shap_positive_class(MeanSoftmax(*ensemble.stacked).eval(), x, background))
        print(f"set {s + 1}/{cfg.n_sets}: {time.perf_counter() - started:.0f} s", flush=True)
    result = {"config": str(args.config), "population": cfg.population, "strategy": args.strategy,
              "n_sets": cfg.n_sets, "k": cfg.k, "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    for name, per_set in maps.items():
        agreements = ley_agreements(torch.stack(per_set), cfg.k)
        result[name] = {m: round(agreements[m].mean(0).mean().item(), 3) for m in ("sa", "ssa", "cdc_d")}
        print(name, result[name])
    if args.out is not None:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    run_entry_point(main)
