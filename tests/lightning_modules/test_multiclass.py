"""Multi-class tables (K = 3): the MLP, the stacked population and the curves trained through
train.py and alone, stacked members and curves equal to the models trained alone bit for bit,
files recording K (old files read as K = 2), ensembles of K classes, explanations of a chosen
class against Captum on the single MLP input by input, the consistency protocol end to end."""

from __future__ import annotations


import pytest
import pytorch_lightning as pl
import torch
from captum import attr

import evaluate
import train
from datamodules import InputError
from evaluators.maps import EXPLAINERS, explain
from evaluators.maps import batches
from foundation.seeds import input_seeds, seeded_generators
from lightning_modules import MLPClassifier, PopulationMLP, load_population
from lightning_modules.curve_population import curves_between
from lightning_modules.curves import MLPCurve
from lightning_modules.ensembles import ENSEMBLES
from lightning_modules.population_io import save_population
from tests.support.helpers import naive_single_saliency_sa
from tests.golden.make_old_files import FILES
from tests.support.multiclass_data import BlobsDataModule

OLD_FILE = FILES / "population.pt"
DATA = "tests.support.multiclass_data.BlobsDataModule"
D, K = 4, 3


def quiet_trainer(max_epochs: int = 1) -> pl.Trainer:
    return pl.Trainer(max_epochs=max_epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, deterministic=True, accelerator="cpu")  # fmt: skip


def blobs(**options) -> BlobsDataModule:
    return BlobsDataModule(n_samples=240, n_features=D, classes=K, batch_size=16, **options)


@pytest.fixture(scope="module")
def population_run(tmp_path_factory) -> dict:
    """A population of 4 three-class MLPs trained by train.py on the blobs table (3 epochs)."""
    out = tmp_path_factory.mktemp("multiclass")
    return train.main(["--config", "configs/population.yaml", "--data", DATA, "--data.n_samples", "240",
                       "--data.batch_size", "16", "--model.size", "4", "--model.hidden", "[16, 8]",
                       "--model.lr", "0.01", "--trainer.max_epochs", "3", "--output_dir", str(out), "--log_to", "none",
                       "--trainer.enable_progress_bar", "false"])  # fmt: skip


def test_train_py_links_the_classes_and_the_population_file_records_them(population_run):
    population, payload = load_population(population_run["population"])
    assert payload["hparams"]["num_classes"] == K and population.hparams.num_classes == K
    x, y = blobs().test_tensors
    logits = population(x)
    assert logits.shape == (4, len(x), K)
    accuracy = (logits.argmax(-1) == y).float().mean(1)  # chance is 1/3
    torch.testing.assert_close(accuracy, torch.tensor(payload["member_test_acc"]))
    assert accuracy.min() > 0.6
    member = population.member(2)
    assert isinstance(member, MLPClassifier) and member.hparams.num_classes == K
    torch.testing.assert_close(member(x), logits[2])


def test_single_mlp_run_takes_the_classes_from_the_data(tmp_path):
    metrics = train.main(["--model", "MLPClassifier", "--data", DATA, "--data.n_samples", "240",
                          "--data.batch_size", "16", "--trainer.max_epochs", "2", "--output_dir", str(tmp_path),
                          "--log_to", "none", "--trainer.enable_progress_bar", "false"])  # fmt: skip
    assert metrics["model"]["num_classes"] == K
    assert metrics["test_acc"] > 0.6


def test_old_population_file_reads_as_two_classes_and_a_new_file_keeps_k(tmp_path):
    old, payload = load_population(OLD_FILE)
    assert "num_classes" not in payload["hparams"]  # written before K was recorded
    assert old.hparams.num_classes == 2 and old.member(0).hparams.num_classes == 2
    assert old(torch.zeros(1, old.hparams.in_features)).shape[-1] == 2
    three = PopulationMLP(in_features=D, seeds=[4, 9], hidden=(8,), num_classes=K)
    save_population(tmp_path / "p.pt", three, [0.5, 0.5], {})
    again, _ = load_population(tmp_path / "p.pt")
    assert again.hparams.num_classes == K
    assert all(torch.equal(a, b) for a, b in zip(again.parameters(), three.parameters()))


@pytest.mark.parametrize("num_classes", [1, 2.5])
def test_num_classes_is_checked(num_classes):
    for cls in (MLPClassifier, PopulationMLP, MLPCurve):
        with pytest.raises(InputError, match="option num_classes="):
            cls(in_features=D, num_classes=num_classes)


@pytest.mark.parametrize("loss_on", ["logits", "probabilities"])
def test_three_class_population_members_equal_models_trained_alone(loss_on):
    seeds = [0, 7, 42]
    population = PopulationMLP(in_features=D, seeds=seeds, lr=4e-3, loss_on=loss_on, num_classes=K)
    quiet_trainer(2).fit(population, datamodule=blobs())
    for i, seed in enumerate(seeds):
        alone = MLPClassifier(in_features=D, seed=seed, lr=4e-3, loss_on=loss_on, num_classes=K)
        quiet_trainer(2).fit(alone, datamodule=blobs())
        assert all(torch.equal(p, q) for p, q in zip(population.member(i).parameters(), alone.parameters()))


@pytest.mark.parametrize("mode", ["fixed", "trained"])
def test_three_class_curves_trained_in_a_stack_equal_curves_trained_alone(mode):
    population = PopulationMLP(in_features=D, seeds=[3, 5, 8, 13], lr=4e-3, num_classes=K)
    with torch.no_grad():  # end points that are not initialisations
        for p in population.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    pairs = [(0, 1), (2, 3)]
    stacked = curves_between(population, pairs, mode=mode)
    quiet_trainer().fit(stacked, datamodule=blobs())
    for i, (a, b) in enumerate(pairs):
        alone = MLPCurve(in_features=D, mode=mode, start_seed=population.seeds[a], end_seed=population.seeds[b],
                         lr=4e-3, t_seed=population.seeds[a], start_model=population.member(a),
                         end_model=population.member(b), num_classes=K)  # fmt: skip
        quiet_trainer().fit(alone, datamodule=blobs())
        ours = dict(stacked.curve(i).named_parameters())
        assert all(torch.equal(ours[name], p) for name, p in alone.named_parameters())
        x = torch.randn(5, D)
        assert alone.classifier_at(0.5)(x).shape == (5, K)


def test_three_class_ensembles_vote_average_and_predict():
    population = PopulationMLP(in_features=D, seeds=[0, 1, 2, 3], hidden=(8,), num_classes=K)
    x = torch.randn(50, D)
    members = torch.stack([population.member(i)(x) for i in range(4)])  # (4, 50, K)
    average = ENSEMBLES["average"](population, [0, 1, 2, 3])
    torch.testing.assert_close(average.probabilities(x), members.softmax(-1).mean(0))
    torch.testing.assert_close(average.predict(x), members.softmax(-1).mean(0).argmax(-1))
    majority = ENSEMBLES["majority"](population, [0, 1, 2, 3])
    votes = torch.stack([(members.argmax(-1) == c).float().mean(0) for c in range(K)], dim=-1)
    torch.testing.assert_close(majority.probabilities(x), votes)
    top = votes.max(-1, keepdim=True).values
    highest_tied = torch.stack([torch.nonzero(row == m).max() for row, m in zip(votes, top)])
    assert torch.equal(majority.predict(x), highest_tied)
    perturbed = ENSEMBLES["perturb"](population, [0, 1], n_perturb=3, sigma=0.0)
    torch.testing.assert_close(perturbed(x), members[:2].mean(0))


# --- explanations of a chosen class -----------------------------------------------------------
DETERMINISTIC = ["saliency", "integrated_gradients", "input_x_gradient", "guided_backprop", "deeplift",
                 "feature_ablation", "deepshap"]  # fmt: skip
SAMPLED = {"smoothgrad": {}, "smoothgrad_sq": {}, "vargrad": {}, "gradient_shap": {}, "lime": {"n_samples": 12},
           "kernel_shap": {"n_samples": 12}, "shapley_value_sampling": {"n_samples": 4}}  # fmt: skip
# every row method Captum has; LRP's references are Zennit's own attribution, Captum's LRP and hand
# computations with a class per input (tests/evaluators/maps/test_relevance.py)
TABULAR = sorted(m for m in EXPLAINERS.names(modality="rows") if not m.startswith("lrp_"))
SEED = 5


def captum_one(model: torch.nn.Module, xi: torch.Tensor, method: str, t: int, background: torch.Tensor):
    """Captum on the single MLP for one input xi (1, d) and its class t."""
    zero = torch.zeros_like(xi)
    calls = {
        "saliency": lambda: attr.Saliency(model).attribute(xi, target=t, abs=False),
        "integrated_gradients": lambda: attr.IntegratedGradients(model).attribute(xi, zero, target=t, n_steps=50),
        "input_x_gradient": lambda: attr.InputXGradient(model).attribute(xi, target=t),
        "guided_backprop": lambda: attr.GuidedBackprop(model).attribute(xi, target=t),
        "deeplift": lambda: attr.DeepLift(model).attribute(xi, zero, target=t),
        "feature_ablation": lambda: attr.FeatureAblation(model).attribute(xi, target=t),
        "deepshap": lambda: attr.DeepLiftShap(model).attribute(xi, background, target=t),
    }
    return calls[method]()


def captum_sampled(model: torch.nn.Module, x: torch.Tensor, method: str, target: torch.Tensor,
                   background: torch.Tensor, options: dict) -> torch.Tensor:  # fmt: skip
    """Captum on the single MLP for all inputs with one class each, drawing from the global generators."""
    if method in ("smoothgrad", "smoothgrad_sq", "vargrad"):
        return attr.NoiseTunnel(attr.Saliency(model)).attribute(
            x, nt_type=method, nt_samples=50, stdevs=options.get("stdevs", 0.15), target=target, abs=False)
    if method == "gradient_shap":
        return attr.GradientShap(model).attribute(x, background, n_samples=50, stdevs=0.0, target=target)
    cls = {"lime": attr.Lime, "kernel_shap": attr.KernelShap, "shapley_value_sampling": attr.ShapleyValueSampling}
    return cls[method](model).attribute(x, target=target, **options)


def reference(model, x, method, target, background, options) -> torch.Tensor:
    """The per-input reference: Captum input by input, a sampling method drawing from the global
    generators seeded with the input's own seed (``seeds.input_seeds``)."""
    if method in DETERMINISTIC:
        return torch.cat([captum_one(model, x[i : i + 1], method, int(target[i]), background)
                          for i in range(len(x))])  # fmt: skip
    out = []
    for i, seed in enumerate(input_seeds(SEED, None, len(x))):
        with seeded_generators(seed, x.device):
            out.append(captum_sampled(model, x[i : i + 1], method, target[i : i + 1], background, options))
    return torch.cat(out)


def registry_options(method: str, background: torch.Tensor) -> dict:
    return {**SAMPLED.get(method, {}), **({"baselines": background} if method in ("deepshap", "gradient_shap") else {})}


@pytest.fixture(scope="module")
def three_class_population() -> PopulationMLP:
    torch.manual_seed(0)
    population = PopulationMLP(in_features=D, seeds=[0, 1, 2], hidden=(16, 8), num_classes=K).eval()
    with torch.no_grad():
        for p in population.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return population


def inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(6, D, generator=g), torch.tensor([2, 0, 1, 1, 2, 0]), torch.randn(3, D, generator=g)


@pytest.mark.parametrize("method", TABULAR)
def test_mlp_explains_each_inputs_class_as_captum_does(three_class_population, method):
    model = three_class_population.member(1)
    x, labels, background = inputs()
    ours = explain(model, x, method, target=labels, seed=SEED, **registry_options(method, background))
    torch.testing.assert_close(ours, reference(model, x, method, labels, background, SAMPLED.get(method, {})),
                               rtol=1e-4, atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("method", TABULAR)
def test_population_explains_each_inputs_class_as_captum_does_on_each_member(three_class_population, method):
    population = three_class_population
    x, labels, background = inputs()
    ours = explain(population, x, method, target=labels, seed=SEED, **registry_options(method, background))
    assert ours.shape == (3, len(x), D)
    for i in range(3):  # each member's map is the member's own, with the same per-input draws
        theirs = reference(population.member(i), x, method, labels, background, SAMPLED.get(method, {}))
        torch.testing.assert_close(ours[i], theirs, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("method", ["saliency", "integrated_gradients", "input_x_gradient", "deepshap"])
def test_ensemble_in_chunks_explains_each_inputs_class_as_the_mean_of_its_members(
    three_class_population, method, monkeypatch
):
    monkeypatch.setitem(batches.ACTIVATION_FLOATS_PER_CHUNK, "cpu", 256 * 24)  # a chunk per member
    population = three_class_population
    x, labels, background = inputs()
    ensemble = ENSEMBLES["average"](population, [0, 1, 2])
    ours = explain(ensemble, x, method, target=labels, **registry_options(method, background))
    members = torch.stack([reference(population.member(i), x, method, labels, background, {}) for i in range(3)])
    torch.testing.assert_close(ours, members.mean(0), rtol=1e-4, atol=1e-6)


def test_default_class_is_the_prediction_of_the_model_or_of_the_population_mean(three_class_population):
    population = three_class_population
    x, _, _ = inputs()
    member = population.member(0)
    predicted = member(x).argmax(-1)
    torch.testing.assert_close(explain(member, x, "saliency"), reference(member, x, "saliency", predicted, None, {}))
    mean_prediction = torch.stack([population.member(i)(x).softmax(-1) for i in range(3)]).mean(0).argmax(-1)
    assert len(set(mean_prediction.tolist())) > 1  # the test sees more than one class
    ours = explain(population, x, "saliency")
    for i in range(3):
        theirs = reference(population.member(i), x, "saliency", mean_prediction, None, {})
        torch.testing.assert_close(ours[i], theirs)


@pytest.mark.parametrize("target", ["labels", 0])
def test_binary_mlp_takes_labels_or_an_int(target):
    model = MLPClassifier(in_features=D, hidden=(8,), seed=3).eval()
    x, labels, _ = inputs()
    labels = labels.clamp(max=1) if target == "labels" else torch.zeros(len(x), dtype=torch.long)
    for method in ("saliency", "deeplift"):
        ours = explain(model, x, method, target=labels if target == "labels" else target)
        torch.testing.assert_close(ours, reference(model, x, method, labels, None, {}), rtol=1e-5, atol=1e-6)
    assert torch.equal(explain(model, x, "saliency"), explain(model, x, "saliency", target=1))  # default: class 1


@pytest.mark.parametrize(("target", "message"), [(3, r"expected classes 0 \.\. 2"), (-1, "expected classes"),
                                                 (torch.zeros(6), "expected None")])  # fmt: skip
def test_a_bad_target_is_named(three_class_population, target, message):
    x, _, _ = inputs()
    with pytest.raises(InputError, match=message):
        explain(three_class_population, x, "saliency", target=target)


# --- the consistency protocol --------------------------------------------------------------------
def test_consistency_protocol_on_a_three_class_population(population_run, tmp_path):
    """End to end on every strategy; the single-model SA against a naive recomputation, each
    point explained for the class the whole population predicts."""
    config = tmp_path / "consistency.yaml"
    config.write_text(
        f"population: {population_run['population']}\nmethods: [saliency, deepshap]\nn_models: [2]\nn_sets: 2\n"
        "n_points: 12\nn_points_deepshap: 4\nn_background: 5\nk: 2\nn_t: 2\nn_perturb: 2\nsigma: 0.1\n"
        f"curve_epochs: 1\ndevice: cpu\noutput_dir: {tmp_path / 'c'}\n"
    )  # fmt: skip
    summary = evaluate.main(["consistency", "--config", str(config)])
    by = {(r["strategy"], r["method"], r["metric"]): r for r in summary["rows"]}
    assert {s for s, _, _ in by} == {"single", "average", "majority", "perturb", "connect", "combine"}
    assert all(0.0 <= r["mean"] <= 1.0 and r["test_acc"] > 0.5 for r in summary["rows"])
    population, _ = load_population(population_run["population"])
    x = blobs().test_tensors[0][:12]
    probabilities = torch.stack([population.member(i)(x).softmax(-1) for i in range(4)]).mean(0)
    target = probabilities.argmax(-1)
    naive = naive_single_saliency_sa(population, x, target)
    assert by[("single", "saliency", "sa")]["mean"] == pytest.approx(naive, abs=1e-6)


def test_describe_gives_each_class_its_rows():
    """A K-class table's description counts each class (no positive rate, which two classes
    only have) and the test split's majority rate, as counted here by hand."""
    dm = blobs()
    info, a = dm.describe(), dm._arrays
    y = torch.cat([a["y_train"], a["y_test"]]).tolist()
    assert "positive_rate" not in info and info["classes"] == [y.count(k) for k in range(K)]
    test = a["y_test"].tolist()
    assert info["majority_rate_test"] == round(max(test.count(k) for k in range(K)) / len(test), 4)
