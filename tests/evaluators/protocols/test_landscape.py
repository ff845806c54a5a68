"""The landscape evaluator end to end on a small German Credit population."""

from __future__ import annotations

import json

import pytest
import torch

import evaluate
from evaluators.protocols.landscape import LandscapeConfig, nudged_reruns, vector
from tests.support.wandb_runs import assert_logged


def test_landscape_report(small_population, tmp_path):
    config = tmp_path / "landscape.yaml"
    config.write_text(
        f"population: {small_population}\nn_models: 4\nn_sets: 2\nn_t: 5\nn_perturb: 3\nsigma: 0.0\n"
        f"ts_diagnostics: [0.0, 0.5, 1.0]\noutput_dir: {tmp_path / 'out'}\n"
    )
    summary = evaluate.main(["landscape", "--config", str(config)])
    acc = summary["test_accuracy"]
    # sigma = 0: every perturbed variant is its member, so perturb == average
    assert acc["perturb"]["values"] == acc["average"]["values"]
    along = summary["along"]
    # fixed end points: the curve and the straight line meet at t = 0 and t = 1
    for end in (0, -1):
        assert along["curve_train_loss"][end] == pytest.approx(along["line_train_loss"][end], rel=1e-5)
    assert summary["distances"]["model_to_model"]["n"] == 2 * 6
    assert summary["distances"]["start_to_own_model"]["n"] == 2 * 2
    assert summary["distances"]["model_to_nudged_rerun"]["n"] == 2 * 4
    (report,) = list((tmp_path / "out").iterdir())
    assert json.loads((report / "landscape.json").read_text())["dataset"] == "german"
    assert (report / "landscape.png").stat().st_size > 1000
    assert (report / "ensemble_accuracy.csv").read_text().count("\n") == 7
    assert_logged(report, "landscape", small_population, {  # the default log_to: offline in the tests
        "test_accuracy/perturb/mean": sum(acc["perturb"]["values"]) / len(acc["perturb"]["values"]),
        "distances/model_to_model/n": 12}, ["test_accuracy", "distances"], ["landscape"])  # fmt: skip


def test_a_rerun_without_nudge_is_its_member_and_a_nudge_moves_it(small_population):
    population, payload, data = LandscapeConfig(population=small_population).load()
    members = [1, 4, 6]
    epochs = payload["metadata"]["max_epochs"]
    exact = nudged_reruns(population, members, data, epochs, nudge=0.0)
    nudged = nudged_reruns(population, members, data, epochs, nudge=1e-3)
    for i in members:
        model = vector(population.member(i).net.parameters())
        assert torch.equal(exact[i], model)  # same seed, hyperparameters and batches: bit for bit
        assert 0 < (nudged[i] - model).norm() < (model - vector(population.member(0).net.parameters())).norm()


def test_unknown_option_is_named(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("population: x.pt\nsigmaa: 0.2\n")
    with pytest.raises(evaluate.InputError, match=r"unknown option\(s\) \['sigmaa'\]"):
        evaluate.main(["landscape", "--config", str(config)])
    config.write_text("population: x.pt\n")
    with pytest.raises(evaluate.InputError, match=r"unknown option\(s\) \['n_pertub'\]"):
        evaluate.main(["landscape", "--config", str(config), "--set", "n_pertub=3"])
    with pytest.raises(evaluate.InputError, match="expected KEY=VALUE"):
        evaluate.main(["landscape", "--config", str(config), "--set", "n_perturb"])
    with pytest.raises(evaluate.InputError, match=r"option device='tpu'; expected 'auto', 'cpu', 'cuda'"):
        evaluate.main(["consistency", "--config", str(config), "--set", "device=tpu"])
    if not torch.cuda.is_available():
        with pytest.raises(evaluate.InputError, match=r"option device='cuda:0': no such CUDA device"):
            evaluate.main(["sigma", "--config", str(config), "--set", "device=cuda:0"])


def test_consistency_protocol_scores_pairs_of_ensembles(small_population, tmp_path):
    import torch

    from datamodules import FinancialDataModule
    from evaluators.metrics.agreement_functional import ley_agreements
    from evaluators.maps import explain
    from evaluators.protocols.population_sets import disjoint_sets
    from lightning_modules import load_population
    from lightning_modules.ensembles import ENSEMBLES

    config = tmp_path / "consistency.yaml"
    config.write_text(
        f"population: {small_population}\nmethods: [saliency]\nn_models: [4]\nn_sets: 2\nn_points: 1000\n"
        f"n_t: 3\nn_perturb: 2\nsigma: 0.3\noutput_dir: {tmp_path / 'c'}\ndevice: cpu\n"  # as the reference below
    )
    summary = evaluate.main(["consistency", "--config", str(config), "--set", "n_points=40", "--set", "sigma=0.0"])
    by = {(r["strategy"], r["metric"]): r for r in summary["rows"]}
    # sigma = 0: perturbed ensembles are the average ensembles
    for metric in ("sa", "ssa", "cdc_k", "cdc_d"):
        assert by[("perturb", metric)]["mean"] == pytest.approx(by[("average", metric)]["mean"], abs=1e-6)
    # the single-model row, recomputed independently
    population, _ = load_population(small_population)
    x = FinancialDataModule(dataset="german").test_tensors[0][:40]
    sets = disjoint_sets(population.size, 4, 2, 0)
    e = torch.stack([explain(ENSEMBLES["average"](population, s[:1]), x, "saliency") for s in sets])
    reference = ley_agreements(e, 5)
    for metric in ("sa", "cdc_k", "cdc_d"):  # CDC@d is Table 1's column
        assert by[("single", metric)]["mean"] == pytest.approx(reference[metric].mean().item(), abs=1e-6)
    # Watson et al.'s C of the one pair, by hand: scikit-learn's logistic regression on half the
    # individuals (both their rows) telling set 0's explanations from set 1's, scored on the others
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupShuffleSplit

    features, labels, individual = torch.cat([e[0], e[1]]).double().numpy(), [0] * 40 + [1] * 40, list(range(40)) * 2
    train, test = next(GroupShuffleSplit(n_splits=1, test_size=0.5, random_state=0).split(features, labels,
                                                                                          individual))  # fmt: skip
    held_out = LogisticRegression(max_iter=1000).fit(features[train], [labels[i] for i in train]).score(
        features[test], [labels[i] for i in test])  # fmt: skip
    assert by[("single", "watson_c")]["mean"] == pytest.approx(1 - 2 * abs(held_out - 0.5), abs=1e-12)
    (report,) = list((tmp_path / "c").iterdir())
    table = (report / "table1.md").read_text()
    assert table.count("\n| ") == 7 and "saliency CDC@d" in table and "saliency Watson C" in table
    assert (report / "consistency.csv").read_text().count(",watson_c,") == 6  # one row per strategy
    assert {r["metric"] for r in json.loads((report / "consistency.json").read_text())["rows"]} == \
        {"sa", "ssa", "cdc_k", "cdc_d", "watson_c"}  # fmt: skip
    assert (report / "agreement_by_strategy.png").stat().st_size > 1000  # one n: strategies on the x axis
    assert not (report / "agreement_vs_models.png").exists()


def test_consistency_curves_as_the_paper_trains_and_samples_them(small_population, monkeypatch):
    import torch

    from evaluators.protocols import consistency as consistency_protocol
    from evaluators.protocols.consistency import ConsistencyConfig, set_ensemble
    from lightning_modules import load_population
    from lightning_modules.curve_population import curves_between
    from lightning_modules.ensembles import build_ensemble

    population, _ = load_population(small_population)
    curves = [curves_between(population, [(0, 1), (2, 3)]).curve(i) for i in range(2)]
    paper = ConsistencyConfig(population=str(small_population), n_t=3)
    assert (paper.curve_mode, paper.t_sampling) == ("fixed", "uniform")  # the defaults: docs/table1.md says why
    x = torch.randn(7, 61)
    for s in (0, 1):  # t ~ U(0, 1), seeded by (seed + set), so sets differ and reruns agree
        got = set_ensemble("connect", s, [0, 1, 2, 3], population, [curves, curves], paper).explained_output(x)
        want = build_ensemble(population, "connect", [0, 1, 2, 3], curves, n_t=3, t_seed=s).explained_output(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    even = ConsistencyConfig(population=str(small_population), n_t=3, t_sampling="even")
    evenly = set_ensemble("combine", 0, [0, 1, 2, 3], population, [curves], even).explained_output(x)
    combined = build_ensemble(population, "combine", [0, 1, 2, 3], curves, n_t=3, seed=0)
    torch.testing.assert_close(evenly, combined.explained_output(x), rtol=0, atol=0)
    assert not torch.equal(set_ensemble("connect", 0, [], population, [curves], paper).explained_output(x),
                           set_ensemble("connect", 0, [], population, [curves], even).explained_output(x))
    for option in ("curve_mode", "t_sampling"):
        with pytest.raises(evaluate.InputError, match=f"option {option}='x'; expected one of"):
            ConsistencyConfig(population=str(small_population), **{option: "x"})
    with pytest.raises(evaluate.InputError, match=r"option n_sets=1: .* expected at least 2"):
        ConsistencyConfig(population=str(small_population), n_sets=1)  # was: NaN rows (tabular), IndexError (images)
    modes = []
    monkeypatch.setitem(consistency_protocol.CURVE_TRAINERS, "stacked", lambda *a: modes.append(a[-1]) or [])
    for mode in ("fixed", "trained"):
        with pytest.raises(evaluate.InputError, match="needs the curves"):  # none came back: the mode is all it checks
            consistency_protocol.evaluate_consistency(ConsistencyConfig(population=str(small_population), methods=[],
                                                      strategies=["connect"], n_sets=2, device="cpu", curve_mode=mode))
    assert modes == ["fixed", "trained"]


def test_interrupted_consistency_run_resumes_to_the_uninterrupted_numbers(small_population, tmp_path, monkeypatch):
    from evaluators.protocols import consistency as consistency_protocol

    config = tmp_path / "consistency.yaml"
    config.write_text(  # SmoothGrad draws random numbers
        f"population: {small_population}\nmethods: [saliency, smoothgrad]\nn_models: [4]\nn_sets: 2\n"
        f"n_points: 30\nn_points_smoothgrad: 10\nn_t: 3\nn_perturb: 2\nsigma: 0.3\ndevice: cpu\n"
    )  # fmt: skip
    whole = evaluate.main(["consistency", "--config", str(config), "--output_dir", str(tmp_path / "whole")])

    calls = []
    explain = consistency_protocol.explain

    def interrupted(*args, **kwargs):
        calls.append(args[2])
        if len(calls) == 19:  # connect's second set: 9 ensembles kept, curves trained again on resuming
            raise KeyboardInterrupt
        return explain(*args, **kwargs)

    monkeypatch.setattr(consistency_protocol, "explain", interrupted)
    with pytest.raises(SystemExit) as stop:
        evaluate.main(["consistency", "--config", str(config), "--output_dir", str(tmp_path / "cut")])
    assert stop.value.code == 130
    (run,) = list((tmp_path / "cut").iterdir())
    assert len(list((run / "sets").rglob("*.pt"))) == 9 and not (run / "consistency.json").exists()

    calls.clear()
    monkeypatch.setattr(consistency_protocol, "explain", lambda *a, **k: calls.append(a[2]) or explain(*a, **k))
    with pytest.raises(evaluate.InputError, match=r"options \['n_sets'\] cannot change in a resumed run"):
        evaluate.main(["consistency", "--resume", str(run), "--set", "n_sets=3"])
    resumed = evaluate.main(["consistency", "--resume", str(run)])
    assert len(calls) == 2 * (12 - 9)  # only the ensembles not kept, each with both methods
    assert resumed["rows"] == whole["rows"]  # bit for bit, SmoothGrad included
    assert json.loads((run / "consistency.json").read_text())["rows"] == whole["rows"]
    with pytest.raises(evaluate.InputError, match="consistency.json is there, the run is finished"):
        evaluate.main(["consistency", "--resume", str(run)])
    with pytest.raises(evaluate.InputError, match="no config.yaml there; expected a folder started by evaluate.py"):
        evaluate.main(["consistency", "--resume", str(tmp_path)])


def test_an_ensembles_smoothgrad_does_not_depend_on_what_ran_before_it(small_population, tmp_path):
    config = tmp_path / "consistency.yaml"
    config.write_text(
        f"population: {small_population}\nn_models: [4]\nn_sets: 2\nn_points_smoothgrad: 10\nn_perturb: 2\n"
        f"sigma: 0.3\ndevice: cpu\noutput_dir: {tmp_path}\n"
    )  # fmt: skip

    def smoothgrad_rows(*settings: str) -> list[dict]:
        summary = evaluate.main(["consistency", "--config", str(config), *(a for s in settings for a in ("--set", s))])
        return [{k: v for k, v in r.items() if k != "test_acc"} for r in summary["rows"] if r["method"] == "smoothgrad"]

    alone = smoothgrad_rows("methods=[smoothgrad]", "strategies=[perturb]")
    after_others = smoothgrad_rows("methods=[saliency, smoothgrad]", "strategies=[single, average, perturb]")
    assert alone == [r for r in after_others if r["strategy"] == "perturb"]
    # the same draws for every strategy: with sigma = 0 a perturbed ensemble is its average ensemble
    at_zero = smoothgrad_rows("methods=[smoothgrad]", "strategies=[average, perturb]", "sigma=0.0")
    assert [(r["metric"], r["mean"]) for r in at_zero if r["strategy"] == "average"] == \
        [(r["metric"], r["mean"]) for r in at_zero if r["strategy"] == "perturb"]  # fmt: skip


def test_consistency_explains_the_probability_when_asked(small_population, tmp_path):
    from datamodules import FinancialDataModule
    from evaluators.metrics.agreement_functional import ley_agreements
    from evaluators.protocols.population_sets import disjoint_sets
    from lightning_modules import load_population

    config = tmp_path / "consistency.yaml"
    config.write_text(f"population: {small_population}\nstrategies: [single]\nmethods: [saliency]\nn_sets: 2\n"
                      f"n_points: 30\ndevice: cpu\noutput_dir: {tmp_path}\nexplain_output: probability\n")  # fmt: skip
    (row, *_) = evaluate.main(["consistency", "--config", str(config)])["rows"]
    population, _ = load_population(small_population)
    x = FinancialDataModule(dataset="german").test_tensors[0][:30].requires_grad_()
    grads = [torch.autograd.grad(population.member(s[0])(x).softmax(-1)[:, 1].sum(), x)[0]
             for s in disjoint_sets(population.size, 4, 2, 0)]  # fmt: skip
    assert row["metric"] == "sa"
    assert row["mean"] == pytest.approx(ley_agreements(torch.stack(grads), 5)["sa"].mean().item(), abs=1e-6)
    with pytest.raises(evaluate.InputError, match="option explain_output='margin'; expected one of"):
        evaluate.main(["consistency", "--config", str(config), "--set", "explain_output=margin"])


def test_smoothgrad_sigma_and_samples_reach_the_explainer(small_population, tmp_path):
    config = tmp_path / "consistency.yaml"
    config.write_text(f"population: {small_population}\nstrategies: [single, perturb]\n"
                      f"methods: [saliency, smoothgrad]\nn_sets: 2\nn_points: 20\nn_points_smoothgrad: 20\n"
                      f"n_perturb: 2\ndevice: cpu\noutput_dir: {tmp_path}\nsmoothgrad_sigma: 0.0\n")  # fmt: skip
    rows = evaluate.main(["consistency", "--config", str(config)])["rows"]
    by = {(r["strategy"], r["method"], r["metric"]): r["mean"] for r in rows}
    for strategy in ("single", "perturb"):  # no input noise: SmoothGrad is the mean of 50 identical gradients
        for metric in ("sa", "ssa", "cdc_d"):
            assert by[(strategy, "smoothgrad", metric)] == pytest.approx(by[(strategy, "saliency", metric)], abs=1e-9)
    noisy = evaluate.main(["consistency", "--config", str(config), "--set", "smoothgrad_sigma=0.5"])["rows"]
    smoothgrad = [r["mean"] for r in rows if r["method"] == "smoothgrad"]
    assert [r["mean"] for r in noisy if r["method"] == "smoothgrad"] != smoothgrad
    more = evaluate.main(["consistency", "--config", str(config), "--set", "smoothgrad_sigma=0.5",
                          "--set", "smoothgrad_samples=7"])["rows"]  # fmt: skip
    noisy_smoothgrad = [r["mean"] for r in noisy if r["method"] == "smoothgrad"]
    assert [r["mean"] for r in more if r["method"] == "smoothgrad"] != noisy_smoothgrad


def test_deepshap_softmax_rule_reaches_the_explainer(small_population, tmp_path):
    from datamodules import FinancialDataModule
    from evaluators.maps import explain
    from evaluators.metrics.agreement_functional import ley_agreements
    from evaluators.protocols.population_sets import disjoint_sets
    from evaluators.protocols.consistency import ConsistencyConfig, deepshap_background
    from lightning_modules import load_population
    from lightning_modules.ensembles import ENSEMBLES

    config = tmp_path / "consistency.yaml"
    config.write_text(f"population: {small_population}\nstrategies: [single]\nmethods: [deepshap]\nn_sets: 2\n"
                      f"n_points_deepshap: 10\nn_background: 6\ndevice: cpu\noutput_dir: {tmp_path}\n"
                      "explain_output: probability\ndeepshap_softmax_rule: rescale\n")  # fmt: skip
    (row, *_) = evaluate.main(["consistency", "--config", str(config)])["rows"]
    population, _ = load_population(small_population)
    population.hparams.explain_output = "probability"
    data = FinancialDataModule(dataset="german")
    x = data.test_tensors[0][:10]
    options = ConsistencyConfig(population=small_population, n_background=6)
    background = deepshap_background(data.train_tensors[0], options)
    maps = [explain(ENSEMBLES["average"](population, s[:1]), x, "deepshap", baselines=background,
                    softmax_rule="rescale") for s in disjoint_sets(population.size, 4, 2, 0)]  # fmt: skip
    gradient_rule = [explain(ENSEMBLES["average"](population, s[:1]), x, "deepshap", baselines=background)
                     for s in disjoint_sets(population.size, 4, 2, 0)]  # fmt: skip
    assert row["metric"] == "sa"
    assert row["mean"] == pytest.approx(ley_agreements(torch.stack(maps), 5)["sa"].mean().item(), abs=1e-6)
    assert row["mean"] != pytest.approx(ley_agreements(torch.stack(gradient_rule), 5)["sa"].mean().item(), abs=1e-6)
    with pytest.raises(evaluate.InputError, match="the rule explains the probability: set explain_output"):
        evaluate.main(["consistency", "--config", str(config), "--set", "explain_output=logit"])
