"""A population of a user's own network on a table (issue 30): trained by train.py member by member
(``ModulePopulation``) or assembled from K of the user's Classifier runs, read by the consistency
protocol without a --config (the generic table config) with its ensembles, curves and Watson's C;
the protocols that need stacked MLPs say why they refuse it; train.py's defaults for a table."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

import evaluate
import train
from foundation.errors import InputError
from evaluators.inputs.assemble import main as assemble_main
from evaluators.inputs.runs import load_run
from evaluators.protocols.population_sets import disjoint_sets
from lightning_modules import Classifier, load_population
from lightning_modules.population_io import population_datamodule, read_population_file
from tests.support.helpers import naive_single_saliency_sa
from tests.entry_points.test_own_table import data_args, write_table

NET = ["--model.net", "tests.support.user_nets.TableNet", "--model.net.hidden", "6"]
QUIET = ["--trainer.max_epochs", "1", "--log_to", "none", "--trainer.enable_progress_bar", "false",
         "--trainer.enable_model_summary", "false"]  # fmt: skip
SMALL = ["--n_sets", "2", "--set", "n_models=[2]", "--set", "methods=[saliency, smoothgrad]", "--set", "n_points=10",
         "--set", "n_points_smoothgrad=3", "--set", "smoothgrad_samples=2", "--set", "k=2", "--set", "n_t=2",
         "--set", "n_perturb=2", "--set", "curve_epochs=1", "--set", "device=cpu"]  # fmt: skip


@pytest.fixture(scope="module", params=[2, 3], ids=["binary", "three-class"])
def network_population(request, tmp_path_factory) -> dict:
    """A CSV table and a ModulePopulation of 4 TableNets trained on it by train.py (1 epoch)."""
    out = tmp_path_factory.mktemp(f"netpop{request.param}")
    path = write_table(out / f"t{request.param}.csv", request.param, n=60)
    metrics = train.main([*data_args(path), "--model", "lightning_modules.ModulePopulation", *NET, "--model.size", "4",
                          *QUIET, "--output_dir", str(out / "runs"), "--run_name", "pop"])  # fmt: skip
    return {"path": path, "out": out, "classes": request.param, "metrics": metrics,
            "population": metrics["population"]}  # fmt: skip


def test_train_py_trains_each_member_as_a_classifier_alone_from_its_seed(network_population):
    """Member i equals, bit for bit, ``Classifier(net=<config>, seed=i)`` trained alone on the same batches with
    the same optimiser (Adam, the table defaults' lr 4e-3), and its saved test accuracy is that model's."""
    population, payload = load_population(network_population["population"])
    assert payload["hparams"]["inputs"] == "rows" and payload["hparams"]["num_classes"] == network_population["classes"]
    data = population_datamodule(read_population_file(network_population["population"]))
    config = payload["hparams"]["net"]
    assert config["init_args"]["num_classes"] == network_population["classes"]  # from the data, as for Classifier
    for i in (0, 3):
        alone = Classifier(net=config, seed=i, lr=4e-3)
        trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, accelerator="cpu", deterministic=True)  # fmt: skip
        trainer.fit(alone, datamodule=data)
        for (name, p), q in zip(alone.net.named_parameters(), population.nets[i].parameters()):
            assert torch.equal(q, p), name  # bit for bit
        x, y = data.test_tensors
        with torch.no_grad():
            accuracy = (alone.net(x).argmax(-1) == y).double().mean().item()
        assert payload["member_test_acc"][i] == pytest.approx(accuracy, abs=1e-6)


def test_consistency_without_config_on_a_population_of_networks(network_population):
    """`evaluate.py consistency --population <run>/population.pt` takes configs/consistency/table.yaml:
    every strategy, Watson's C; single-model SA against a hand recomputation; the average ensemble's
    saliency is the mean of its members' gradients of the explained class (a binary table's class 1)."""
    out = network_population["out"]
    summary = evaluate.main(["consistency", "--population", network_population["population"],
                             "--output_dir", str(out / "c"), *SMALL])  # fmt: skip
    by = {(r["strategy"], r["method"], r["metric"]): r for r in summary["rows"]}
    assert {s for s, _, _ in by} == {"single", "average", "majority", "perturb", "connect", "combine"}
    assert {m for _, _, m in by} >= {"sa", "ssa", "cdc_d", "watson_c"}
    population, _ = load_population(network_population["population"])
    data = population_datamodule(read_population_file(network_population["population"]))
    x, y = (t[:10] for t in data.test_tensors)
    with torch.no_grad():
        predicted = population(x).softmax(-1).mean(0).argmax(-1)
    target = predicted if network_population["classes"] > 2 else torch.ones(10, dtype=torch.long)
    assert by[("single", "saliency", "sa")]["mean"] == pytest.approx(naive_single_saliency_sa(population, x, target))
    (report,) = (out / "c").iterdir()
    saved = torch.load(report / "sets" / "n2" / "average" / "set-000.pt", weights_only=True)
    members = disjoint_sets(4, 2, 2, 0)[0]
    xi = x.clone().requires_grad_(True)
    mean_logit = torch.stack([population.nets[m](xi).gather(1, target.view(-1, 1))[:, 0] for m in members]).mean(0)
    by_hand = torch.autograd.grad(mean_logit.sum(), xi)[0]
    torch.testing.assert_close(saved["explanations"]["saliency"], by_hand, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        average = torch.stack([population.nets[m](data.test_tensors[0]).softmax(-1) for m in members]).mean(0)
    assert saved["accuracy"] == pytest.approx((average.argmax(-1) == data.test_tensors[1]).double().mean().item())


def test_the_mlp_only_protocols_say_why_they_refuse_it(network_population):
    for command in ("landscape", "sigma"):
        with pytest.raises(InputError, match="holds a tabular network population; expected a tabular population: "
                                             "it (retrains|perturbs)"):  # fmt: skip
            evaluate.main([command, "--config", f"configs/{command}/german.yaml",
                           "--population", network_population["population"]])  # fmt: skip
    with pytest.raises(InputError, match="curve_mode='trained'; a population of networks takes 'fixed'"):
        evaluate.main(["consistency", "--population", network_population["population"], *SMALL,
                       "--output_dir", str(network_population["out"] / "c2"), "--set", "curve_mode=trained"])
    assert not (network_population["out"] / "c2").exists()  # nothing left behind


def test_a_population_assembled_from_the_user_s_classifier_runs_on_a_table(tmp_path):
    """Two Classifier runs of a TableNet (seeds 0, 1) -> one population file whose members give
    the runs' logits, read by the consistency protocol without a --config."""
    path = write_table(tmp_path / "t.csv", 2, n=60)
    runs = []
    for seed in (0, 1):
        metrics = train.main([*data_args(path), "--model", "lightning_modules.Classifier", *NET, *QUIET,
                              "--seed_everything", str(seed), "--output_dir", str(tmp_path / "runs"),
                              "--run_name", f"seed{seed}"])  # fmt: skip
        runs.append(Path(metrics["run_dir"]))
    pop = tmp_path / "pop.pt"
    summary = assemble_main(["--out", str(pop), *map(str, runs)])
    population, payload = load_population(pop)
    assert payload["hparams"]["inputs"] == "rows"
    for i, run in enumerate(runs):
        model, data, _ = load_run(run)
        x, y = data.test_tensors
        with torch.no_grad():
            torch.testing.assert_close(population.nets[i](x), model.net(x), rtol=0, atol=0)
            assert summary["member_test_acc"][i] == pytest.approx((model.net(x).argmax(-1) == y).double().mean().item())
    report = evaluate.main(["consistency", "--population", str(pop), "--output_dir", str(tmp_path / "c"), *SMALL,
                            "--set", "n_models=[1]", "--set", "strategies=[single, average, perturb]"])  # fmt: skip
    assert {r["strategy"] for r in report["rows"]} == {"single", "average", "perturb"}


def test_consistency_without_config_or_population_says_what_it_needs():
    with pytest.raises(InputError, match="none of --config, --resume, --population given; .*configs/consistency/table"):
        evaluate.main(["consistency"])


def test_a_table_run_without_config_takes_and_prints_the_table_defaults(tmp_path, capsys):
    """configs/table.yaml, not german.yaml, lies beneath a CSVDataModule command; the run's values printed."""
    path = write_table(tmp_path / "t.csv", 2, n=40)
    assert train.default_configs(["--data", "CSVDataModule"])[1].endswith("configs/table.yaml")
    assert train.default_configs(["--config", "configs/adult.yaml"])[1].endswith("configs/german.yaml")
    train.main(["--data", "CSVDataModule", "--data.path", path, "--data.target", "y", *QUIET,
                "--output_dir", str(tmp_path / "runs"), "--run_name", "mlp"])  # fmt: skip
    printed = capsys.readouterr().out
    assert "defaults: configs/defaults.yaml and configs/table.yaml" in printed
    assert "this run: batch size 32, learning rate 0.004, epochs 1" in printed


def test_an_ensemble_of_the_networks_explains_the_table_s_class_and_output(network_population):
    """``build_ensemble`` over a table's ModulePopulation gives a model of the table contract: by
    default the positive class (binary) or the population-predicted class, of the members' mean
    probability when ``explain_output`` is ``probability`` (autograd by hand as the reference)."""
    from evaluators.maps import explain
    from lightning_modules.ensembles import build_ensemble

    population, _ = load_population(network_population["population"])
    population.hparams.explain_output = "probability"
    data = population_datamodule(read_population_file(network_population["population"]))
    x = data.test_tensors[0][:6]
    ensemble = build_ensemble(population, "perturb", [1, 2], n_perturb=2, sigma=0.0)
    with torch.no_grad():
        predicted = ensemble.probabilities(x).argmax(-1)
    target = predicted if network_population["classes"] > 2 else torch.ones(6, dtype=torch.long)
    xi = x.clone().requires_grad_(True)
    mean = torch.stack([population.nets[m](xi).softmax(-1).gather(1, target.view(-1, 1))[:, 0] for m in (1, 2)])
    by_hand = torch.autograd.grad(mean.mean(0).sum(), xi)[0]
    torch.testing.assert_close(explain(ensemble, x, "saliency"), by_hand, rtol=1e-5, atol=1e-7)


def test_a_curve_through_networks_with_batchnorm_takes_the_training_rows_statistics(tmp_path):
    """``connect`` over TableNets with BatchNorm1d: at t = 0 (one model per curve, evenly spaced) the
    curve's network is member a's weights with BatchNorm's running mean and (unbiased) variance of
    the training rows' first-layer outputs, computed here by hand."""
    path = write_table(tmp_path / "t.csv", 2, n=60)
    metrics = train.main([*data_args(path), "--model", "lightning_modules.ModulePopulation", "--model.net",
                          "tests.support.user_nets.TableNetBN", "--model.size", "4", *QUIET, "--output_dir",
                          str(tmp_path / "runs"), "--run_name", "pop"])  # fmt: skip
    evaluate.main(["consistency", "--population", metrics["population"], "--output_dir", str(tmp_path / "c"), *SMALL,
                   "--set", "strategies=[connect]", "--set", "methods=[saliency]", "--set", "n_t=1",
                   "--set", "t_sampling=even"])  # fmt: skip
    population, _ = load_population(metrics["population"])
    data = population_datamodule(read_population_file(metrics["population"]))
    (report,) = (tmp_path / "c").iterdir()
    saved = torch.load(report / "sets" / "n2" / "connect" / "set-000.pt", weights_only=True)
    net = population.nets[disjoint_sets(4, 2, 2, 0)[0][0]]
    with torch.no_grad():
        hidden = net[0](data.train_tensors[0])
        net[1].running_mean.copy_(hidden.mean(0))
        net[1].running_var.copy_(hidden.var(0, unbiased=True))
    net.eval()
    xi = data.test_tensors[0][:10].clone().requires_grad_(True)
    by_hand = torch.autograd.grad(net(xi)[:, 1].sum(), xi)[0]
    torch.testing.assert_close(saved["explanations"]["saliency"], by_hand, rtol=1e-4, atol=1e-6)
