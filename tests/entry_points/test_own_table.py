"""A user's own table, end to end with no code of theirs: a binary and a three-class CSV file
made here go through train.py's population and single run (CSVDataModule) and evaluate.py's
consistency (with its ensembles), aggregation, optimised and ROAR protocols, each on the
generic configs configs/{consistency,aggregation,optimised,roar}/table.yaml at tiny sizes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from sklearn.model_selection import train_test_split

import evaluate
import train
from lightning_modules import MLPClassifier, load_population
from tests.support.helpers import naive_single_saliency_sa

STRATEGIES = {"single", "average", "majority", "perturb", "connect", "combine"}


def write_table(path: Path, classes: int, n: int = 90, seed: int = 0) -> str:
    """``n`` rows: two informative numeric columns, a noise column and a text category; the
    target ``y`` is the class of the first column's sign (binary) or tercile (three classes)."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.normal(size=n)
    cuts = np.quantile(a + 0.3 * b, np.linspace(0, 1, classes + 1)[1:-1])
    frame = pd.DataFrame({"a": a.round(4), "b": b.round(4), "noise": rng.normal(size=n).round(4),
                          "shop": rng.choice(["north", "south"], n),
                          "y": np.searchsorted(cuts, a + 0.3 * b)})  # fmt: skip
    frame.to_csv(path, index=False)
    return str(path)


def data_args(path: str) -> list[str]:
    return ["--data", "CSVDataModule", "--data.path", path, "--data.target", "y", "--data.batch_size", "16"]


@pytest.fixture(scope="module", params=[2, 3], ids=["binary", "three-class"])
def own_table(request, tmp_path_factory) -> dict:
    """The table, its population of 4 (train.py --config configs/population.yaml) and one MLP run."""
    out = tmp_path_factory.mktemp(f"own{request.param}")
    path = write_table(out / f"own{request.param}.csv", request.param)
    common = ["--model.hidden", "[8]", "--trainer.max_epochs", "2", "--log_to", "none",
              "--trainer.enable_progress_bar", "false", "--output_dir", str(out / "runs")]  # fmt: skip
    population = train.main(["--config", "configs/population.yaml", *data_args(path), "--model.size", "4",
                             "--model.lr", "0.01", *common])  # fmt: skip
    single = train.main([*data_args(path), *common, "--run_name", "mlp"])
    return {"path": path, "classes": request.param, "out": out, "population": population["population"],
            "run": single["run_dir"], "test_acc": single["test_acc"]}  # fmt: skip


def test_population_of_a_csv_through_the_consistency_protocol_and_its_ensembles(own_table):
    """Every strategy of the generic table config, Watson's C included; the single-model SA
    against a naive recomputation of each point's saliency map."""
    out = own_table["out"]
    summary = evaluate.main(["consistency", "--config", "configs/consistency/table.yaml",
                             "--population", own_table["population"], "--n_sets", "2",
                             "--output_dir", str(out / "consistency"), "--set", "n_models=[2]",
                             "--set", "methods=[saliency, smoothgrad]", "--set", "n_points=12",
                             "--set", "n_points_smoothgrad=4", "--set", "smoothgrad_samples=2",
                             "--set", "k=2", "--set", "n_t=2", "--set", "n_perturb=2", "--set", "curve_epochs=1",
                             "--set", "device=cpu"])  # fmt: skip
    by = {(r["strategy"], r["method"], r["metric"]): r for r in summary["rows"]}
    assert {s for s, _, _ in by} == STRATEGIES
    assert {m for _, _, m in by} >= {"sa", "watson_c"}
    assert all(0.0 <= r["mean"] <= 1.0 for r in summary["rows"])
    population, _ = load_population(own_table["population"])
    dm = population_data(own_table)
    x = dm.test_tensors[0][:12]
    with torch.no_grad():
        predicted = torch.stack([population.member(i)(x).softmax(-1) for i in range(4)]).mean(0).argmax(-1)
    # binary: the positive class (Ley et al.); K classes: the class the population predicts
    target = predicted if own_table["classes"] > 2 else torch.ones(12, dtype=torch.long)
    naive = naive_single_saliency_sa(population, x, target)
    assert by[("single", "saliency", "sa")]["mean"] == pytest.approx(naive, abs=1e-6)


def population_data(own_table):
    from lightning_modules.population_io import population_datamodule, read_population_file

    dm = population_datamodule(read_population_file(own_table["population"]))
    dm.setup("test")
    return dm


def test_single_run_accuracy_by_hand_from_the_saved_transform(own_table):
    """The run's test accuracy recomputed from the CSV alone: sklearn's stratified split (seed 0),
    the one-hot columns and the standardisation saved in its config.yaml, the checkpoint's MLP."""
    run = Path(own_table["run"])
    fitted = yaml.safe_load((run / "config.yaml").read_text())["data"]["init_args"]["fitted"]
    frame = pd.read_csv(own_table["path"])
    assert fitted["feature_names"] == ["a", "b", "noise", "shop=north", "shop=south"]
    raw = np.column_stack([frame.a, frame.b, frame.noise, frame.shop == "north", frame.shop == "south"]).astype(float)
    _, test = train_test_split(np.arange(len(frame)), test_size=0.2, random_state=0, stratify=frame.y)
    x = torch.tensor((raw[test] - np.array(fitted["mean"])) / np.array(fitted["std"]), dtype=torch.float32)
    model = MLPClassifier.load_from_checkpoint(run / "checkpoints" / "last.ckpt", weights_only=True).eval()
    assert model.hparams.num_classes == own_table["classes"] == len(fitted["classes"])
    with torch.no_grad():
        accuracy = (model(x).argmax(-1).numpy() == frame.y.to_numpy()[test]).mean()
    assert accuracy == pytest.approx(own_table["test_acc"], abs=1e-6)


def test_fidelity_of_the_explainers_on_a_csv_run(own_table):
    """Aggregation (Mahlau & Nolde) and optimised aggregation (Decker et al.) on the generic configs."""
    out, run = own_table["out"], own_table["run"]
    summary = evaluate.main(["aggregation", "--config", "configs/aggregation/table.yaml", "--run", run,
                             "--output_dir", str(out / "agg"), "--set", "n_inputs=6", "--set", "n_baselines=5",
                             "--set", "explainers={saliency: {}, integrated_gradients: {baselines: mean}}",
                             "--set", "device=cpu"])  # fmt: skip
    assert summary["n_inputs"] == 6 and len(summary["rows"]) > 2
    optimised = evaluate.main(["optimised", "--config", "configs/optimised/table.yaml", "--run", run,
                               "--output_dir", str(out / "opt"), "--set", "n_inputs=4",
                               "--set", "explainers={saliency: {}, input_x_gradient: {}}", "--set", "m_agg=2",
                               "--set", "m_eval=4", "--set", "m_sens=2", "--set", "stability_samples=2",
                               "--set", "stability_layer=net.2",
                               "--set", "device=cpu"])  # fmt: skip
    assert optimised["n_inputs"] == 4 and set(optimised["explainers"]) == {"saliency", "input_x_gradient"}


def test_roar_grid_on_a_csv_run(own_table):
    """2 estimators x 2 fractions x K = 1 on the generic ROAR config; with nothing removed and no
    retraining the accuracy is the run's own test accuracy."""
    out, run = own_table["out"], own_table["run"]
    summary = evaluate.main(["roar", "--config", "configs/roar/table.yaml", "--run", run,
                             "--output_dir", str(out / "roar"), "--set", "estimators={saliency: {}, random: {}}",
                             "--set", "fractions=[0.0, 0.5]", "--set", "retrainings=1",
                             "--set", "trainer.max_epochs=1", "--set", "log_to=none"])  # fmt: skip
    rows = {(r["estimator"], r["fraction"]): r for r in summary["rows"]}
    assert set(rows) == {(e, f) for e in ("saliency", "random") for f in (0.0, 0.5)}
    assert all(r["k"] == 1 for r in rows.values())
    assert rows[("saliency", 0.0)]["no_retrain_acc"] == pytest.approx(own_table["test_acc"], abs=1e-6)
