"""``evaluate.py aggregation`` and ``optimised`` given a population in place of one run: each
member's table equals that member run alone, the seed-level table and the ranking stability
equal a recomputation (scipy's Kendall τ, the t-interval by hand), a finished member is never
evaluated again, and a tabular population file works the same."""

from __future__ import annotations

import json
import math

import pytest
from scipy.stats import kendalltau

import evaluate
from evaluators.protocols import aggregation, optimised_aggregation
from foundation.errors import InputError
from tests.support.helpers import noisy_member_copies
from tests.support.wandb_runs import assert_logged

AGGREGATION = {"n_inputs": 4, "explainers": {"saliency": {}, "gradcam": {}, "input_x_gradient": {}},
               "aggregators": {"mean": {}, "ucb": {}, "pi": {}}, "normalisations": ["z"], "sweeps": {}, "steps": 4,
               "log_to": "none", "device": "cpu", "n_grid": 2}  # fmt: skip
OPTIMISED = {"n_inputs": 3, "explainers": {"saliency": {}, "input_x_gradient": {}}, "m_agg": 4, "m_eval": 6,
             "m_sens": 3, "stability_samples": 3, "log_to": "none", "device": "cpu"}  # fmt: skip
T_975 = {2: 4.302652729749464, 7: 2.364624251592785}  # Student's t 97.5 % quantiles by degrees of freedom (tables)


@pytest.fixture(scope="module")
def members(tiny_run, tmp_path_factory):
    """A folder of 3 image runs: the tiny run and two copies with seeded noise on every weight."""
    return noisy_member_copies(tiny_run, tmp_path_factory.mktemp("members") / "pop", 0.3)


def config(tmp_path, run, base: dict, name: str) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps({"run": str(run), **base, "output_dir": str(tmp_path / "out")}))
    return str(path)


def check_seed_table(summary: dict, metrics: list[str], spread: str, higher: dict[str, bool]) -> None:
    """The seed-level rows and the robustness entries recomputed from the members' rows."""
    names, member_rows, cfg = summary["members"], summary["member_rows"], summary["config"]
    k = len(names)
    for row, values in summary["rows"].items():
        for m in metrics:
            v = [member_rows[n][row][m]["mean"] for n in names]
            mean = sum(v) / k
            sd = math.sqrt(sum((x - mean) ** 2 for x in v) / (k - 1))
            assert values[m]["mean"] == pytest.approx(mean, abs=1e-12)
            assert values[m]["ci95"] == pytest.approx(T_975[k - 1] * sd / math.sqrt(k), abs=1e-12)
            assert values[m][f"inputs_{spread}"] == pytest.approx(
                sum(member_rows[n][row][m][spread] for n in names) / k, abs=1e-12)
    for entry in summary["robustness"]:
        rows = {"explainers": [r for r in summary["rows"] if r.startswith("base/")] or list(cfg["explainers"]),
                "aggregators": [r for r in summary["rows"] if r.startswith("agg/")] or list(cfg["aggregators"]),
                }.get(entry["table"], list(summary["rows"]))  # fmt: skip
        scores = [[member_rows[n][r][entry["metric"]]["mean"] for r in rows] for n in names]
        taus = [kendalltau(scores[a], scores[b]).statistic for a in range(k) for b in range(a + 1, k)]
        assert entry["kendall_tau"] == pytest.approx(sum(taus) / len(taus), abs=1e-12), entry
        sign = 1 if higher[entry["metric"]] else -1
        best = [rows[max(range(len(rows)), key=lambda i: sign * s[i])] for s in scores]
        agree = [best[a] == best[b] for a in range(k) for b in range(a + 1, k)]
        assert entry["best_agreement"] == pytest.approx(sum(agree) / len(agree), abs=1e-12), entry


def test_aggregation_over_members_equals_each_member_alone_and_resumes(members, tmp_path, monkeypatch):
    calls, evaluate_model = [], aggregation.evaluate_model

    def stopped(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(1)
        return evaluate_model(*args, **kwargs)

    monkeypatch.setattr(aggregation, "evaluate_model", stopped)
    with pytest.raises(SystemExit):
        evaluate.main(["aggregation", "--config", config(tmp_path / "a", members, AGGREGATION, "agg")])
    (folder,) = (tmp_path / "a" / "out").iterdir()
    assert sorted(p.parent.name for p in (folder / "members").glob("*/member.json")) == ["seed0", "seed1"]
    resumed_calls = []
    monkeypatch.setattr(aggregation, "evaluate_model",
                        lambda *a, **k: resumed_calls.append(1) or evaluate_model(*a, **k))  # fmt: skip
    summary = evaluate.main(["aggregation", "--resume", str(folder)])
    assert len(resumed_calls) == 1  # the two finished members are read, not evaluated again
    assert summary["members"] == ["seed0", "seed1", "seed2"]
    for name in ("aggregation.json", "members.csv", "seed_table.csv", "robustness.csv", "table.md"):
        assert (folder / name).is_file(), name
    # a member's table (seed1: finished before the interruption, read back) equals that member run alone
    alone = evaluate.main(["aggregation", "--config",
                           config(tmp_path / "alone", members / "seed1", AGGREGATION, "agg")])  # fmt: skip
    assert summary["member_rows"]["seed1"] == alone["rows"]
    assert summary["member_findings"]["seed1"] == json.loads(json.dumps(alone["findings"]))
    assert summary["member_rows"]["seed0"] != summary["member_rows"]["seed2"]
    check_seed_table(summary, ["insertion", "deletion"], "ci95", {"insertion": True, "deletion": False})
    assert {(e["table"], e["metric"]) for e in summary["robustness"]} == {
        (t, m) for t in ("explainers", "aggregators") for m in ("insertion", "deletion")}
    assert 0 <= summary["findings"]["ii_ucb_best_or_within_noise_insertion"]["share"] <= 1
    assert "| aggregators | deletion ↓ |" in (folder / "table.md").read_text()


def test_optimised_over_members_equals_each_member_alone(members, tmp_path):
    logged = {**OPTIMISED, "log_to": "wandb_offline"}
    summary = evaluate.main(["optimised", "--config", config(tmp_path / "img", members, logged, "opt")])
    alone = evaluate.main(["optimised", "--config", config(tmp_path / "one", members / "seed1", OPTIMISED, "opt")])
    assert summary["member_rows"]["seed1"] == alone["rows"]
    check_seed_table(summary, list(optimised_aggregation.COLUMNS), "se", optimised_aggregation.HIGHER_IS_BETTER)
    assert {e["table"] for e in summary["robustness"]} == {"explainers", "aggregators", "all"}
    (folder,) = (tmp_path / "img" / "out").iterdir()
    assert "| all | INFD ↓ |" in (folder / "table.md").read_text()
    assert (folder / "optimised_aggregation.json").is_file()
    assert_logged(folder, "optimised_aggregation", members, {  # the folder of runs' group: <dataset>/<its name>
        "seed_table/saliency/infidelity": summary["rows"]["saliency"]["infidelity"]["mean"]},
        ["seed_table", "robustness"], [])  # fmt: skip


def test_a_tabular_population_file(small_population, tmp_path):
    tabular = {**AGGREGATION, "explainers": {"saliency": {}, "input_x_gradient": {}}, "n_baselines": 4}
    summary = evaluate.main(["aggregation", "--config", config(tmp_path / "tab", small_population, tabular, "agg")])
    assert len(summary["members"]) == 8 and summary["members"][0] == "seed0"
    check_seed_table(summary, ["insertion", "deletion"], "ci95", {"insertion": True, "deletion": False})


def test_model_file_options_with_a_population_are_refused(members, tmp_path):
    with pytest.raises(InputError, match=r"option\(s\) \['model_class'\] with option run="):
        aggregation.evaluate_aggregation(aggregation.AggregationConfig(
            run=str(members), model_class="torchvision.models.resnet18", device="cpu", log_to="none"), tmp_path)
