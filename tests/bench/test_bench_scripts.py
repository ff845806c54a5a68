"""Every benchmark still runs end to end: each ``bench/*.py`` with its sizes shrunk
(module constants), its own agreement checks included, ending in one JSON line with a
positive ``ratio``. The speeds themselves are the benches' business, not the tests'.

And each bench's correctness check (its ``check``) passes on the naive and batched ways'
real results at tiny sizes and fails on a deliberately wrong one: a region zeroed, a map
or curve scaled, a row shifted, weights permuted, members swapped, seeds shifted."""

from __future__ import annotations

import copy
import importlib.util
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from evaluators.protocols.roar.grid import RoarGrid
from tests.support import ROOT

ROAR_STEPS = {"accelerator": "cpu", "max_epochs": 1, "limit_train_batches": 2}

SHRUNK = {
    "consistency": {"M": 4, "N": 12},
    "ensembles": {"N_INPUTS": 16, "N_T": 3, "N_PERTURB": 2},
    "image_explainers": {"N_CIFAR": 3, "N_224": 1, "STEPS": 3, "STEPS_224": 2, "N_CHECK": 2, "N_CHECK_224": 1},
    "image_loader": {"WARMUP": 1, "N_BATCHES": 2},
    "image_population": {"K": 2, "STEPS": 1},
    "insertion_deletion": {"N_IMAGES": 3, "STEPS": 4, "REFERENCE_RUN": ROOT / "no-such-run"},
    "optimised_aggregation": {"N_BATCHED": 2, "M_AGG": 6, "N_BATCHED_224": 2, "M_ROBUST_224": 6, "STEPS_224": 2,
                              "SIZE_224": 32, "REFERENCE_RUN": ROOT / "no-such-run", "DATA_DIR": ROOT / "no-such-data"},
    "population": {"K": 3, "K_NAIVE": 2, "SETTINGS": [("adult", 512, 4e-3, 1), ("german", 32, 4e-3, 1)]},
    "simplex_qp": {"K_VALUES": (3,), "B_VALUES": (1, 8), "REPEATS": 1},
    "tabular_explain": {"M": 3, "N": 6, "B": 3, "N_SLOW": 2, "N_T": 2, "N_PERTURB": 2},
    "sanity_checks": {"N_IMAGES": 2, "IG_STEPS": 2, "DATA_DIR": ROOT / "no-such-data"},
    "localisation": {"N_IMAGES": 4, "SIZE": 12, "N_ROWS": 6, "K": 10, "N_AXIOMATIC": 2, "SIZE_AXIOMATIC": 6},
    "roar": {"TABULAR": RoarGrid(estimators={"saliency": {}}, fractions=[0.0, 0.5], retrainings=2, trainer=ROAR_STEPS),
             "IMAGES": RoarGrid(estimators={"random": {}}, fractions=[0.5], retrainings=1, trainer=ROAR_STEPS),
             "CLEAN_TRAINING": {"tabular": ROAR_STEPS, "images": ROAR_STEPS}},
}
NEEDS = {"insertion_deletion": "quantus", "sanity_checks": "quantus",
         "localisation": "quantus"}  # benches that compare with an optional package


def load_bench(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(SHRUNK))
def test_bench_script_runs_and_ends_in_json(name, monkeypatch, capsys):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name], reason=f"bench/{name}.py compares with {NEEDS[name]}, not installed")
    module = load_bench(name)
    for constant, value in SHRUNK[name].items():
        assert hasattr(module, constant), f"bench/{name}.py no longer has {constant}"
        monkeypatch.setattr(module, constant, value)
    module.main()
    last = capsys.readouterr().out.strip().splitlines()[-1]
    result = json.loads(last)
    assert result["ratio"] > 0


def fails(check, *args, match: str | None = None) -> None:
    with pytest.raises(AssertionError, match=match):
        check(*args)


def zero_region(maps: torch.Tensor) -> torch.Tensor:
    """Image 0's top-left 8 x 8 pixels zeroed, all channels."""
    wrong = maps.clone()
    wrong[0, :, :8, :8] = 0
    return wrong


def scale_row(t: torch.Tensor, factor: float, row: int = 0) -> torch.Tensor:
    wrong = t.clone()
    wrong[row] *= factor
    return wrong


def test_agreement_checks_pass_on_gate_flips_and_fail_on_a_wrong_map():
    agreement = load_bench("_agreement")
    generator = torch.Generator().manual_seed(0)
    naive = torch.randn(4, 3, 16, 16, generator=generator)
    ours = naive * (1 + 1e-7 * torch.randn(naive.shape, generator=generator))  # float32 rounding
    ours.view(-1)[[5, 700, 2000]] += 0.04 * naive.abs().amax()  # three flipped gates, 4 % of the largest value
    assert not torch.allclose(ours, naive, rtol=1e-3, atol=1e-5)  # the old check of image_explainers.py fails
    assert agreement.check_float32(naive, ours, "flips")["share_outside"] > 0  # the new one passes
    fails(agreement.check_float32, naive, zero_region(ours), "zeroed", match="zeroed")
    fails(agreement.check_float32, naive, scale_row(ours, 1.5, 2), "scaled")
    fails(agreement.check_float32, naive, ours.roll(1, dims=2), "shifted")
    fails(agreement.check_float32, naive, ours[:3], "a map missing", match="shapes")
    nan = ours.clone()
    nan[1] = float("nan")
    fails(agreement.check_float32, naive, nan, "NaN")
    naive64 = naive.double()
    agreement.check_float64(naive64, naive64 * (1 + 1e-15), "rounding")
    off = naive64.clone()
    off[0, 0, 0, 0] += 1e-8 * naive64[0].abs().max()  # within float32's check, not float64's
    agreement.check_float32(naive64, off, "small")
    fails(agreement.check_float64, naive64, off, "small", match="float64")
    fails(agreement.check_float64, naive, ours, "float32 maps", match="float64 check got")


def test_image_explainers_check(monkeypatch):
    bench = load_bench("image_explainers")
    from lightning_modules.interface import default_classes
    from lightning_modules.image_classifier import create_image_model

    torch.manual_seed(0)
    model = create_image_model("resnet8", num_classes=10, in_channels=3).eval()
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    target = default_classes(model, x)
    maps = {}
    for method in ("saliency", "integrated_gradients", "gradcam"):
        naive = bench.one_per_call(model, x, target, method, 3)
        ours = bench.batched(model, x, target, method, 3, 4)
        result = bench.check(model, x, target, method, 3, naive, ours, 2, "tiny")
        assert result["float64_max_diff_relative"] <= 1e-10 and result["share_outside"] <= 0.01
        maps[method] = naive, ours
    naive, ours = maps["saliency"]
    for wrong in (zero_region(ours), scale_row(ours, 1.5), ours.roll(1, dims=2), torch.zeros_like(ours)):
        fails(bench.check, model, x, target, "saliency", 3, naive, wrong, 2, "tiny", match="tiny saliency")
    naive, ours = maps["integrated_gradients"]
    fails(bench.check, model, x, target, "integrated_gradients", 3, naive, scale_row(ours, 0.5, 1), 2, "tiny")
    # the float64 rerun checks the batched way itself: one that explains the images shifted by
    # a pixel fails there, though the timed maps handed in are right
    right = bench.batched
    monkeypatch.setattr(bench, "batched", lambda model, x, *args: right(model, x.roll(1, dims=-1), *args))
    naive, ours = maps["saliency"]
    fails(bench.check, model, x, target, "saliency", 3, naive, ours, 2, "tiny", match="float64")


def test_ensembles_check(monkeypatch):
    bench = load_bench("ensembles")
    from lightning_modules import PopulationMLP
    from lightning_modules.curves import MLPCurve
    from lightning_modules.ensembles import build_ensemble

    torch.manual_seed(0)
    curves = [MLPCurve(in_features=bench.D, start_seed=s, end_seed=s + 1) for s in (0, 2)]
    ends = PopulationMLP(in_features=bench.D, seeds=[0, 1, 2, 3])
    ensemble = build_ensemble(ends, "combine", [0, 1, 2, 3], curves, n_t=2, n_perturb=2, sigma=0.2)
    x = torch.randn(16, bench.D)
    batched = bench.explain(ensemble, x, "saliency")
    looped, plain = bench.looped_captum(ensemble, x), bench.looped_plain(ensemble, x)
    result = bench.check(ensemble, x, batched, looped, plain, 4)
    assert result["float64"]["float64_max_diff_relative"] <= 1e-10
    for wrong in (scale_row(batched, 1.01, 3), batched.roll(1, dims=0), batched * (1 + 1 / ensemble.size)):
        fails(bench.check, ensemble, x, wrong, looped, plain, 4, match="batched vs looped")
    right = bench.explain
    monkeypatch.setattr(bench, "explain", lambda model, x, method: right(model, x.roll(1, dims=0), method))
    fails(bench.check, ensemble, x, batched, looped, plain, 4, match="float64")


def test_consistency_check():
    bench = load_bench("consistency")
    from evaluators.metrics.agreement_functional import ley_agreements

    torch.manual_seed(0)
    e = torch.randn(1, 12, 7) + 0.7 * torch.randn(4, 12, 7)
    fast, slow = ley_agreements(e, 3), bench.per_pair_loop(e.numpy(), 3)
    bench.check(fast, slow)
    wrong = {**fast, "sa": fast["sa"].clone()}
    wrong["sa"][0, 0] += 1 / 3
    fails(bench.check, wrong, slow, match="score sa")
    fails(bench.check, {**fast, "ssa": fast["ssa"].roll(1, dims=1)}, slow, match="score ssa")
    fails(bench.check, {k: v for k, v in fast.items() if k != "cdc_d"}, slow, match="the core gives")


def test_simplex_qp_check():
    bench = load_bench("simplex_qp")
    from evaluators.aggregators.simplex_qp import enumerate_supports, solve_simplex_qp

    gamma = bench.problems(16, 5)
    w = solve_simplex_qp(gamma)
    bench.check(gamma, w, enumerate_supports(gamma), "enumerate")
    bench.check(gamma, w, solve_simplex_qp(gamma, "cvxpy"), "cvxpy")
    fails(bench.check, gamma, w, w.roll(1, dims=1), "permuted", match="permuted")
    fails(bench.check, gamma, w, torch.full_like(w, 1 / 5), "uniform")


def test_insertion_deletion_check(monkeypatch):
    bench = load_bench("insertion_deletion")
    monkeypatch.setattr(bench, "REFERENCE_RUN", ROOT / "no-such-run")
    from evaluators.maps import explain
    from foundation.modality import reduce_map
    from evaluators.metrics.insertion_deletion import insertion_deletion_curves
    from lightning_modules.interface import class_probabilities

    model, x, _ = bench.model_and_images(3)
    target = class_probabilities(model, x).argmax(-1)
    maps = reduce_map(explain(model, x, "saliency", target=target).detach(), "abs_sum")
    perms, baseline = bench.documented_draws(x, 0)
    for mode in ("insertion", "deletion"):
        _, ours = insertion_deletion_curves(model, x, maps, mode, target=target, steps=4, seed=0, max_batch=8)
        loop = bench.loop_curves(model, x, maps, target, perms, baseline, mode, 4)
        assert bench.check(ours, loop, bench.TOLERANCE["cpu"], mode) <= 1e-5
        fails(bench.check, ours, loop.roll(1, dims=1), bench.TOLERANCE["cpu"], mode, match=f"{mode}'s curves")
        fails(bench.check, ours, scale_row(loop, 1.01, 2), bench.TOLERANCE["cpu"], mode)
        fails(bench.check, ours, loop[:, 1:], bench.TOLERANCE["cpu"], mode, match="shape")


def test_sanity_checks_check(monkeypatch):
    pytest.importorskip("quantus", reason="bench/sanity_checks.py compares with quantus, not installed")
    bench = load_bench("sanity_checks")
    monkeypatch.setattr(bench, "IG_STEPS", 2)
    ig = bench.EXPLAINERS["integrated_gradients"][0]
    monkeypatch.setitem(bench.EXPLAINERS, "integrated_gradients", (ig, {"n_steps": 2}))
    torch.manual_seed(0)
    from lightning_modules.image_classifier import create_image_model

    model = create_image_model("resnet8", 10).eval()
    x, y = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0)), torch.tensor([1, 5, 7])
    ours = bench.ours(model, x, y, 6)
    theirs = {name: bench.quantus_mprt(model, x, y, attribute) for name, (attribute, _) in bench.EXPLAINERS.items()}
    assert bench.check(ours.scores, ours.layers, theirs) <= 1e-12
    fails(bench.check, ours.scores.roll(1, dims=0), ours.layers, theirs, match="differ")  # layers shifted
    fails(bench.check, ours.scores.roll(1, dims=-1), ours.layers, theirs, match="differ")  # images shifted
    fails(bench.check, ours.scores.flip(1), ours.layers, theirs, match="differ")  # explainers swapped
    fails(bench.check, ours.scores, ours.layers[1:], theirs, match="randomised")


def test_localisation_check(monkeypatch):
    pytest.importorskip("quantus", reason="bench/localisation.py compares with quantus, not installed")
    bench = load_bench("localisation")
    for constant, value in SHRUNK["localisation"].items():
        monkeypatch.setattr(bench, constant, value)
    g = torch.Generator().manual_seed(0)
    cases = {"images": bench.image_case(bench.N_IMAGES, bench.SIZE, g), "table": bench.table_case(g)}
    ours, theirs = bench.ours_localisation(cases)[0], bench.quantus_localisation(cases)[0]
    assert bench.check(ours, theirs) <= 1e-9
    wrong = dict(ours, **{"images/relevance_mass_accuracy": ours["images/relevance_mass_accuracy"] * 1.01})
    fails(bench.check, wrong, theirs, match="differ by")  # a score scaled
    wrong = dict(ours, **{"table/localisation_auc": ours["table/localisation_auc"][::-1]})
    fails(bench.check, wrong, theirs, match="differ by")  # rows swapped
    fails(bench.check, {k: v for k, v in ours.items() if k != "table/pointing_game"}, theirs, match="metrics differ")
    nan = ours["images/pointing_game"].copy()
    nan[0] = np.nan
    fails(bench.check, dict(ours, **{"images/pointing_game": nan}), theirs, match="NaN apart")


def test_optimised_aggregation_check():
    bench = load_bench("optimised_aggregation")
    model = bench.random_model("resnet8", 10)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    explainers = {"saliency": {}, "integrated_gradients": {"n_steps": 3}, "smoothgrad": {"nt_samples": 3}}
    for method in bench.METHODS:
        w_naive, gammas, _ = bench.naive_weights(model, x, explainers, method, 6, 64)
        w_batched = torch.cat([bench.batched_weights(model, x[i:i + 1], explainers, method, 6, 64)[0] for i in (0, 1)])
        difference, gap, _ = bench.check(w_naive, w_batched, gammas, list(explainers), method)
        assert difference <= bench.TOLERANCE or gap <= bench.OBJECTIVE_TOLERANCE
        worst_vertex = torch.nn.functional.one_hot(gammas.diagonal(dim1=1, dim2=2).argmax(1), len(explainers))
        for wrong in (w_batched.roll(1, dims=1), worst_vertex.to(w_batched.dtype)):
            assert bench.objective_gap(w_naive, wrong, gammas) > bench.OBJECTIVE_TOLERANCE  # the premise
            fails(bench.check, w_naive, wrong, gammas, list(explainers), method, match=method)


def test_image_loader_check():
    bench = load_bench("image_loader")
    data, _, _ = bench.reference_datamodule()
    data.setup("fit")
    images, _ = data._uint8_split("train")
    ours = next(iter(data.train_dataloader()))[0]
    draws = bench.replayed_draws(data, len(images))
    naive = bench.per_image_batch(data, images, draws)
    assert bench.check(ours, naive) <= bench.TOLERANCE
    order, rows, columns, flips = draws
    assert flips.any() and (rows != data.random_crop_padding).any()  # the draws do move and flip images
    mirrored = naive.clone()
    mirrored[0] = mirrored[0].flip(-1)
    fails(bench.check, ours, mirrored, match="differs")
    fails(bench.check, ours, bench.per_image_batch(data, images, (order, rows.roll(1), columns, flips)))
    fails(bench.check, ours, bench.per_image_batch(data, images, (order.roll(1), rows, columns, flips)))
    fails(bench.check, ours, naive * 1.01)


def test_image_population_check():
    bench = load_bench("image_population")
    from lightning_modules.image_classifier import ImageClassifier

    nets = [ImageClassifier(arch="small_cnn", num_classes=10, in_channels=1, seed=i).net for i in range(3)]
    members = [ImageClassifier(arch="small_cnn", num_classes=10, in_channels=1, seed=i).net for i in range(3)]
    with torch.no_grad():  # rounding-sized changes, as stacked kernels make
        for member in members:
            for p in member.parameters():
                p.add_(1e-4 * torch.randn_like(p))
    result = bench.check(nets, members, "close")
    assert 0 < result["max_member_difference"] <= 0.1 * result["min_other_seed_difference"]
    fails(bench.check, nets, members[::-1], "swapped", match="swapped")
    fails(bench.check, nets, members[1:] + members[:1], "seeds shifted")
    scaled = [copy.deepcopy(m) for m in members]
    with torch.no_grad():
        next(scaled[1].parameters()).mul_(1.5)
    fails(bench.check, nets, scaled, "scaled")
    fails(bench.check, nets[:1], members[:1], "one", match="K >= 2")


def test_population_check(monkeypatch):
    bench = load_bench("population")
    from datamodules import FinancialDataModule

    monkeypatch.setattr(bench, "K", 4)
    monkeypatch.setattr(bench, "K_NAIVE", 4)
    data = FinancialDataModule(dataset="german", batch_size=32)
    x_test, y_test = data.test_tensors
    _, acc_a = bench.one_by_one_lightning("german", 32, 4e-3, 1, x_test, y_test, data.num_features)
    _, acc_b = bench.one_by_one_plain(data, 32, 4e-3, 1, x_test, y_test, data.num_features)
    _, acc_c, _ = bench.as_population("german", 32, 4e-3, 1, data.num_features, x_test, y_test)
    assert bench.check(acc_a, acc_b, acc_c, "german")["identical_member_accuracies"] == "4/4"
    shifted = acc_c[1:] + acc_c[:1]
    assert sum(a == c for a, c in zip(acc_a, shifted)) < 2  # the premise: other seeds, other accuracies
    fails(bench.check, acc_a, acc_b, shifted, "shifted", match="shifted")
    fails(bench.check, acc_a, acc_b[::-1], acc_c, "reversed")
    fails(bench.check, acc_a, acc_b, acc_c[:1], "one member", match="K >= 2")


def test_roar_check():
    """Images, where (i) now trains in the datamodule's order: identical accuracies (the tabular
    cells' are checked by the bench run above)."""
    bench = load_bench("roar")
    from datamodules.images import MNIST5kDataModule
    from lightning_modules import ImageClassifier

    images = MNIST5kDataModule(batch_size=128, eval_batch_size=1000)
    images.setup("fit")
    clean = ImageClassifier(**bench.CNN, seed=100)
    bench.quiet_trainer(ROAR_STEPS).fit(clean, datamodule=images)
    clean.eval()
    grid = RoarGrid(estimators={"random": {}}, fractions=[0.5], retrainings=2, trainer=ROAR_STEPS)
    naive = bench.naive_grid(clean, images, grid, False)
    with tempfile.TemporaryDirectory() as tmp:
        bench.run_grid(clean, images, grid, Path(tmp))
        ours = [c["retrain_acc"] for c in bench.read_cells(Path(tmp), grid)]
    assert bench.check(naive, ours, "images")["identical_accuracies_images"] == "2/2"
    swapped = [row[::-1] for row in ours]  # each retraining in the other seed's place
    assert all(a != b for r, q in zip(naive, swapped) for a, b in zip(r, q))  # the premise
    fails(bench.check, naive, swapped, "images", match="images")
    fails(bench.check, naive, [row[:1] for row in ours], "images", match="accuracies per cell")
    fails(bench.check, [[0.7, 0.71], [0.6, 0.62]], [[0.6, 0.62], [0.7, 0.71]], "cells shifted", match="shifted")
