"""The "Extending" examples (docs/extending.md) run as written, each as a module of its own in a fresh
folder, the registries restored afterwards (what an example registers, no other test sees);
then the behaviour their prose promises is checked against an independent reference: a
float64 Jacobian, scikit-learn's own counts, the accuracies Lightning's test loop stored in
the population file."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import sys
import types
from pathlib import Path

import pytest
from tests.support import ROOT

PAGE = ROOT / "docs" / "extending.md"
EXAMPLES = ("explainer", "dataset", "protocol", "metric", "aggregator")
MARK = re.compile(r"<!-- extending: (\w+) -->\n```python\n(.*?)\n```", re.S)


def examples() -> dict[str, str]:
    """The page's marked examples: name -> code."""
    return dict(MARK.findall(PAGE.read_text()))


def check_explainer(ns: dict) -> None:
    import torch

    from evaluators.maps import explain, explainer_names

    model, x = ns["model"], ns["x"]
    reference = model.double()
    jacobian = torch.stack([torch.autograd.functional.jacobian(reference, x[i : i + 1].double())[0, :, 0]
                            for i in range(len(x))])  # (N, K, d): d logit_k / d x_i, row by row  # fmt: skip
    assert ns["maps"].shape == x.shape and ns["maps"].abs().sum() > 0
    assert torch.equal(ns["maps"].double(), jacobian[:, 2].sign())
    predicted = reference(x.double()).argmax(1)
    assert torch.equal(explain(model, x.double(), "gradient_sign"), jacobian[torch.arange(len(x)), predicted].sign())
    assert "gradient_sign" in explainer_names(model, x)
    images = torch.randn(2, 1, 3, 3, dtype=torch.float64)  # takes="any": an image model too
    conv = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten()).double()
    weight = conv[0].weight.detach()
    assert torch.equal(explain(conv, images, "gradient_sign", target=1), weight[1:2].sign().expand(2, 1, 3, 3))


def check_dataset(ns: dict) -> None:
    import numpy as np
    from sklearn.datasets import load_breast_cancer

    truth = load_breast_cancer()
    data = ns["FinancialDataModule"]("cancer", data_dir="my_data")
    described = data.describe()
    assert (described["rows"], described["features"]) == truth.data.shape == (569, 30)
    assert described["positive_rate"] == round(truth.target.mean(), 4)
    x_train, y_train = data.train_tensors
    assert len(x_train) == 455 and np.allclose(x_train.double().mean(0), 0, atol=1e-5)
    assert np.allclose(x_train.double().std(0, unbiased=False), 1, atol=1e-5)
    assert data.feature_names == list(truth.feature_names)
    metrics = ns["metrics"]
    assert metrics["data"] == described and metrics["test_acc"] > 0.9  # trained: the majority class gives 0.63
    assert len(list(Path("runs/cancer").glob("*/metrics.json"))) == 1


def check_protocol(ns: dict) -> None:
    import numpy as np
    import torch

    import evaluate

    help_text = io.StringIO()
    with contextlib.redirect_stdout(help_text), pytest.raises(SystemExit):
        evaluate.main(["--help"])
    assert re.search(r"accuracy\s+each member's test accuracy", help_text.getvalue())
    stored = torch.load("runs/full/german/population-1000/population.pt", weights_only=True)["member_test_acc"]
    assert len(ns["summary"]["accuracy"]) == len(stored) == 8
    assert np.allclose(ns["summary"]["accuracy"], stored, rtol=0, atol=1e-6)  # Lightning's test loop, in float32
    (report,) = Path("runs/accuracy").glob("german-*/accuracy.json")
    assert json.loads(report.read_text()) == ns["summary"]


def check_metric(ns: dict) -> None:
    import torch

    from evaluators.metrics.registry import score

    model, x = ns["model"], ns["x"]
    weight, bias = model.weight.detach().double(), model.bias.detach().double()
    target = (x.double() @ weight.T + bias).argmax(1)  # the predicted class
    top = weight[target].abs().argmax(1)  # a linear model's saliency map is its target's weight row
    drop = weight[target, top] * x.double()[torch.arange(len(x)), top]  # the logit loses w_tj x_j
    assert torch.allclose(ns["drops"].double(), drop, atol=1e-6)
    assert torch.allclose(score("top_drop", model, x, weight[target].float()).double(), drop, atol=1e-6)
    metric = ns["TopFeatureDrop"]()
    for part in (slice(0, 2), slice(2, 6)):
        metric.update(model, x[part], weight[target[part]].float())
    assert torch.allclose(metric.compute(), drop.mean(), atol=1e-6)


def check_aggregator(ns: dict) -> None:
    import numpy as np
    import torch

    from callbacks import AggregationFidelity
    from foundation.errors import InputError
    from evaluators.aggregators.pixel_aggregators import aggregate
    from evaluators.aggregators.registry import AGGREGATORS
    from evaluators.protocols.roar.estimators import estimator_names

    stack = ns["stack"].double().numpy()
    assert np.allclose(ns["merged"].numpy(), np.sort(stack, axis=0)[1:4].mean(0), atol=1e-6)
    assert torch.equal(aggregate(ns["stack"], "trimmed_mean", trim=1), ns["merged"])
    with pytest.raises(InputError, match="trim"):
        aggregate(ns["stack"], "trimmed_mean", cut=1)
    with pytest.raises(InputError, match="NaN"):
        aggregate(ns["stack"].index_put((torch.tensor(0),), torch.tensor(float("nan"))), "trimmed_mean")
    assert AGGREGATORS["trimmed_mean"].obj is ns["trimmed_mean"] and dict(AGGREGATORS["trimmed_mean"].defaults) == {
        "trim": 1}
    assert "trimmed_mean" in AGGREGATORS.names(kind="pixel")
    assert "agg:trimmed_mean" in estimator_names(torch.nn.Sequential(torch.nn.Linear(4, 2)), torch.zeros(3, 4))
    assert AggregationFidelity(aggregators={"trimmed_mean": {"trim": 1}}).aggregators == {"trimmed_mean": {"trim": 1}}


CHECKS = {"explainer": check_explainer, "dataset": check_dataset, "protocol": check_protocol, "metric": check_metric,
          "aggregator": check_aggregator}


def test_readme_marks_each_example_once():
    found = MARK.findall(PAGE.read_text())
    assert sorted(name for name, _ in found) == sorted(EXAMPLES)


@pytest.fixture
def registries(monkeypatch):
    """Every registry as it was before the test, restored after it."""
    from datamodules.specs import DATASETS
    from evaluators.aggregators.registry import AGGREGATORS
    from evaluators.maps import EXPLAINERS
    from evaluators.metrics.registry import METRICS
    from evaluators.protocols.registry import PROTOCOLS
    from foundation.registry import Registry

    plain = []
    for registry in (EXPLAINERS, DATASETS, PROTOCOLS, METRICS, AGGREGATORS):
        if isinstance(registry, Registry):  # a copy of its entries during the test, its own restored after it
            monkeypatch.setattr(registry, "_entries", dict(registry._entries))
        else:  # a plain dict
            plain.append((registry, dict(registry)))
    yield
    for registry, before in plain:
        registry.clear()
        registry.update(before)


@pytest.mark.parametrize("name", EXAMPLES)
def test_readme_example_runs(name, tmp_path, monkeypatch, registries, request):
    if name == "protocol":  # the population file the example names, where the README's commands put it
        population = tmp_path / "runs/full/german/population-1000/population.pt"
        population.parent.mkdir(parents=True)
        shutil.copy(request.getfixturevalue("small_population"), population)
    monkeypatch.chdir(tmp_path)
    module = types.ModuleType(f"readme_{name}")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # a script's classes need it (dataclasses look it up)
    exec(compile(examples()[name], f"docs/extending.md ({name} example)", "exec"), module.__dict__)
    CHECKS[name](module.__dict__)


# --- a metric and an aggregator registered at run time, found through evaluate.py's options and the protocols --
def test_a_metric_registered_at_run_time_is_an_optimised_column_and_a_callback_metric(tiny_run, tmp_path, monkeypatch):
    import torch

    import evaluate
    from callbacks import AggregationFidelity
    from evaluators.aggregators.optimised_aggregators import explainer_maps
    from evaluators.inputs.runs import load_run
    from evaluators.metrics.base import MeanOverInputs
    from evaluators.metrics.registry import METRICS
    from foundation.errors import InputError
    from lightning_modules.interface import default_classes

    monkeypatch.setattr(METRICS, "_entries", dict(METRICS._entries))

    def peak(maps):
        """Per input: the largest absolute attribution."""
        return maps.flatten(1).abs().amax(1)

    @METRICS.register("toy_peak", needs=("maps",), higher_is_better=False, function=peak)
    class Peak(MeanOverInputs):
        higher_is_better = False

        def __init__(self, **kwargs):
            super().__init__({}, **kwargs)

        def scores(self, model, x, maps, target, explain_fn):
            return peak(maps)

    explainers = {"saliency": {}, "input_x_gradient": {}}
    cfg = {"run": str(tiny_run), "n_inputs": 3, "explainers": explainers, "aggregators": ["agg_mean"], "m_agg": 4,
           "m_eval": 6, "m_sens": 3, "stability_samples": 4, "stability_radius": 0.2, "stability_layer": "net.fc",
           "log_to": "none", "device": "cpu", "output_dir": str(tmp_path / "out")}  # fmt: skip
    (tmp_path / "optimised.yaml").write_text(json.dumps(cfg))
    command = ["optimised", "--config", str(tmp_path / "optimised.yaml")]
    refused = r"--map_metrics: \['nope'\]: expected .*'sparseness', 'complexity', 'toy_peak'"
    with pytest.raises(InputError, match=refused):
        evaluate.main([*command, "--map_metrics", "nope"])
    summary = evaluate.main([*command, "--map_metrics", "toy_peak"])
    model, data, _ = load_run(tiny_run)
    data.setup("test")
    x, _ = data.probe(3, "test")
    stack = explainer_maps(model, x, default_classes(model, x), explainers)  # the protocol's maps, made again
    for row, maps in {"saliency": stack[:, 0], "input_x_gradient": stack[:, 1], "agg_mean": stack.mean(1)}.items():
        expected = maps.flatten(1).abs().amax(1).mean().item()  # by hand: each map's largest |value|, averaged
        assert summary["rows"][row]["toy_peak"]["mean"] == pytest.approx(expected, rel=1e-5)
    (folder,) = (tmp_path / "out").iterdir()
    assert "| toy_peak ↓ |" in (folder / "table.md").read_text()  # the direction declared at registration
    assert AggregationFidelity(metrics=("insertion", "toy_peak")).metrics == ("insertion", "toy_peak")
    assert torch.equal(Peak().scores(None, None, stack[:, 0], None, None), peak(stack[:, 0]))


def test_an_aggregator_registered_at_run_time_is_an_aggregation_row_by_the_cli(tiny_run, tmp_path, monkeypatch):
    import evaluate
    from evaluators.aggregators.registry import AGGREGATORS
    from foundation.errors import InputError

    monkeypatch.setattr(AGGREGATORS, "_entries", dict(AGGREGATORS._entries))

    @AGGREGATORS.register("toy_max", kind="pixel", needs=("maps",))
    def toy_max(stack, map_dims=2):
        """Per pixel: the largest of the k normalised values."""
        return stack.amax(0)

    cfg = {"run": str(tiny_run), "n_inputs": 4, "explainers": {"saliency": {}, "gradcam": {}},
           "aggregators": {"mean": {}}, "normalisations": ["z"], "sweeps": {}, "steps": 4, "log_to": "none",
           "device": "cpu", "output_dir": str(tmp_path / "out"), "n_grid": 2}  # fmt: skip
    (tmp_path / "agg.yaml").write_text(json.dumps(cfg))
    command = ["aggregation", "--config", str(tmp_path / "agg.yaml")]
    with pytest.raises(InputError, match=r"--aggregators: \['nope'\]: expected .*'rbm', 'toy_max'\]"):
        evaluate.main([*command, "--aggregators", "mean,nope"])
    summary = evaluate.main([*command, "--aggregators", "mean,toy_max"])
    assert summary["config"]["aggregators"] == {"mean": {}, "toy_max": {}}
    assert {"agg/mean", "agg/toy_max"} <= set(summary["rows"])
    assert summary["rows"]["agg/toy_max"] != summary["rows"]["agg/mean"]  # a map of its own, scored
