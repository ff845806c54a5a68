"""Non-finite explanation maps and metric results never pass silently (issue 41, item 1): the
agreement functions, Watson's C, the consistency protocol (rc 2, one line naming the population
member and the explainer), ROAR (the error names the estimator; nothing non-finite is cached),
the sanity checks and a population protocol's members, and one sweep over the metric and
aggregator registries and every public function of those packages that takes maps."""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil
import shutil
from dataclasses import replace

import pytest
import torch
from torchmetrics import Metric

import evaluators.aggregators
import evaluators.metrics
from datamodules.tabular import TwoMoonsDataModule
from evaluators.aggregators.optimised_aggregators import optimised_aggregation
from evaluators.aggregators.pixel_aggregators import aggregate
from evaluators.aggregators.registry import AGGREGATORS
from evaluators.maps import EXPLAINERS
from foundation.errors import InputError
from foundation.modality import IMAGES
from evaluators.metrics.agreement import AGREEMENT_METRICS
from evaluators.metrics.agreement import PairwiseAgreement
from evaluators.metrics.agreement_functional import (
    angular_difference, feature_agreement, ley_agreements, watson_consistency,
)  # fmt: skip
from evaluators.metrics.complexity import Sparseness
from evaluators.metrics.infidelity import subset_perturbations
from evaluators.metrics.registry import METRICS, score
from tests.support.helpers import assert_one_line_error, run_in_process
from tests.support.tiny_models import tiny_conv_net, tiny_mlp

REFUSED = r"has \d+ (NaN|infinite) value\(s\)"


def poisoned(t: torch.Tensor, value: float = math.nan, index: int | None = None) -> torch.Tensor:
    """A copy of ``t`` with one value (the middle one, or flat ``index``) set to ``value``."""
    out = t.clone()
    out.view(-1)[out.numel() // 2 if index is None else index] = value
    return out


def both_kinds(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with a NaN in its middle value and +inf in its last: either is refused."""
    return poisoned(poisoned(t), math.inf, t.numel() - 1)


# --- the cases: agreement on all-NaN maps, Watson's C -----------------------------------------------
def test_agreement_on_nan_maps_is_refused_naming_the_metric_model_and_map():
    nan = torch.full((3, 4, 6), math.nan)  # SA = SSA = CDC = 1 before: a NaN map "agreed" with every other
    for call, name in ((lambda e: ley_agreements(e, 2), "SA/SSA/CDC@k"), (lambda e: feature_agreement(e, 2),
                       "feature agreement"), (angular_difference, "angular difference"),
                       (watson_consistency, "Watson's C")):  # fmt: skip
        with pytest.raises(InputError, match=rf"^{name}: explanations\[0\]: map 0 has 6 NaN value\(s\) \(4 of 4 maps"):
            call(nan)
    one = poisoned(torch.randn(3, 4, 6), math.inf, index=2 * 24 + 6 + 1)  # model 2, map 1
    with pytest.raises(InputError, match=r"^SA@k: explanations\[2\]: map 1 has 1 infinite value\(s\) \(1 of 4 maps"):
        PairwiseAgreement("sa", k=2).update(one)


def test_a_metric_whose_result_is_not_finite_is_refused_naming_it():
    constant = torch.ones(3, 4, 6)  # rank correlation undefined for every pair: a mean over nothing
    metric = PairwiseAgreement("rc")
    metric.update(constant)
    with pytest.raises(InputError, match=r"^metric 'rc': 1 of 1 result value\(s\) not finite \(the mean of 0 score"):
        metric.compute()
    sparseness = Sparseness()
    sparseness.update(None, None, torch.zeros(2, 5))  # all-zero maps: sparseness undefined on every input
    with pytest.raises(InputError, match=r"^metric 'Sparseness': .*0 score\(s\), 2 undefined left out"):
        sparseness.compute()


# --- the consistency protocol on a population with a NaN member ----------------------------------------------
def nan_member_population(small_population: str, folder, member: int = 3):
    """A copy of the 8-member population file whose ``member``'s first-layer weights are NaN."""
    path = folder / "population.pt"
    shutil.copy(small_population, path)
    payload = torch.load(path, weights_only=True)
    payload["state_dict"]["weights.0"][member] = math.nan
    torch.save(payload, path)
    return path


def test_consistency_and_sigma_with_a_nan_member_exit_2_naming_it(small_population, tmp_path):
    population = nan_member_population(small_population, tmp_path)
    config = tmp_path / "consistency.yaml"
    config.write_text(f"population: {population}\nstrategies: [single]\nmethods: [saliency]\nn_models: [1]\n"
                      f"n_sets: 8\nn_points: 10\nk: 3\nwatson_c: true\ndevice: cpu\noutput_dir: {tmp_path / 'out'}\n")
    result = run_in_process("evaluate.py", "consistency", "--config", str(config))
    assert_one_line_error(result, "error: population member 3: explainer 'saliency': map 0 has 61 NaN value(s) "
                                  "(10 of 10 maps not finite); expected finite values")  # fmt: skip
    (run,) = (tmp_path / "out").iterdir()
    assert not (run / "table1.md").exists()
    kept = list(run.rglob("set-*.pt"))
    for path in kept:  # the sets finished before it are kept for a resume, every one finite
        assert all(bool(e.isfinite().all()) for e in torch.load(path, weights_only=True)["explanations"].values())
    payload = torch.load(kept[0], weights_only=True)  # a kept set with NaN maps (written by older code) is refused
    payload["explanations"]["saliency"][1, 0] = math.nan
    torch.save(payload, kept[0])
    result = run_in_process("evaluate.py", "consistency", "--resume", str(run))
    assert_one_line_error(result, f"error: {kept[0]}: explainer 'saliency': map 1 has 1 NaN value(s)")
    sigma = tmp_path / "sigma.yaml"  # the σ ablation perturbs members one at a time: the same member named
    sigma.write_text(f"population: {population}\nn_models: 8\nn_perturb: 2\nsigmas: [0.0]\nlayers: [1]\n"
                     f"n_points: 10\nk: 3\ndevice: cpu\noutput_dir: {tmp_path / 'sigma'}\n")
    result = run_in_process("evaluate.py", "sigma", "--config", str(sigma))
    assert_one_line_error(result, "error: population member 3 (perturbed: layer 1, sigma 0): explainer 'saliency': "
                                  "map 0 has 61 NaN value(s)")  # fmt: skip


# --- ROAR: the estimator named, nothing non-finite cached ----------------------------------------------------
def nan_mlp():
    model = tiny_mlp(2).float()
    with torch.no_grad():
        next(model.parameters()).fill_(math.nan)
    return model


@pytest.mark.parametrize("per_population", [None, 1])
def test_roar_of_a_nan_model_names_the_estimator_and_caches_nothing(tmp_path, per_population):
    """All cells in one population: the estimator's maps are refused first; one cell at a time:
    the shared t = 0 cell stops at the clean model's outputs, before retraining. Either way no
    cell file (no ``clean-t00.json``) and no cached map but the model-free random control's."""
    from evaluators.protocols.roar.grid import RoarGrid, run_grid

    grid = RoarGrid(estimators={"saliency": {}, "random": {}}, fractions=[0.0, 0.5], retrainings=2,
                    trainer={"accelerator": "cpu", "max_epochs": 1}, cells_per_population=per_population)
    message = (r"^ROAR estimator 'saliency': maps: example 0 has 2 NaN value\(s\) \(320 of 320 examples"
               if per_population is None else r"^ROAR cell 'clean-t00': the clean model: class probabilities: "
               r"test row 0 has 2 NaN value\(s\) \(80 of 80 test rows")  # fmt: skip
    with pytest.raises(InputError, match=message):
        run_grid(nan_mlp(), TwoMoonsDataModule(n_samples=400, batch_size=32), grid, tmp_path / "roar")
    assert not (tmp_path / "roar" / "cells").exists()
    assert sorted(p.name.split("-")[1] for p in (tmp_path / "roar" / "maps").iterdir()) == ["random", "random"]


def test_roar_recomputes_a_cached_map_file_holding_nan(tmp_path):
    from evaluators.protocols.roar.maps import dataset_maps

    model, data = tiny_mlp(2).float(), TwoMoonsDataModule(n_samples=200, batch_size=32)
    first = dataset_maps(model, data, "saliency", "test", tmp_path, progress=False)
    (path,) = tmp_path.iterdir()
    saved = torch.load(path, weights_only=True)
    torch.save({**saved, "maps": poisoned(saved["maps"])}, path)  # written by code that cached NaN maps
    again = dataset_maps(model, data, "saliency", "test", tmp_path, progress=False)
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    assert bool(torch.load(path, weights_only=True)["maps"].isfinite().all())


# --- sanity checks and population protocols ------------------------------------------------------------------
def test_sanity_checks_refuse_a_nan_model_naming_the_explainer():
    from evaluators.sanity import model_randomisation, random_logit

    model = tiny_conv_net(channels=1, h=8, w=8)
    with torch.no_grad():
        model[0].weight.fill_(math.nan)
    x = torch.randn(3, 1, 8, 8, dtype=torch.float64)
    with pytest.raises(InputError, match=rf"^explainer 'saliency'.*: map 0 {REFUSED}"):
        model_randomisation(model, x, 0, ["saliency"], measures=["spearman"])
    with pytest.raises(InputError, match=rf"^explainer 'saliency' of the target class: map 0 {REFUSED}"):
        random_logit(model, x, 0, ["saliency"], measures=["spearman"])


# --- the sweep: every registered metric and aggregator, every public function taking maps --------------------
N, C, H, W = 2, 1, 24, 24  # images large enough for SSIM (7 x 7) and HOG (24 x 24)
MAP_PARAMETERS = {"maps", "stack", "e", "explanations", "a", "b", "noisy_maps", "base"}  # names that take maps
REGISTRY_MODULES = {"evaluators.metrics.registry", "evaluators.aggregators.registry"}  # swept through their tables


def explain_fn(v, t):
    return v.sum(1)


def values() -> dict:
    """An argument for each parameter name the public functions use, maps finite."""
    torch.manual_seed(0)
    model, x = tiny_conv_net(channels=C, h=H, w=W), torch.randn(N, C, H, W, dtype=torch.float64)
    maps = torch.rand(N, H, W, dtype=torch.float64) + 0.1
    return {"model": model, "x": x, "maps": maps, "stack": torch.rand(3, N, H, W, dtype=torch.float64),
            "e": torch.randn(3, 4, 6, dtype=torch.float64), "a": maps, "b": maps.flip(1),
            "noisy_maps": maps.repeat_interleave(2, 0), "base": {"saliency": maps, "gradcam": maps.flip(1)},
            "explain_fn": explain_fn, "samples": subset_perturbations(model, x, n_samples=2), "k": 2,
            "mode": "insertion", "measure": "spearman", "how": "z", "name": "mean", "normalisation": "z",
            "aggregators": {"mean": {}}, "map_dims": 2, "n_samples": 2, "steps": 3, "percentages": (20,),
            "truth": torch.rand(N, H, W) > 0.5}  # fmt: skip


PLANTED = {"mask": torch.arange(H * W).view(1, H, W).expand(N, H, W) < 3, "attributions": None}  # a planted region
OVERRIDES = {"variance_aggregate": {"maps": torch.rand(N, 3, H, W, dtype=torch.float64)},  # shapes of their own
             "truth_scores": {"truth": PLANTED, "metric": "pointing_game"},  # probe_truth's mapping
             "scores_against_truth": {"truth": PLANTED, "modality": IMAGES}}  # fmt: skip


def public_functions(package) -> dict[str, object]:
    """``module.name`` -> function, for every public function of the package's modules (a module's
    ``__all__`` where it has one, else its names without a leading underscore) defined there."""
    out = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        names = getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")])
        if module.__name__ in REGISTRY_MODULES:
            continue
        for name in names:
            obj = getattr(module, name)
            if inspect.isfunction(obj) and obj.__module__ == module.__name__:
                out[f"{module.__name__}.{name}"] = obj
    return out


MAP_FUNCTIONS = {f"{name}({p})": (function, p)
                 for package in (evaluators.metrics, evaluators.aggregators)
                 for name, function in public_functions(package).items()
                 for p in inspect.signature(function).parameters if p in MAP_PARAMETERS}  # fmt: skip


def test_the_sweep_finds_the_functions_it_should():
    """The introspection is alive: it finds the agreement, similarity, fidelity and aggregation
    entry points (a renamed parameter would silently drop a function otherwise)."""
    for expected in ("agreement_functional.ley_agreements(e)", "agreement_functional.separability(b)",
                     "similarity.ssim(a)", "insertion_deletion.insertion_deletion_curves(maps)",
                     "pixel_aggregators.aggregate(stack)", "pixel_aggregators.aggregate_all(base)",
                     "normalisations.normalise(maps)", "sensitivity.map_distances(noisy_maps)"):  # fmt: skip
        assert any(key.endswith(expected) for key in MAP_FUNCTIONS), expected


@pytest.mark.parametrize("key", MAP_FUNCTIONS)
def test_every_public_function_taking_maps_refuses_non_finite_ones(key):
    function, parameter = MAP_FUNCTIONS[key]
    pool = {**values(), **OVERRIDES.get(function.__name__, {})}
    params = inspect.signature(function).parameters
    missing = [p for p, spec in params.items() if p not in pool and spec.default is spec.empty
               and spec.kind not in (spec.VAR_POSITIONAL, spec.VAR_KEYWORD)]  # fmt: skip
    assert not missing, f"{key}: add a value for parameter(s) {missing} to values() (or OVERRIDES) of this test"
    kwargs = {p: pool[p] for p, spec in params.items() if p in pool and spec.kind is not spec.VAR_KEYWORD}
    bad = kwargs[parameter]
    kwargs[parameter] = {**bad, "gradcam": both_kinds(bad["gradcam"])} if isinstance(bad, dict) else both_kinds(bad)
    with pytest.raises(InputError, match=REFUSED):
        function(**kwargs)


@pytest.mark.parametrize("name", METRICS)
def test_every_registered_metric_refuses_non_finite_maps(name):
    pool = values()
    with pytest.raises(InputError, match=rf"^maps: map 1 {REFUSED}"):
        score(name, pool["model"], pool["x"], poisoned(pool["maps"], index=H * W + 5), explain_fn=explain_fn,
              **({"n_samples": 2} if name in ("infidelity", "fcor", "sens_avg", "sens_max", "relative_stability")
                 else {}))  # fmt: skip


@pytest.mark.parametrize("name", AGREEMENT_METRICS)
def test_every_agreement_metric_refuses_non_finite_maps(name):
    with pytest.raises(InputError, match=rf"explanations\[1\]: map 2 {REFUSED}"):
        PairwiseAgreement(name, k=None if name in ("cdc", "angular", "rc", "pra") else 2).update(
            poisoned(values()["e"], index=24 + 12))  # fmt: skip


def test_every_metric_class_is_swept():
    """A new Metric in evaluators/metrics is registered (``METRICS``) or is the agreement metric,
    or this sweep does not reach it: then register it or add it here."""
    swept = {entry.obj for entry in METRICS.values()} | {PairwiseAgreement}
    for package in (evaluators.metrics,):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for name, obj in vars(module).items():
                if inspect.isclass(obj) and issubclass(obj, Metric) and obj.__module__ == module.__name__:
                    assert obj in swept or any(issubclass(s, obj) for s in swept), \
                        f"{module.__name__}.{name}: a Metric the non-finite sweep does not reach; register it"


@pytest.fixture
def nan_saliency(monkeypatch):
    """The registry's saliency with one NaN in input 1's map."""
    spec = EXPLAINERS["saliency"]

    def run(model, x, target, max_batch, **options):
        return poisoned(spec.obj(model, x, target, max_batch, **options), index=C * H * W + 3)

    monkeypatch.setitem(EXPLAINERS._entries, "saliency", replace(spec, obj=run))


@pytest.mark.parametrize("name", AGGREGATORS)
def test_every_registered_aggregator_refuses_non_finite_maps(name, nan_saliency):
    spec, pool = AGGREGATORS[name], values()
    if spec.kind == "pixel":
        options = {"k": 2, "batch_size": 2} if name == "rbm" else {}
        with pytest.raises(InputError, match=rf"^stack\[1\]: map 0 {REFUSED}"):
            aggregate(poisoned(pool["stack"], index=N * H * W + 3), name, **options)
    else:
        options = {"n_samples": 2} if "n_samples" in inspect.signature(spec.obj).parameters else {}
        with pytest.raises(InputError, match=rf"^explainer 'saliency': map 1 {REFUSED}"):
            optimised_aggregation(pool["model"], pool["x"], name, {"input_x_gradient": {}, "saliency": {}}, **options)
