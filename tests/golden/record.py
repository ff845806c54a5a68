"""The golden record's computation: every output the project's results depend on, on tiny
seeded models and inputs, as a SHA-256 of each tensor's bytes plus readable summaries.

``python -m tests.golden.record --write`` rewrites ``tests/golden/record.json``;
``python -m tests.golden.record --out FILE`` writes the record computed now to FILE (what
``tests/golden/test_golden.py`` runs). Both run in portable mode (``portable.py``: set here before
torch and numpy are imported; it includes OpenBLAS's generic kernels), so the record holds on
any x86-64 CPU with the pinned packages.
Rewriting the record is a decision: state which entries changed and why in the closing note.

Every import of the project is in this module (:func:`_imports`), so a change of layout
fixes its imports here and nowhere else.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORD = Path(__file__).resolve().parent / "record.json"


def _portable() -> None:
    """Portable mode before torch (and numpy) is imported: the same bits on any x86-64 CPU."""
    sys.path.insert(0, str(ROOT))
    os.environ["RELIABLE_EXPLANATIONS_PORTABLE"] = "1"
    import portable

    portable.enable_if_asked([])
    import torch  # noqa: F401  (after the variables are set)

    portable.configure_torch()


def _imports():
    """The project's public names the record uses, in one namespace (returned through
    ``locals()``, hence the noqa: F401 on every import)."""
    from types import SimpleNamespace

    from datamodules import TwoMoonsDataModule  # noqa: F401
    from evaluators.maps import EXPLAINERS, explain  # noqa: F401
    TABULAR_EXPLAINERS = [n for n, spec in EXPLAINERS.items() if spec.fixed is not None]  # noqa: F841 (tabular)
    IMAGE_EXPLAINERS = [n for n, spec in EXPLAINERS.items() if spec.takes != "rows"]  # noqa: F841 (an image model's)
    from evaluators.maps.image_explainers import reduce_map  # noqa: F401
    from evaluators.aggregators.normalisations import NORMALISATIONS, normalise  # noqa: F401
    from evaluators.aggregators.optimised_aggregators import optimised_aggregation  # noqa: F401
    from evaluators.aggregators.pixel_aggregators import aggregate  # noqa: F401
    from evaluators.aggregators.registry import AGGREGATORS  # noqa: F401
    from evaluators.aggregators.simplex_qp import solve_simplex_qp  # noqa: F401
    from evaluators.metrics import agreement_functional as agreement  # noqa: F401
    from evaluators.metrics.faithfulness_correlation import faithfulness_correlation  # noqa: F401
    from evaluators.metrics.infidelity import infidelity, subset_perturbations  # noqa: F401
    from evaluators.metrics.insertion_deletion import auc, insertion_deletion_curves  # noqa: F401
    from evaluators.metrics.model_scores import target_outputs  # noqa: F401
    from evaluators.metrics.relative_stability import relative_stability  # noqa: F401
    from evaluators.metrics.road import road_curves  # noqa: F401
    from evaluators.metrics.sensitivity import sensitivities  # noqa: F401
    from evaluators.protocols.roar.grid import RoarGrid, run_grid  # noqa: F401
    from lightning_modules import ImagePopulation, MLPClassifier, PopulationMLP, create_image_model  # noqa: F401
    from lightning_modules.curve_population import curves_between  # noqa: F401
    from lightning_modules.curve_model import CurveModel  # noqa: F401
    from lightning_modules.curves import MLPCurve  # noqa: F401
    from lightning_modules.ensembles import ENSEMBLES, build_ensemble  # noqa: F401
    from lightning_modules.image_ensembles import ImageNetworks  # noqa: F401
    from lightning_modules.population_fit import fit_population  # noqa: F401

    return SimpleNamespace(**{k: v for k, v in locals().items() if k != "SimpleNamespace"})


# ---------------------------------------------------------------------------------------------
# Entries


def entry(value) -> dict:
    """A tensor (or a JSON-able value) as its digest and readable summaries: the SHA-256 of
    dtype, shape and bytes, the sum and the largest absolute value (NaN ignored; in float64)."""
    import torch

    if not isinstance(value, torch.Tensor):
        text = json.dumps(value, sort_keys=True)
        return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "value": value}
    t = value.detach().cpu().contiguous()
    digest = hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode())
    digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    as_double = t.double()
    finite = as_double[~as_double.isnan()]
    return {
        "sha256": digest.hexdigest(), "shape": list(t.shape), "dtype": str(t.dtype),
        "sum": _number(finite.sum().item()), "absmax": _number(finite.abs().max().item() if finite.numel() else 0.0),
        "nan": int(as_double.isnan().sum().item()),
    }  # fmt: skip


def _number(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def _state(module) -> dict:
    import torch

    return {k: v for k, v in module.state_dict().items() if isinstance(v, torch.Tensor)}


def _flat_state(*modules):
    """Every tensor of the modules' state dicts, each in key order, as one float64 vector
    (exact for float32 and integer buffers)."""
    import torch

    return torch.cat([state[k].detach().double().reshape(-1) for state in map(_state, modules) for k in sorted(state)])


# ---------------------------------------------------------------------------------------------
# Tiny models and inputs

D, N_ROWS = 5, 4
HIDDEN = (8, 6)
# Options shrunk from the defaults where a method samples or steps (the defaults are pinned
# too, on the single MLP, where they are cheap).
SMALL = {
    "smoothgrad": {"nt_samples": 6}, "smoothgrad_sq": {"nt_samples": 6}, "vargrad": {"nt_samples": 6},
    "gradient_shap": {"n_samples": 6}, "integrated_gradients": {"n_steps": 8}, "lime": {"n_samples": 30},
    "kernel_shap": {"n_samples": 30}, "shapley_value_sampling": {"n_samples": 3},
}  # fmt: skip
SLOW = ("lime", "kernel_shap")  # a linear model fitted per row: fewer rows where the path is the same


def rows(n: int = N_ROWS, seed: int = 11):
    import torch

    # Spread 5: an untrained MLP's output then varies enough over the inputs that LIME's
    # Lasso (alpha 0.01) keeps some features.
    return 5 * torch.randn(n, D, generator=torch.Generator().manual_seed(seed))


def background():
    return rows(3, seed=12)


def tabular_options(method: str, small: bool = True) -> dict:
    options = dict(SMALL.get(method, {})) if small else {}
    if method == "deepshap":
        options["baselines"] = background()
    return options


def population(ns, explain_output: str, size: int = 4):
    return ns.PopulationMLP(in_features=D, seeds=[3, 1, 4, 6][:size], hidden=HIDDEN,
                            explain_output=explain_output).eval()  # fmt: skip


def curves(ns, explain_output: str):
    return [ns.MLPCurve(in_features=D, start_seed=s, end_seed=s + 1, hidden=HIDDEN, explain_output=explain_output)
            for s in (0, 10)]  # fmt: skip


def ensembles(ns, explain_output: str) -> dict:
    pop, cur = population(ns, explain_output), curves(ns, explain_output)
    return {
        "average": ns.ENSEMBLES["average"](pop, [0, 1, 2]),
        "majority": ns.ENSEMBLES["majority"](pop, [0, 1, 2]),
        "perturb": ns.ENSEMBLES["perturb"](pop, [0, 2], n_perturb=3, sigma=0.2, seed=5),
        "connect": ns.build_ensemble(pop, "connect", [0, 1, 2, 3], cur, n_t=3),
        "combine": ns.build_ensemble(pop, "combine", [0, 1, 2, 3], cur, n_t=2, n_perturb=2, sigma=0.2, seed=6),
    }


def images(n: int = 2, size: int = 8, seed: int = 21):
    import torch

    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


def image_models(ns) -> dict:
    import torch

    models = {}
    for arch in ("resnet8", "small_cnn"):
        torch.manual_seed(0)
        models[arch] = ns.create_image_model(arch, num_classes=3, in_channels=3).eval()
    return models


IMAGE_OPTIONS = {
    "integrated_gradients": {"n_steps": 8}, "gradient_shap": {"n_samples": 6}, "smoothgrad": {"nt_samples": 6},
    "smoothgrad_sq": {"nt_samples": 6}, "vargrad": {"nt_samples": 6}, "occlusion": {},
    "rise": {"n_masks": 64, "s": 4},
}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Groups


def tabular_explainers(ns) -> dict:
    out = {}
    x = rows()
    for output in ("logit", "probability"):
        mlp = ns.MLPClassifier(in_features=D, hidden=HIDDEN, seed=2, explain_output=output).eval()
        models = {"mlp": mlp, "population": population(ns, output), **ensembles(ns, output)}
        for model_name, model in models.items():
            for method in sorted(ns.TABULAR_EXPLAINERS):
                xs = x[:2] if method in SLOW and model_name != "mlp" else x
                out[f"{model_name}/{output}/{method}"] = entry(ns.explain(model, xs, method, seed=1,
                                                                          **tabular_options(method)))  # fmt: skip
        for method in sorted(ns.TABULAR_EXPLAINERS):  # the registry's defaults, on the MLP
            if method not in SLOW or output == "logit":
                out[f"mlp/{output}/{method}/defaults"] = entry(ns.explain(mlp, x, method,
                                                                          **tabular_options(method, False)))
        out[f"average/{output}/deepshap/index"] = entry(ns.explain(models["average"], x, "deepshap", seed=3,
                                                                   index=[7, 8, 9, 10], baselines=background()))
        if output == "probability":
            for name in ("average", "perturb", "combine"):
                out[f"{name}/probability/deepshap/rescale"] = entry(ns.explain(
                    models[name], x, "deepshap", baselines=background(), softmax_rule="rescale"))
    return out


def ensemble_outputs(ns) -> dict:
    import torch

    out = {}
    x = rows(8, seed=13)
    for output in ("logit", "probability"):
        for name, ens in ensembles(ns, output).items():
            with torch.no_grad():
                out[f"{name}/{output}/forward"] = entry(ens(x))  # the members' mean logit (issue 29)
                out[f"{name}/{output}/probabilities"] = entry(ens.probabilities(x))  # the forward before issue 29
                out[f"{name}/{output}/explained_output"] = entry(ens.explained_output(x))
                out[f"{name}/{output}/predict"] = entry(ens.predict(x))
    with torch.no_grad():
        pop = population(ns, "logit")
        out["population/forward"] = entry(pop(x))
        out["population/explained_output"] = entry(pop.explained_output(x))
    return out


def image_explainers(ns) -> dict:
    import torch

    out = {}
    x = images()
    for arch, model in image_models(ns).items():
        with torch.no_grad():
            out[f"{arch}/logits"] = entry(model(x))
        for method in sorted(ns.IMAGE_EXPLAINERS):
            options = dict(IMAGE_OPTIONS.get(method, {}))
            if method == "gradient_shap":
                options["baselines"] = images(3, seed=22)
            out[f"{arch}/{method}"] = entry(ns.explain(model, x, method, seed=2, **options))
        out[f"{arch}/saliency/target=2"] = entry(ns.explain(model, x, "saliency", target=2))
        out[f"{arch}/smoothgrad/index"] = entry(ns.explain(model, x, "smoothgrad", seed=4, index=[5, 9],
                                                           target=torch.tensor([0, 1]), nt_samples=4))
    return out


def image_ensembles(ns) -> dict:
    import torch

    out = {}
    x = images(2, seed=23)
    loader = [(images(4, seed=24), torch.zeros(4, dtype=torch.long))]
    for arch in ("small_cnn", "resnet8"):
        members = []
        for seed in range(4):
            torch.manual_seed(seed)
            members.append(ns.create_image_model(arch, num_classes=3, in_channels=3).eval())
        curves_ = [ns.CurveModel(members[a], members[b]) for a, b in ((0, 1), (2, 3))]
        with torch.no_grad():  # a bend off the straight line
            for k, curve in enumerate(curves_):
                for name, p in curve.net.named_parameters():
                    if name.endswith("_1"):
                        p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(k)))
        built = {
            "average": ns.build_ensemble(ns.ImageNetworks(members), "average", [0, 1, 2]),
            "majority": ns.build_ensemble(ns.ImageNetworks(members), "majority", [0, 1, 2]),
            "perturb": ns.build_ensemble(ns.ImageNetworks(members), "perturb", [0, 1], n_perturb=2, sigma=0.05, seed=3),
            "connect": ns.build_ensemble(ns.ImageNetworks(members), "connect", [0, 1, 2, 3], curves_, n_t=3,
                                         loader=loader),
            "combine": ns.build_ensemble(ns.ImageNetworks(members), "combine", [0, 1, 2, 3], curves_, n_t=2,
                                         n_perturb=2, sigma=0.05, seed=4, loader=loader),
        }  # fmt: skip
        for name, ens in built.items():
            ens.eval()
            with torch.no_grad():
                out[f"{arch}/{name}/forward"] = entry(ens(x))
                out[f"{arch}/{name}/probabilities"] = entry(ens.probabilities(x))
            out[f"{arch}/{name}/saliency"] = entry(ns.explain(ens, x, "saliency"))
            out[f"{arch}/{name}/integrated_gradients"] = entry(ns.explain(ens, x, "integrated_gradients", n_steps=4))
            out[f"{arch}/{name}/smoothgrad"] = entry(ns.explain(ens, x, "smoothgrad", nt_samples=3, seed=1))
    return out


def agreement(ns) -> dict:
    import torch

    out = {}
    g = torch.Generator().manual_seed(31)
    e = torch.randn(1, 6, 7, generator=g) + 0.6 * torch.randn(4, 6, 7, generator=g)  # models that half agree
    e[:, 0, 3] = e[:, 0, 2]  # a tie in the ranks
    for name, fn in sorted(ns.agreement.AGREEMENTS.items()):
        out[name] = entry(fn(e, 3))
    out["ley_agreements"] = {k: entry(v) for k, v in sorted(ns.agreement.ley_agreements(e, 3).items())}
    out["consistent_direction/all"] = entry(ns.agreement.consistent_direction(e))
    out["angular_difference"] = entry(ns.agreement.angular_difference(e))
    out["top_k_indices"] = entry(ns.agreement.top_k_indices(e, 3))
    out["separability"] = entry(ns.agreement.separability(e[0], e[1] + 0.3, seed=1))
    out["pair_separations"] = entry(ns.agreement.pair_separations(e, seed=2))
    out["watson_consistency"] = entry(ns.agreement.watson_consistency(e, seed=2))
    return out


def fidelity(ns) -> dict:
    import torch

    out = {}
    model = image_models(ns)["small_cnn"]
    x = images(3, size=8, seed=41)
    maps = ns.reduce_map(ns.explain(model, x, "saliency"), "sum")
    mlp = ns.MLPClassifier(in_features=D, hidden=HIDDEN, seed=2).eval()
    r = rows(6, seed=42)
    rmaps = ns.explain(mlp, r, "integrated_gradients", n_steps=8)
    means = r.mean(0)
    for mode in ("insertion", "deletion"):
        fractions, curves_ = ns.insertion_deletion_curves(model, x, maps, mode, steps=8, seed=1)
        out[f"{mode}/images/curves"] = entry(curves_)
        out[f"{mode}/images/auc"] = entry(ns.auc(curves_, fractions))
        fractions, curves_ = ns.insertion_deletion_curves(mlp, r, rmaps, mode, baseline=means, seed=1)
        out[f"{mode}/rows/curves"] = entry(curves_)
        out[f"{mode}/rows/auc"] = entry(ns.auc(curves_, fractions))
    samples = {
        "superpixels": ns.subset_perturbations(model, x, n_samples=8, n_segments=4, seed=2),
        "pixels": ns.subset_perturbations(model, x, n_samples=8, units="pixels", seed=2),
        "rows": ns.subset_perturbations(mlp, r, n_samples=8, baseline=means, seed=2),
    }
    for unit, s in samples.items():
        m = rmaps if unit == "rows" else maps
        out[f"subset_perturbations/{unit}/deltas"] = entry(s.deltas)
        out[f"infidelity/{unit}"] = entry(ns.infidelity(m, s))
        out[f"infidelity/{unit}/unnormalised"] = entry(ns.infidelity(m, s, normalize=False))
        out[f"faithfulness_correlation/{unit}"] = entry(ns.faithfulness_correlation(m, s))

    def explain_images(xs, ts):
        return ns.reduce_map(ns.explain(model, xs, "saliency", target=ts), "sum")

    def explain_rows(xs, ts):
        return ns.explain(mlp, xs, "integrated_gradients", n_steps=8)

    target = torch.tensor([0, 1, 2])
    for relative in (True, False):
        out[f"sensitivity/images/relative={relative}"] = entry(
            ns.sensitivities(explain_images, x, maps, target, n_samples=4, relative=relative, seed=3))
    out["sensitivity/rows"] = entry(ns.sensitivities(explain_rows, r, rmaps, None, n_samples=4, seed=3))
    for order in ("morf", "lerf"):
        for output in ("probability", "logit", "accuracy"):
            _, c = ns.road_curves(model, x, maps, order, percentages=(20, 50, 80), target=target, output=output)
            out[f"road/{order}/{output}"] = entry(c)
        _, c = ns.road_curves(mlp, r, rmaps, order, percentages=(20, 60), feature_means=means)
        out[f"road/{order}/rows"] = entry(c)
    _, c = ns.road_curves(model, x, maps, "morf", percentages=(30,), target=target, difference=True, seed=5)
    out["road/morf/difference"] = entry(c)
    for change in ("elementwise", "norm"):
        stab = ns.relative_stability(model, x, maps, explain_images, target=target, n_samples=4, change=change,
                                     seed=4)  # fmt: skip
        out[f"relative_stability/images/{change}"] = {k: entry(v) for k, v in sorted(stab.items())}
    stab = ns.relative_stability(mlp, r, rmaps, explain_rows, n_samples=4, seed=4)
    out["relative_stability/rows"] = {k: entry(v) for k, v in sorted(stab.items())}
    for output in ("logit", "probability"):
        out[f"target_outputs/images/{output}"] = entry(ns.target_outputs(model, x, target, output))
        out[f"target_outputs/rows/{output}"] = entry(ns.target_outputs(mlp, r, None, output))
    return out


def aggregation(ns) -> dict:
    import torch

    out = {}
    g = torch.Generator().manual_seed(51)
    maps = torch.randn(2, 5, 6, generator=g, dtype=torch.float64)
    for name in sorted(ns.NORMALISATIONS):
        out[f"normalise/{name}"] = entry(ns.normalise(maps, name))
        out[f"normalise/{name}/float32"] = entry(ns.normalise(maps.float(), name))
    stack = torch.stack([ns.normalise(torch.randn(2, 5, 6, generator=g, dtype=torch.float64), "linear")
                         for _ in range(3)])  # fmt: skip
    for name in sorted(ns.AGGREGATORS.names(kind="pixel")):
        out[f"pixel/{name}"] = entry(ns.aggregate(stack, name))
    out["pixel/percentile/q=75"] = entry(ns.aggregate(stack, "percentile", q=75.0))
    gamma = torch.randn(4, 3, 3, generator=g, dtype=torch.float64)
    gamma = gamma @ gamma.transpose(1, 2) + 0.1 * torch.eye(3, dtype=torch.float64)
    gamma[3] = torch.ones(3, 3, dtype=torch.float64)  # a singular, tied Γ
    out["simplex_qp/batched"] = entry(ns.solve_simplex_qp(gamma))
    model = image_models(ns)["small_cnn"]
    x = images(2, size=8, seed=52)
    explainers = {"saliency": {}, "integrated_gradients": {"n_steps": 6}, "guided_backprop": {}}
    small = {"agg_robust": {"n_samples": 3}, "agg_faith": {"n_samples": 4}, "agg_opt": {"n_samples": 4}}
    for method in sorted(ns.AGGREGATORS.names(kind="optimised")):
        maps_, weights = ns.optimised_aggregation(model, x, method, explainers, **small.get(method, {}))
        out[f"optimised/images/{method}"] = entry(maps_)
        out[f"optimised/images/{method}/weights"] = entry(weights) if weights is not None else None
    mlp = ns.MLPClassifier(in_features=D, hidden=HIDDEN, seed=2).eval()
    r = rows(4, seed=53)
    small_rows = {k: {**v, "baseline": r.mean(0)} if k in ("agg_faith", "agg_opt") else v for k, v in small.items()}
    for method in sorted(ns.AGGREGATORS.names(kind="optimised")):
        maps_, weights = ns.optimised_aggregation(mlp, r, method, explainers, **small_rows.get(method, {}))
        out[f"optimised/rows/{method}"] = entry(maps_)
    return out


def _quiet_trainer(max_epochs: int = 1, **kwargs):
    import pytorch_lightning as pl

    return pl.Trainer(accelerator="cpu", devices=1, max_epochs=max_epochs, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                      **kwargs)  # fmt: skip


def training(ns) -> dict:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        pop = ns.PopulationMLP(in_features=2, seeds=[0, 5, 9], hidden=HIDDEN, lr=1e-2)
        data = ns.TwoMoonsDataModule(n_samples=120, batch_size=32)
        fitted = ns.fit_population(pop, data, lambda root: _quiet_trainer(2, default_root_dir=str(root)),
                                   Path(tmp) / "fit", chunk_size=2)  # fmt: skip
        whole, accuracy = fitted
        out["population_fit/weights"] = entry(_flat_state(*[whole.member(i).net for i in range(whole.size)]))
        out["population_fit/member_test_acc"] = entry(accuracy)

        g = torch.Generator().manual_seed(61)
        x, y = torch.rand(12, 3, 8, 8, generator=g), torch.randint(0, 3, (12,), generator=g)
        loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=False)
        image_pop = ns.ImagePopulation(arch="resnet8", num_classes=3, seeds=[1, 2], stacking="loop", lr=0.05,
                                       warmup_epochs=0)  # fmt: skip
        _quiet_trainer(1).fit(image_pop, train_dataloaders=loader)
        out["image_population_fit/weights"] = entry(_flat_state(*[image_pop.member(i).net for i in range(2)]))

        curve = ns.MLPCurve(in_features=2, start_seed=3, end_seed=4, hidden=HIDDEN, lr=1e-2, t_seed=2)
        _quiet_trainer(1).fit(curve, datamodule=ns.TwoMoonsDataModule(n_samples=120, batch_size=32))
        out["curve_fit/bezier"] = entry(_flat_state(curve))
        stacked = ns.curves_between(whole, [(0, 1)], mode="fixed")
        _quiet_trainer(1).fit(stacked, datamodule=ns.TwoMoonsDataModule(n_samples=120, batch_size=32))
        out["curve_fit/population_fixed"] = entry(_flat_state(stacked.curve(0)))

        clean = ns.MLPClassifier(in_features=2, hidden=HIDDEN, seed=7)
        _quiet_trainer(1).fit(clean, datamodule=ns.TwoMoonsDataModule(n_samples=120, batch_size=32))
        grid = ns.RoarGrid(estimators={"saliency": {}}, fractions=[0.5], retrainings=2,
                           trainer={"accelerator": "cpu", "max_epochs": 1})  # fmt: skip
        roar = Path(tmp) / "roar"
        ns.run_grid(clean, ns.TwoMoonsDataModule(n_samples=120, batch_size=32), grid, roar)
        cell = json.loads((roar / "cells" / "saliency-t50.json").read_text())
        cell.pop("seconds")
        out["roar_cell/saliency-t50"] = entry(cell)
    return out


GROUPS = {
    "tabular_explainers": tabular_explainers,
    "ensemble_outputs": ensemble_outputs,
    "image_explainers": image_explainers,
    "image_ensembles": image_ensembles,
    "agreement": agreement,
    "fidelity": fidelity,
    "aggregation": aggregation,
    "training": training,
}


def compute() -> dict:
    ns = _imports()
    record = {}
    for name, fn in GROUPS.items():
        import torch

        torch.manual_seed(0)  # no group depends on what the one before drew
        start = time.perf_counter()
        record[name] = fn(ns)
        print(f"{name}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {RECORD.relative_to(ROOT)}")
    parser.add_argument("--out", help="write the record computed now to this file")
    args = parser.parse_args(argv)
    if not (args.write or args.out):
        parser.error("expected --write or --out FILE")
    _portable()
    import logging
    import warnings

    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    text = json.dumps(compute(), indent=1, sort_keys=True) + "\n"
    for path in ([RECORD] if args.write else []) + ([Path(args.out)] if args.out else []):
        path.write_text(text)


if __name__ == "__main__":
    main()
