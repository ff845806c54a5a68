"""``evaluate.py report --set permute_labels=<seed>``: the report trains the population's
permuted-label twin itself (``twin``, ``evaluate.train_twin``). On a population of 6 MLPs of a
CSV table, its data-randomisation section equals that of the report given a twin trained by hand
(``train.py ... --data.permute_labels 1``, the same numbers: training is deterministic on one
CPU), with the permuted members near chance; interrupted while training, the report resumes the
training (the finished chunk is not trained again), and once trained the twin is read, never
trained again; the W&B run holds the data-randomisation δ and the ensembles' agreement; bad
combinations are refused in one line, leaving no folder."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

import evaluate
import train
from evaluators.reports.reliability import maps, protocol
from evaluators.reports.reliability.config import ReportConfig
from evaluators.reports.reliability.twin import training_config, twin_population
from foundation.errors import InputError
from lightning_modules import load_population, population_fit
from tests.entry_points.test_own_table import data_args, write_table
from tests.evaluators.reports.reliability.test_protocol import finished
from tests.support.wandb_runs import records

SEED = 1
OPTIONS = ["--set", "n_points=20", "--set", "explainers=[saliency]", "--set", "n_bootstrap=50", "--set",
           "infidelity_samples=5", "--set", "device=cpu", "--set", "cascade_steps=1", "--set", "watson_c=false",
           "--set", "faithfulness=[deletion]", "--set", "ensemble_size=2"]  # fmt: skip


@pytest.fixture(scope="module")
def populations(tmp_path_factory) -> dict:
    """The table's population of 6 MLPs trained in 2 chunks, its twin trained by hand, and the
    report given that twin."""
    out = tmp_path_factory.mktemp("twin")
    path = write_table(out / "loans.csv", 2, n=300)
    common = ["--config", "configs/population.yaml", *data_args(path), "--model.size", "6", "--model.hidden", "[8]",
              "--model.lr", "0.01", "--trainer.max_epochs", "4", "--log_to", "none", "--population.chunk_size", "3",
              "--trainer.enable_progress_bar", "false"]  # fmt: skip
    real = train.main([*common, "--output_dir", str(out / "real")])
    by_hand = train.main([*common, "--data.permute_labels", str(SEED), "--output_dir", str(out / "permuted")])
    given = evaluate.main(["report", "--population", real["population"], "--output_dir", str(out / "given"),
                           *OPTIONS, "--set", "log_to=none", "--set",
                           f"permuted_population={by_hand['population']}"])  # fmt: skip
    return {"out": out, "real": real, "by_hand": by_hand, "given": given}


@pytest.fixture(scope="module")
def on_request(populations) -> tuple[dict, Path]:
    out = populations["out"] / "on_request"
    summary = evaluate.main(["report", "--population", populations["real"]["population"], "--output_dir", str(out),
                             *OPTIONS, "--set", "log_to=wandb_offline", "--set", f"permute_labels={SEED}"])
    (run_dir,) = out.iterdir()
    return summary, run_dir


def without_source(section: dict) -> dict:
    return {k: v for k, v in section.items() if k not in ("population", "permute_labels")}


def sections(run_dir: Path) -> dict:
    """A finished report's sections, the data randomisation's without the twin's path."""
    out = finished(run_dir)["sections"]
    out["sanity"]["data_randomisation"] = without_source(out["sanity"]["data_randomisation"])
    return out


def test_trained_twin_gives_the_section_of_a_twin_trained_by_hand(populations, on_request):
    summary, run_dir = on_request
    section = summary["sections"]["sanity"]["data_randomisation"]
    given = populations["given"]["sections"]["sanity"]["data_randomisation"]
    assert section["permute_labels"] == SEED and given["permute_labels"] is None
    assert section["population"] == str(twin_population(run_dir)) and given["population"] != section["population"]
    assert twin_population(run_dir).parent.parent.parent == run_dir / "permuted"
    assert without_source(section) == without_source(given)
    assert section["accuracy_mean"] == pytest.approx(populations["by_hand"]["test_acc_mean"])  # train.py's test
    real = summary["population"]["accuracy_mean"]
    assert abs(section["accuracy_mean"] - 0.5) < 0.15 < real - 0.5  # chance on a balanced binary table; real above


def test_wandb_run_holds_data_randomisation_and_ensembles(on_request):
    summary, run_dir = on_request
    (run_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    logged = {}
    for record in records(run_file):
        if record.WhichOneof("record_type") == "history":
            logged |= {item.key or "/".join(item.nested_key): item.value_json for item in record.history.item}
    data = summary["sections"]["sanity"]["data_randomisation"]["explainers"]["saliency"]
    assert float(logged["sanity/saliency/data_delta"]) == pytest.approx(data["delta"]["mean"])
    assert float(logged["sanity/saliency/data_delta_ci95"]) == pytest.approx(data["delta"]["ci95"])
    assert float(logged["sanity/saliency/data_passed"]) == float(data["passed"])
    ensembles = summary["sections"]["agreement"]["ensembles"]["explainers"]["saliency"]
    for metric in ("sa", "ssa", "cdc_k"):
        assert float(logged[f"agreement/saliency/ensembles_{metric}"]) == pytest.approx(ensembles[metric]["mean"])


def test_interrupted_training_resumes_and_a_trained_twin_is_not_trained_again(
    populations, on_request, tmp_path, monkeypatch, capsys
):
    """Interrupted once its second chunk is trained, the report keeps the first chunk; resumed,
    it trains the second chunk only and is interrupted in its maps; resumed again, it reads the
    twin (its file untouched) and ends with the uninterrupted report."""
    real_save, saved = population_fit.save_population, []

    def save(path, *args, **kwargs):
        saved.append(Path(path).name)
        if saved == ["chunk-000.pt", "chunk-001.pt"]:
            raise KeyboardInterrupt
        return real_save(path, *args, **kwargs)

    monkeypatch.setattr(population_fit, "save_population", save)
    command = ["report", "--population", populations["real"]["population"], "--output_dir", str(tmp_path), *OPTIONS,
               "--set", "log_to=none", "--set", f"permute_labels={SEED}"]  # fmt: skip
    with pytest.raises(SystemExit) as stopped:
        evaluate.main(command)
    assert stopped.value.code == 130
    (run_dir,) = tmp_path.iterdir()
    assert twin_population(run_dir) is None and "--resume" in capsys.readouterr().err

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    saved.clear()
    monkeypatch.setattr(maps, "randomisation", interrupted)
    with pytest.raises(SystemExit):
        evaluate.main(["report", "--resume", str(run_dir)])
    assert saved == ["chunk-001.pt"]  # the first chunk kept, not trained again
    trained = twin_population(run_dir)
    stamp = trained.stat().st_mtime_ns
    monkeypatch.undo()
    capsys.readouterr()
    evaluate.main(["report", "--resume", str(run_dir)])
    out = capsys.readouterr().out
    assert "not trained again" in out and "python train.py" not in out
    assert trained.stat().st_mtime_ns == stamp
    assert sections(run_dir) == sections(on_request[1])
    assert (run_dir / protocol.REPORT).is_file()


@pytest.mark.parametrize("setting, message", [
    ("permute_labels=-1", "option permute_labels=-1; expected null"),
    ("permute_labels=true", "option permute_labels=True; expected int | None"),
    ("permuted_population={by_hand}", "options permuted_population='{by_hand}' and permute_labels=1: two"),
])  # fmt: skip
def test_bad_combinations_are_refused(populations, tmp_path, setting, message):
    by_hand = populations["by_hand"]["population"]
    out = tmp_path / "r"
    with pytest.raises(InputError, match=re.escape(message.format(by_hand=by_hand))):
        evaluate.main(["report", "--population", populations["real"]["population"], "--output_dir", str(out),
                       *OPTIONS, "--set", f"permute_labels={SEED}", "--set", setting.format(by_hand=by_hand)])
    assert not out.exists()


def test_a_population_without_its_config_is_refused_with_the_command(populations, tmp_path):
    moved = tmp_path / "moved.pt"
    shutil.copy(populations["real"]["population"], moved)
    with pytest.raises(InputError, match=re.escape(f"{tmp_path / 'config.yaml'} is missing")) as refused:
        evaluate.main(["report", "--population", str(moved), "--output_dir", str(tmp_path / "r"), *OPTIONS,
                       "--set", f"permute_labels={SEED}"])  # fmt: skip
    assert "python train.py" in str(refused.value) and "--data.permute_labels 1" in str(refused.value)
    assert not (tmp_path / "r").exists()


def test_a_folder_of_runs_is_refused_with_the_commands(tmp_path):
    with pytest.raises(InputError, match="a folder of image runs has no one training recipe") as refused:
        training_config(str(tmp_path), SEED)
    assert "--config <run>/config.yaml --data.permute_labels 1" in str(refused.value)


def test_an_untrained_twin_is_refused_before_any_work(populations, tmp_path):
    cfg = ReportConfig(population=populations["real"]["population"], permute_labels=SEED, device="cpu")
    with pytest.raises(InputError, match="option permute_labels=1: no trained twin under"):
        protocol.evaluate_report(cfg, tmp_path)


def test_a_whole_population_twin_is_train_py_with_permuted_labels(tmp_path, capsys):
    """A population trained as one model (``ModulePopulation``, as image populations are): its
    twin, trained with the report's ``data_dir`` given, equals bit for bit the population trained
    by hand with ``--data.permute_labels``; asked again, it is read, not trained again."""
    path = write_table(tmp_path / "t.csv", 2, n=60)
    common = [*data_args(path), "--model", "lightning_modules.ModulePopulation", "--model.net",
              "tests.support.user_nets.TableNet", "--model.net.hidden", "6", "--model.size", "3",
              "--trainer.max_epochs", "1", "--log_to", "none", "--trainer.enable_progress_bar", "false"]  # fmt: skip
    real = train.main([*common, "--output_dir", str(tmp_path / "real")])["population"]
    by_hand = train.main([*common, "--data.permute_labels", "2", "--output_dir", str(tmp_path / "hand")])["population"]
    cfg = ReportConfig(population=real, permute_labels=2, device="cpu", data_dir=path)
    evaluate.train_twin(cfg, tmp_path / "report")
    twin = twin_population(tmp_path / "report")
    assert "--data.path " + path in capsys.readouterr().out
    ours, theirs = (load_population(p)[0].state_dict() for p in (twin, by_hand))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert not all(torch.equal(ours[k], load_population(real)[0].state_dict()[k]) for k in ours)
    evaluate.train_twin(cfg, tmp_path / "report")
    assert "not trained again" in capsys.readouterr().out
