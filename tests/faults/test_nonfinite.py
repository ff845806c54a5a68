"""NaN and ±inf are refused, never hidden: every normalisation, pixel aggregator, optimised
aggregator and fidelity metric rejects a map, an input or a model output that is not
finite with one ``InputError`` naming it (and the map, input or row, with its counts),
and a protocol run with a NaN-producing explainer ends with that one line. Finite input
keeps its numbers: the reference tests of each module (tests/evaluators/aggregators/ and
tests/evaluators/metrics/: test_normalisations.py, test_pixel_aggregators.py, test_insertion_deletion.py,
test_infidelity.py, test_sensitivity.py, test_faithfulness_correlation.py, test_road.py,
test_optimised_aggregators.py) are unchanged and pass."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

import evaluate
from datamodules import FinancialDataModule
from evaluators.aggregators.normalisations import NORMALISATIONS, normalise
from evaluators.aggregators.optimised_aggregators import optimised_aggregation, variance_aggregate
from evaluators.aggregators.pixel_aggregators import aggregate, aggregate_all
from evaluators.aggregators.registry import AGGREGATORS
from foundation.finite import check_finite
from evaluators.maps import EXPLAINERS
from evaluators.metrics.faithfulness_correlation import FaithfulnessCorrelation, faithfulness_correlation
from evaluators.metrics.infidelity import Infidelity, infidelity, subset_perturbations
from evaluators.metrics.insertion_deletion import DeletionAUC, InsertionAUC, auc, insertion_deletion_curves
from evaluators.metrics.relative_stability import RelativeStability, relative_stability
from evaluators.metrics.road import ROADLeRF, ROADMoRF, road_curves
from evaluators.metrics.sensitivity import AverageSensitivity, MaxSensitivity, map_distances, sensitivities
from foundation.errors import InputError, run_entry_point
from tests.support.tiny_models import tiny_conv_net, tiny_mlp

BAD = {"NaN": math.nan, "infinite": math.inf, "-inf": -math.inf}


def counted(kind: str) -> str:
    """The count of one bad value in the error, as a regex: '1 NaN value(s)' or '1 infinite value(s)'."""
    return rf"1 {'NaN' if kind == 'NaN' else 'infinite'} value\(s\)"


def poisoned(t: torch.Tensor, index: tuple, value: float) -> torch.Tensor:
    out = t.clone()
    out[index] = value
    return out


# --- the helper -------------------------------------------------------------------------------------------
def test_check_finite_names_the_unit_and_counts_by_hand():
    values = torch.zeros(4, 2, 3)
    values[2, 0, 0], values[2, 1, 2], values[3, 0, 1] = math.nan, math.inf, -math.inf
    with pytest.raises(InputError, match=r"^explainer 'gradcam': map 2 has 1 NaN value\(s\) and 1 infinite value\(s\) "
                                         r"\(2 of 4 maps not finite\); expected finite values$"):  # fmt: skip
        check_finite(values, "explainer 'gradcam'")
    with pytest.raises(InputError, match=r"^stack\[1\]: map 0 has 1 NaN value\(s\) and 1 infinite value\(s\) \(2 of"):
        check_finite(values.view(2, 2, 2, 3), "stack", unit_dims=2, stacked=True)
    check_finite(torch.zeros(0), "empty")  # nothing to refuse
    check_finite(torch.arange(3), "integers")
    check_finite(torch.full((4,), 3e38), "huge")  # finite values whose float32 sum overflows to inf


# --- normalisations ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("how", NORMALISATIONS)
def test_normalise_refuses_a_map_with_nan_or_inf(how, kind):
    maps = torch.randn(4, 5, 6, dtype=torch.float64)
    with pytest.raises(InputError, match=rf"^maps: map 3 has {counted(kind)} \(1 of 4 maps not finite\)"):
        normalise(poisoned(maps, (3, 1, 2), BAD[kind]), how)
    rows = torch.randn(2, 3, 7, dtype=torch.float64)  # tabular maps, two leading dims: map 4 = [1, 1]
    with pytest.raises(InputError, match=rf"^maps: map 4 has {counted(kind)}"):
        normalise(poisoned(rows, (1, 1, 0), BAD[kind]), how, map_dims=1)


def test_normalise_names_its_label():
    with pytest.raises(InputError, match=r"^explainer 'gradcam': map 0 has 1 NaN value\(s\)"):
        normalise(poisoned(torch.rand(2, 3, 3), (0, 0, 0), math.nan), "z", label="explainer 'gradcam'")


# --- pixel aggregators ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("name", AGGREGATORS.names(kind="pixel"))
def test_aggregate_refuses_a_stack_with_nan_or_inf(name, kind):
    stack = torch.randn(3, 4, 5, 6, dtype=torch.float64)
    params = {"k": 2} if name == "rbm" else {}
    with pytest.raises(InputError, match=rf"^stack\[1\]: map 2 has {counted(kind)} \(1 of 4 maps not finite\)"):
        aggregate(poisoned(stack, (1, 2, 0, 3), BAD[kind]), name, **params)
    with pytest.raises(InputError, match=rf"^stack\[0\]: map 1 has {counted(kind)}"):
        aggregate(poisoned(stack[..., 0], (0, 1, 4), BAD[kind]), name, map_dims=1, **params)


def test_aggregate_all_names_the_base_map():
    base = {"saliency": torch.rand(3, 4, 4), "gradcam": poisoned(torch.rand(3, 4, 4), (1, 2, 2), math.nan)}
    with pytest.raises(InputError, match=r"^base maps 'gradcam': map 1 has 1 NaN value\(s\)"):
        aggregate_all(base, "z", {"mean": {}, "ucb": {}})


# --- optimised aggregators --------------------------------------------------------------------------------
@pytest.fixture
def nan_saliency(monkeypatch):
    """The image registry's saliency with one bad value in image 2's map (set ``kind`` on it)."""
    original = EXPLAINERS["saliency"].obj
    state = {"value": math.nan}

    def saliency(model, x, target, max_batch, **options):
        return poisoned(original(model, x, target, max_batch, **options), (2, 0, 1, 1), state["value"])

    monkeypatch.setitem(EXPLAINERS._entries, "saliency", replace(EXPLAINERS["saliency"], obj=saliency))
    return state


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("method", AGGREGATORS.names(kind="optimised"))
def test_optimised_aggregation_names_the_explainer_with_nan_or_inf(method, kind, nan_saliency):
    nan_saliency["value"] = BAD[kind]
    x = torch.randn(3, 2, 5, 6, dtype=torch.float64)
    explainers = {"input_x_gradient": {}, "saliency": {}}
    with pytest.raises(InputError, match=rf"^explainer 'saliency': map 2 has {counted(kind)} \(1 of 3 maps"):
        optimised_aggregation(tiny_conv_net(), x, method, explainers)


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("method", AGGREGATORS.names(kind="optimised"))
def test_optimised_aggregation_refuses_inputs_with_nan_or_inf(method, kind):
    x = poisoned(torch.randn(3, 2, 5, 6, dtype=torch.float64), (1, 1, 0, 0), BAD[kind])
    with pytest.raises(InputError, match=rf"^inputs x: input 1 has {counted(kind)}"):
        optimised_aggregation(tiny_conv_net(), x, method, {"saliency": {}, "input_x_gradient": {}})


@pytest.mark.parametrize("kind", BAD)
def test_variance_aggregate_refuses_nan_or_inf(kind):
    maps = poisoned(torch.rand(4, 3, 5, 6, dtype=torch.float64), (2, 1, 0, 0), BAD[kind])  # (N, k, H, W)
    with pytest.raises(InputError, match=rf"^stack\[1\]: map 2 has {counted(kind)}"):
        variance_aggregate(maps, 2)


# --- fidelity metrics: maps and inputs --------------------------------------------------------------------
def _explain(v, t):
    return v.sum(1)


def _update(metric, *args, **kwargs):
    metric.update(*args, **kwargs)
    return metric.compute()


X_SHAPE, MAP_SHAPE = (3, 2, 5, 6), (3, 5, 6)
MAP_CALLS = {  # name -> call(model, x, maps) of each public function and Metric that takes maps
    "insertion_deletion_curves": lambda m, x, a: insertion_deletion_curves(m, x, a, "insertion", steps=3),
    "InsertionAUC": lambda m, x, a: _update(InsertionAUC(steps=3), m, x, a),
    "DeletionAUC": lambda m, x, a: _update(DeletionAUC(steps=3), m, x, a),
    "infidelity": lambda m, x, a: infidelity(a, subset_perturbations(m, x, n_samples=4)),
    "Infidelity": lambda m, x, a: _update(Infidelity(n_samples=4), m, x, a),
    "faithfulness_correlation": lambda m, x, a: faithfulness_correlation(a, subset_perturbations(m, x, n_samples=4)),
    "FaithfulnessCorrelation": lambda m, x, a: _update(FaithfulnessCorrelation(n_samples=4), m, x, a),
    "sensitivities": lambda m, x, a: sensitivities(_explain, x, a, n_samples=2),
    "map_distances": lambda m, x, a: map_distances(a.repeat_interleave(2, 0), a),
    "AverageSensitivity": lambda m, x, a: _update(AverageSensitivity(n_samples=2), m, x, a, explain_fn=_explain),
    "MaxSensitivity": lambda m, x, a: _update(MaxSensitivity(n_samples=2), m, x, a, explain_fn=_explain),
    "road_curves": lambda m, x, a: road_curves(m, x, a, percentages=(20, 50)),
    "ROADMoRF": lambda m, x, a: _update(ROADMoRF(percentages=(20,)), m, x, a),
    "ROADLeRF": lambda m, x, a: _update(ROADLeRF(percentages=(20,)), m, x, a),
    "relative_stability": lambda m, x, a: relative_stability(m, x, a, _explain, n_samples=2),
    "RelativeStability": lambda m, x, a: _update(RelativeStability(n_samples=2), m, x, a, explain_fn=_explain),
}
INPUT_CALLS = {name: call for name, call in MAP_CALLS.items() if name != "map_distances"}
INPUT_CALLS["subset_perturbations"] = lambda m, x, a: subset_perturbations(m, x, n_samples=4)


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("name", MAP_CALLS)
def test_metric_refuses_a_map_with_nan_or_inf(name, kind):
    x = torch.randn(X_SHAPE, dtype=torch.float64)
    maps = poisoned(torch.rand(MAP_SHAPE, dtype=torch.float64), (1, 2, 3), BAD[kind])
    with pytest.raises(InputError, match=rf"^maps: map 1 has {counted(kind)} \(1 of 3 maps not finite\)"):
        MAP_CALLS[name](tiny_conv_net(), x, maps)


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("name", INPUT_CALLS)
def test_metric_refuses_an_input_with_nan_or_inf(name, kind):
    x = poisoned(torch.randn(X_SHAPE, dtype=torch.float64), (2, 1, 0, 4), BAD[kind])
    with pytest.raises(InputError, match=rf"^inputs x: input 2 has {counted(kind)} \(1 of 3 inputs not finite\)"):
        INPUT_CALLS[name](tiny_conv_net(), x, torch.rand(MAP_SHAPE, dtype=torch.float64))


BAD_STD = (torch.zeros(2), torch.tensor([1.0, -math.inf]))  # (mean, std) per channel


def _nan_explain(v, t):
    return poisoned(v.sum(1), (1, 0, 0), math.nan)


@pytest.mark.parametrize("call, message", [
    (lambda m, x, a: sensitivities(_nan_explain, x, a, n_samples=2), r"^the maps of the noisy copies: row 1 has 1 NaN"),
    (lambda m, x, a: map_distances(poisoned(a, (1, 0, 0), math.nan), a), r"^the maps of the noisy copies: row 1 "),
    (lambda m, x, a: relative_stability(m, x, a, _nan_explain, n_samples=2),
     r"^explain_fn's maps of the perturbed inputs: row 1 has 1 NaN"),
    (lambda m, x, a: relative_stability(m, x, a, _explain, perturbed=poisoned(x[:, None], (0, 0, 0, 0, 0), math.inf)),
     r"^option perturbed: input 0 has 1 infinite value\(s\)"),
    (lambda m, x, a: insertion_deletion_curves(m, x, a, "deletion", baseline=poisoned(x[0], (0, 0, 0), math.nan)),
     r"^option baseline: input 0 has 1 NaN"),  # one input's baseline, broadcast: every input has it
    (lambda m, x, a: insertion_deletion_curves(m, x, a, "deletion", stats=BAD_STD),
     r"^option stats' std: channel 1 has 1 infinite"),
    (lambda m, x, a: subset_perturbations(m, x, n_samples=2, baseline=poisoned(x, (2, 0, 0, 0), -math.inf)),
     r"^option baseline: input 2 has 1 infinite"),
    (lambda m, x, a: auc(poisoned(torch.rand(3, 4), (2, 1), math.nan), torch.linspace(0, 1, 4)),
     r"^curves: curve 2 has 1 NaN"),
])  # fmt: skip
def test_maps_from_explain_fn_baselines_and_curves_with_nan_or_inf_are_named(call, message):
    x = torch.randn(X_SHAPE, dtype=torch.float64)
    with pytest.raises(InputError, match=message):
        call(tiny_conv_net(), x, torch.rand(MAP_SHAPE, dtype=torch.float64))


@pytest.mark.parametrize("call, message", [
    (lambda m, x, a: road_curves(m, x, a, feature_means=poisoned(torch.zeros(6), (4,), math.nan)),
     r"^option feature_means: feature 4 has 1 NaN"),
    (lambda m, x, a: insertion_deletion_curves(m, x, a, "deletion", stats=(poisoned(torch.zeros(6), (5,), math.nan),
                                                                           torch.ones(6))),
     r"^option stats' mean: feature 5 has 1 NaN"),
    (lambda m, x, a: road_curves(m, x, poisoned(a, (0, 1), math.inf), feature_means=torch.zeros(6)),
     r"^maps: map 0 has 1 infinite"),
])  # fmt: skip
def test_tabular_options_with_nan_or_inf_are_named(call, message):
    with pytest.raises(InputError, match=message):
        call(tiny_mlp(), torch.randn(3, 6, dtype=torch.float64), torch.rand(3, 6, dtype=torch.float64))


# --- fidelity metrics: a model whose output turns non-finite ----------------------------------------------
class TurnsNonFinite(nn.Module):
    """``tiny_conv_net``, whose logits are ``value`` for any input holding a value above 3:
    finite on the clean inputs (standard normal, clipped to ±2), not on perturbed ones
    that bring in larger values."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.net, self.value = tiny_conv_net(), value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.net(x)
        large = (x.flatten(1) > 3).any(1)
        return torch.where(large[:, None], torch.full_like(out, self.value), out)


OUTPUT_CALLS = {  # perturbations that bring in values above 3
    "insertion_deletion_curves": lambda m, x, a: insertion_deletion_curves(m, x, a, "insertion", steps=3,
                                                                           baseline=torch.full_like(x, 5.0)),
    "InsertionAUC": lambda m, x, a: _update(InsertionAUC(steps=3, baseline=torch.full_like(x, 5.0)), m, x, a),
    "subset_perturbations": lambda m, x, a: subset_perturbations(m, x, n_samples=4, baseline=torch.full_like(x, 5.0)),
    "Infidelity": lambda m, x, a: _update(Infidelity(n_samples=4, baseline=torch.full_like(x, 5.0)), m, x, a),
    "road_curves": lambda m, x, a: road_curves(m, x, a, percentages=(50,), noise=100.0),
    "road_curves accuracy": lambda m, x, a: road_curves(m, x, a, percentages=(50,), noise=100.0, output="accuracy"),
    "relative_stability": lambda m, x, a: relative_stability(m, x, a, _explain, n_samples=4, radius=10.0),
    "relative_stability probability": lambda m, x, a: relative_stability(m, x, a, _explain, n_samples=4, radius=10.0,
                                                                         ros_output="probability"),
}  # fmt: skip


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("name", OUTPUT_CALLS)
def test_metric_refuses_a_model_output_that_turns_nan_or_inf(name, kind):
    x = torch.randn(X_SHAPE, dtype=torch.float64).clamp(-2, 2)
    model = TurnsNonFinite(BAD[kind]).eval()
    with pytest.raises(InputError, match=r"^the model's output on the inputs scored \(clean or perturbed\): row \d+ "
                                         r"has \d+ (NaN|infinite) value\(s\)"):  # fmt: skip
        OUTPUT_CALLS[name](model, x, torch.rand(MAP_SHAPE, dtype=torch.float64))


# --- protocols: a NaN-producing explainer ends the run with one line --------------------------------------
def test_aggregation_protocol_with_a_nan_explainer_ends_with_one_line(tiny_run, tmp_path, monkeypatch, capsys):
    from tests.evaluators.protocols.test_aggregation import small_config

    original = EXPLAINERS["gradcam"].obj

    def gradcam(model, x, target, max_batch, **options):
        return poisoned(original(model, x, target, max_batch, **options), (3, 0, 4, 4), math.nan)

    monkeypatch.setitem(EXPLAINERS._entries, "gradcam", replace(EXPLAINERS["gradcam"], obj=gradcam))
    with pytest.raises(SystemExit) as stop:
        run_entry_point(evaluate.main, ["aggregation", "--config", str(small_config(tmp_path, tiny_run))])
    lines = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2, lines
    assert lines[-1].startswith("error: explainer 'gradcam': map 3 has 1 NaN value(s) (1 of 4 maps not finite)")
    assert not any(line.startswith("error") for line in lines[:-1])
    (folder,) = (tmp_path / "out").iterdir()
    assert not (folder / "maps" / "gradcam.pt").exists()  # refused before it was cached


def test_optimised_protocol_with_a_nan_explainer_ends_with_one_line(tiny_run, tmp_path, nan_saliency, capsys):
    from tests.evaluators.protocols.test_optimised_aggregation import config

    with pytest.raises(SystemExit) as stop:
        run_entry_point(evaluate.main, ["optimised", "--config", config(tmp_path, tiny_run)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2, err
    assert err[-1].startswith("error: explainer 'saliency': map 2 has 1 NaN value(s) (1 of 3 maps not finite)")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing cached: no folder


def test_aggregation_fidelity_callback_with_a_nan_explainer_raises_naming_it(monkeypatch):
    from callbacks import AggregationFidelity
    from lightning_modules import MLPClassifier

    entry = EXPLAINERS["input_x_gradient"]
    poisoned_run = lambda *args, **o: poisoned(entry.obj(*args, **o), (3, 0), math.inf)  # noqa: E731
    monkeypatch.setitem(EXPLAINERS._entries, "input_x_gradient", replace(entry, obj=poisoned_run))
    data = FinancialDataModule(dataset="german")
    callback = AggregationFidelity(explainers={"saliency": {}, "input_x_gradient": {}}, n_probe=5, at_train_end=False)
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[callback])  # fmt: skip
    with pytest.raises(InputError, match=r"^explainer 'input_x_gradient': map 3 has 1 infinite value\(s\) \(1 of 5"):
        trainer.fit(MLPClassifier(in_features=data.num_features, seed=0), datamodule=data)
