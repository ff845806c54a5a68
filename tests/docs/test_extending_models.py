"""The "Extending" explainer example (``@EXPLAINERS.register("gradient_sign")``, a function only) on
the project's model kinds: the example's code, read from whichever of docs/extending.md and
README.md holds it, runs as written; then its statements after it builds ``model`` and ``x`` run
again on an ``MLPClassifier`` (logits and probabilities), a ``PopulationMLP``, a ``ModulePopulation``
of rows and an ``ImageClassifier``, and each map is checked against autograd's gradient sign of the explained
output. Before, a model with a default class ended in "'NoneType' object is not callable"
(the spec's missing ``fixed``)."""

from __future__ import annotations

import ast
import re
import sys
import types

import pytest
import torch

from lightning_modules import ImageClassifier, MLPClassifier
from lightning_modules.module_population import ModulePopulation
from lightning_modules.population import PopulationMLP
from tests.support import ROOT

PLACES = (ROOT / "docs" / "extending.md", ROOT / "README.md")
MARK = re.compile(r"<!-- extending: explainer -->\n```python\n(.*?)\n```", re.S)


def example() -> str:
    """The marked explainer example of the first of ``PLACES`` that holds one."""
    found = [m.group(1) for path in PLACES if path.is_file() and (m := MARK.search(path.read_text()))]
    assert found, f"no '<!-- extending: explainer -->' python block in {[str(p) for p in PLACES]}"
    return found[0]


def after_model_and_inputs(code: str) -> types.CodeType:
    """The example's top-level statements after its last assignment to ``model`` or ``x``."""
    body = ast.parse(code).body
    made = [i for i, node in enumerate(body) if isinstance(node, ast.Assign)
            and {t.id for t in node.targets if isinstance(t, ast.Name)} & {"model", "x"}]  # fmt: skip
    assert made, "the example builds no model and inputs"
    return compile(ast.Module(body=body[made[-1] + 1:], type_ignores=[]), "the explainer example", "exec")


def gradient_sign_of(output, x: torch.Tensor, target: int) -> torch.Tensor:
    """The sign of the gradient of ``output``'s (N, K) column ``target`` at ``x``, input by input."""
    x = x.clone().requires_grad_(True)
    return torch.autograd.grad(output(x)[:, target].sum(), x)[0].sign()


def model_of(name: str) -> tuple:
    """Model kind ``name``, seeded: (model, inputs, its explained outputs (N, K): one per member of a
    population)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        rows, images = torch.randn(5, 4), torch.randn(5, 1, 8, 8)
        if name == "population":
            population = PopulationMLP(4, size=3, hidden=(8,), num_classes=3).eval()
            return population, rows, [population.member(i).eval() for i in range(3)]
        if name == "module_population":
            net = {"class_path": "torch.nn.Linear", "init_args": {"in_features": 4, "out_features": 3}}
            population = ModulePopulation(net, size=2, num_classes=3, inputs="rows").eval()
            return population, rows, list(population.nets)
        if name == "image":
            model = ImageClassifier(arch="small_cnn", num_classes=3, in_channels=1).eval()
            return model, images, [model]
        output = "probability" if name == "table_probability" else "logit"
        model = MLPClassifier(4, hidden=(8,), num_classes=3, explain_output=output).eval()
        return model, rows, [(lambda x: model(x).softmax(-1)) if output == "probability" else model]


MODELS = ("table", "table_probability", "population", "module_population", "image")


@pytest.fixture
def example_namespace(monkeypatch):
    """The example run as written, as a module of its own; the explainer registry restored after."""
    from evaluators.maps import EXPLAINERS

    before = dict(EXPLAINERS._entries)
    module = types.ModuleType("extending_explainer")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(example(), "the explainer example", "exec"), module.__dict__)
    yield module.__dict__
    EXPLAINERS._entries.clear()
    EXPLAINERS._entries.update(before)


@pytest.mark.parametrize("name", MODELS)
def test_the_extending_explainer_example_runs_on_each_model_kind(example_namespace, name):
    model, x, outputs = model_of(name)
    namespace = {**example_namespace, "model": model, "x": x}
    exec(after_model_and_inputs(example()), namespace)  # the example's explain and explainer_names lines
    maps = namespace["maps"]
    expected = torch.stack([gradient_sign_of(output, x, 2) for output in outputs])
    expected = expected if name.endswith("population") else expected[0]  # a population: (M, N, d)
    assert maps.shape == expected.shape and torch.equal(maps, expected) and maps.abs().sum() > 0
