"""``evaluate.py sanity`` given a population in place of one run: each member's similarities
equal that member run alone, the seed-level table and the stability of "which explainers
stay similar" equal a recomputation (t-quantiles from tables, scipy's Kendall τ), a finished
member is never evaluated again; and ``data_randomisation``'s command line and folder name."""

from __future__ import annotations

import csv
import json
import math
import re

import pytest
from scipy.stats import kendalltau

import evaluate
from foundation.errors import InputError
from evaluators.protocols import sanity
from evaluators.protocols.data_randomisation import DataRandomisationConfig
from tests.evaluators.protocols.test_sanity import cnn_run  # noqa: F401  (the tiny small-CNN run fixture)
from tests.support.helpers import noisy_member_copies

T_975 = {2: 4.302652729749464}  # Student's t 97.5 % quantile, 2 degrees of freedom (tables)
SANITY = {"n_inputs": 4, "explainers": {"saliency": {}, "input_x_gradient": {}, "guided_backprop": {}},
          "mode": "cascading", "log_to": "none", "device": "cpu", "n_figure": 0, "seed": 1}  # fmt: skip


@pytest.fixture(scope="module")
def members(cnn_run, tmp_path_factory):  # noqa: F811
    """A folder of 3 image runs: the tiny CNN run and two copies with seeded noise on every weight."""
    return noisy_member_copies(cnn_run, tmp_path_factory.mktemp("sanity_members") / "pop", 0.5)


def config(tmp_path, run, **extra) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "sanity.yaml"
    path.write_text(json.dumps({"run": str(run), **SANITY, "output_dir": str(tmp_path / "out"), **extra}))
    return str(path)


def by_hand(entries: list[dict]) -> tuple[float, float, float]:
    """Mean over the members' means, its t half-width (K = 3), the members' mean input half-width."""
    v = [e["mean"] for e in entries]
    k = len(v)
    mean = sum(v) / k
    sd = math.sqrt(sum((x - mean) ** 2 for x in v) / (k - 1))
    return mean, T_975[k - 1] * sd / math.sqrt(k), sum(e["ci95"] for e in entries) / k


def test_population_equals_each_member_alone_and_resumes(members, tmp_path, monkeypatch):
    calls, evaluate_model = [], sanity.evaluate_model

    def stopped(*args, **kwargs):
        if len(calls) == 1:
            raise KeyboardInterrupt
        calls.append(1)
        return evaluate_model(*args, **kwargs)

    monkeypatch.setattr(sanity, "evaluate_model", stopped)
    with pytest.raises(SystemExit):
        evaluate.main(["sanity", "--config", config(tmp_path / "pop", members)])
    (folder,) = (tmp_path / "pop" / "out").iterdir()
    assert folder.name.startswith("tiny-")  # the population's dataset names the folder (not its parent folder)
    assert [p.parent.name for p in (folder / "members").glob("*/member.json")] == ["seed0"]
    resumed = []
    monkeypatch.setattr(sanity, "evaluate_model", lambda *a, **k: resumed.append(a[3].name) or evaluate_model(*a, **k))
    summary = evaluate.main(["sanity", "--resume", str(folder)])
    assert resumed == ["seed1", "seed2"]  # seed0 is read from its member.json, never evaluated again
    for name in ("sanity.json", "members.csv", "seed_table.csv", "random_logit.csv", "stability.csv", "table.md",
                 "similarity_cascading.png"):
        assert (folder / name).is_file(), name
    monkeypatch.setattr(sanity, "evaluate_model", evaluate_model)
    for name in ("seed0", "seed2"):  # read back from member.json, and computed in this process
        alone = evaluate.main(["sanity", "--config", config(tmp_path / name, members / name)])
        assert summary["member_similarity"][name] == json.loads(json.dumps(alone["similarity"]))
        assert summary["member_random_logit"][name] == json.loads(json.dumps(alone["random_logit"]))
    assert summary["member_similarity"]["seed0"] != summary["member_similarity"]["seed1"]
    names, stages = summary["members"], summary["stages"]["cascading"]
    assert names == ["seed0", "seed1", "seed2"] and len(stages) > 2
    # the seed-level table, recomputed from the members' own tables
    with (folder / "seed_table.csv").open() as f:
        seed_csv = {(r["stage"], r["explainer"], r["measure"]): r for r in csv.DictReader(f)}
    assert len(seed_csv) == len(stages) * 3 * len(summary["measures"])
    for e in SANITY["explainers"]:
        for m in summary["measures"]:
            for s, stage in enumerate(stages[1:], start=1):
                entries = [summary["member_similarity"][n]["cascading"][e][m][s] for n in names]
                mean, ci95, inputs = by_hand(entries)
                got = summary["similarity"]["cascading"][e][m][s]
                assert (got["stage"], got["n_members"]) == (stage, 3)
                assert got["mean"] == pytest.approx(mean, abs=1e-12) and got["ci95"] == pytest.approx(ci95, abs=1e-12)
                assert got["inputs_ci95"] == pytest.approx(inputs, abs=1e-12)
                row = seed_csv[stage, e, m]
                assert float(row["ci95_members"]) == pytest.approx(ci95, abs=1e-12)
            logit = [summary["member_random_logit"][n][e][m] for n in names]
            assert summary["random_logit"][e][m]["ci95"] == pytest.approx(by_hand(logit)[1], abs=1e-12)
    # the stability of "which explainers stay similar" at the last stage, recomputed
    explainers = list(SANITY["explainers"])
    assert not summary["unranked"] and len(summary["stability"]) == len(summary["measures"])
    for entry in summary["stability"]:
        assert entry["table"] == f"cascading: {stages[-1]}"
        scores = [[summary["member_similarity"][n]["cascading"][e][entry["metric"]][-1]["mean"] for e in explainers]
                  for n in names]  # fmt: skip
        taus = [kendalltau(scores[a], scores[b]).statistic for a in range(3) for b in range(a + 1, 3)]
        assert entry["kendall_tau"] == pytest.approx(sum(taus) / 3, abs=1e-12)
        best = [explainers[max(range(3), key=lambda i: s[i])] for s in scores]
        assert entry["best_agreement"] == pytest.approx(sum(best[a] == best[b] for a in range(3)
                                                            for b in range(a + 1, 3)) / 3)  # fmt: skip
        assert entry["best_per_member"] == dict(zip(names, best))
    assert f"| cascading: {stages[-1]} | spearman |" in (folder / "table.md").read_text()


def test_members_of_different_architectures_are_refused(members, tmp_path):
    summaries = {"a": {"stages": {"cascading": ["original", "fc"]}, "measures": ["spearman"], "n_inputs": 4},
                 "b": {"stages": {"cascading": ["original", "conv"]}, "measures": ["spearman"], "n_inputs": 4}}
    from evaluators.protocols.sanity_population import check_members

    with pytest.raises(InputError, match=r"member 'b' has stages .*expected members of one architecture"):
        check_members(summaries, "option run='x'")
    with pytest.raises(InputError, match=r"option\(s\) \['model_class'\] with option run="):
        evaluate.main(["sanity", "--config", config(tmp_path, members, model_class="torchvision.models.resnet18")])


def test_data_randomisation_takes_no_run_options_and_its_folder_is_as_documented(tmp_path, capsys):
    with pytest.raises(SystemExit):
        evaluate.main(["data_randomisation", "--help"])
    shown = capsys.readouterr().out
    assert "--config" in shown and not re.search(r"--run\b|--model_class|--data_config", shown)
    with pytest.raises(InputError, match=r"unrecognized arguments: --run x"):
        evaluate.main(["data_randomisation", "--config", "c.yaml", "--run", "x"])
    cfg = DataRandomisationConfig(true_labels=str(tmp_path), permuted_labels=str(tmp_path),
                                  output_dir=str(tmp_path / "out"))  # fmt: skip
    folder = evaluate.new_report_dir(cfg)
    assert re.fullmatch(r"data_randomisation-\d{8}-\d{6}", folder.name)
    assert "``<output_dir>/data_randomisation-<stamp>``" in evaluate.__doc__


def test_a_member_with_an_undefined_mean_is_left_out_and_counted():
    from evaluators.protocols.sanity_population import seed_entry

    entries = [{"mean": 0.2, "ci95": 0.1}, {"mean": None, "ci95": None}, {"mean": 0.4, "ci95": 0.3}]
    got = seed_entry(entries, "x")  # two defined members: t with 1 degree of freedom, 12.7062 (tables)
    assert got["n_members"] == 2 and got["mean"] == pytest.approx(0.3, abs=1e-12)
    assert got["ci95"] == pytest.approx(12.706204736174704 * math.sqrt(0.02) / math.sqrt(2), abs=1e-9)
    assert got["inputs_ci95"] == pytest.approx(0.2, abs=1e-12)
    assert seed_entry(entries[:2], "x") == {"mean": 0.2, "ci95": None, "n_members": 1, "inputs_ci95": 0.1}
