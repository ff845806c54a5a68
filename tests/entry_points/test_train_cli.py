"""train.py / evaluate.py end to end on the embedded German Credit data."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import wandb

import evaluate
import train
from datamodules import InputError
from evaluators.reports.wandb_log import Link, population_link
from tests.support.helpers import assert_one_line_error, run_in_process
from tests.support import ROOT
from tests.support.wandb_runs import offline_runs


def run_train(tmp_path: Path, *extra: str) -> dict:
    return train.main(["--trainer.max_epochs", "3", "--output_dir", str(tmp_path), *extra])


@pytest.fixture(scope="module")
def german_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    return run_train(out, "--log_to", "wandb_offline", "--run_name", "e2e")


def test_german_beats_majority_rate_clearly(german_run):
    majority = german_run["data"]["majority_rate_test"]
    assert majority == pytest.approx(0.70)
    assert german_run["test_acc"] >= majority + 0.04


def test_run_folder_holds_config_checkpoint_metrics_and_wandb_offline_run(german_run):
    run_dir = Path(german_run["run_dir"])
    assert run_dir.name == "e2e" and run_dir.parent.name == "german"
    assert (run_dir / "config.yaml").is_file() and (run_dir / "metrics.json").is_file()
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    offline_runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 1
    assert list(offline_runs[0].glob("run-*.wandb")), "the offline run holds its .wandb log for `wandb sync`"


def test_training_run_logs_into_the_group_its_protocols_log_into_and_they_find_its_id(german_run, tmp_path):
    """A model trained alone is a member of its output_dir's population: group <dataset>/<output_dir>;
    a protocol on the run folder (``population_link``) takes that group and the W&B run's id."""
    wandb.finish()
    run_dir = Path(german_run["run_dir"])
    (run,) = offline_runs(run_dir)
    assert run.group == f"german/{run_dir.parent.parent.name}"
    assert population_link(run_dir) == Link(run.group, [run.folder.name.rsplit("-", 1)[-1]], [run.group])
    population = train.main(["--config", "configs/population.yaml", "--model.size", "2", "--trainer.max_epochs", "1",
                             "--trainer.enable_progress_bar", "false", "--log_to", "wandb_offline",
                             "--output_dir", str(tmp_path), "--run_name", "pop"])  # fmt: skip
    wandb.finish()
    (pop_run,) = offline_runs(tmp_path / "german" / "pop")
    assert pop_run.group == "german/pop" == population_link(population["population"]).group
    assert population_link(population["population"]).training_run_ids == [pop_run.folder.name.rsplit("-", 1)[-1]]


def test_evaluate_reproduces_the_test_accuracy(german_run):
    metrics = evaluate.main(["run", german_run["run_dir"]])
    assert metrics["test_acc"] == pytest.approx(german_run["test_acc"], abs=1e-6)


def test_evaluate_run_finds_a_tabular_run_whose_data_moved(tmp_path, data_dir):
    (tmp_path / "old" / "german").mkdir(parents=True)
    shutil.copy(data_dir / "german" / "german.data", tmp_path / "old" / "german")
    trained = run_train(tmp_path, "--log_to", "none", "--run_name", "moved", "--trainer.max_epochs", "1",
                        "--data.init_args.data_dir", str(tmp_path / "old"))  # fmt: skip
    (tmp_path / "old").rename(tmp_path / "new")
    with pytest.raises(InputError, match=r"data_dir '.*old' does not exist"):
        evaluate.main(["run", trained["run_dir"]])
    metrics = evaluate.main(["run", trained["run_dir"], "--data_dir", str(tmp_path / "new")])
    assert metrics["test_acc"] == pytest.approx(trained["test_acc"], abs=1e-6)
    assert metrics["data"]["source"] == str(tmp_path / "new" / "german" / "german.data")


def _weights(run: dict) -> dict:
    ckpt = torch.load(Path(run["run_dir"]) / "checkpoints" / "last.ckpt", weights_only=True)
    return ckpt["state_dict"]


def test_same_seed_gives_identical_weights_and_runs_are_never_overwritten(tmp_path):
    first = run_train(tmp_path, "--log_to", "none", "--run_name", "same")
    second = run_train(tmp_path, "--log_to", "none", "--run_name", "same")
    other = run_train(tmp_path, "--log_to", "csv", "--run_name", "other", "--model.init_args.seed", "1")
    assert Path(second["run_dir"]).name == "same-2"
    assert (Path(other["run_dir"]) / "csv" / "metrics.csv").is_file()
    w1, w2, w3 = _weights(first), _weights(second), _weights(other)
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    assert not torch.equal(w1["net.0.weight"], w3["net.0.weight"])


def test_a_run_folder_of_lightnings_csv_logger_resumes_and_keeps_its_table(tmp_path):
    """Run folders of before name Lightning's own CSVLogger in their config.yaml: one resumes, its
    first table kept as it was, the resumed epoch's rows in ``csv/resume-1/``."""
    run_dir = Path(run_train(tmp_path, "--log_to", "csv", "--run_name", "old", "--trainer.max_epochs", "1")["run_dir"])
    config = run_dir / "config.yaml"
    assert "foundation.csv_logger.CSVLogger" in config.read_text()
    old = config.read_text().replace("foundation.csv_logger.CSVLogger", "pytorch_lightning.loggers.CSVLogger")
    config.write_text(old)
    first = (run_dir / "csv" / "metrics.csv").read_text()
    train.main(["--resume", str(run_dir), "--trainer.max_epochs", "2"])
    assert (run_dir / "csv" / "metrics.csv").read_text() == first
    with open(run_dir / "csv" / "resume-1" / "metrics.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    epochs = {float(r["epoch"]) for r in rows if r["epoch"]}
    assert 1.0 in epochs and 0.0 not in epochs  # the resumed epoch (then the test's rows), not the first


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """train.py with ``args``: as a subprocess for the unknown-option case (one real command line
    per error test), in this process for the others (tests.support.helpers.run_in_process)."""
    args = ("train.py", "--output_dir", str(tmp_path / "out"), "--log_to", "none", *args)
    if "--trainer.max_epoch" not in args:
        return run_in_process(*args)
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data.init_args.dataset", "hmda"], "unknown dataset 'hmda'"),
        (["--config", "configs/heloc.yaml"], "dataset 'heloc' has no embedded copy; pass data_dir"),
        (["--data.init_args.data_dir", "/nonexistent"], "data_dir '/nonexistent' does not exist"),
        (["--model.init_args.explain_output", "margin"], "explain_output"),
        (["--trainer.max_epoch", "3"], "unrecognized arguments: --trainer.max_epoch 3; see train.py --help"),
        (["--log_to", "tensorboard"], "log_to"),
        (["--model.init_args.lr", "fast"], "option model.lr: expected a float. Got value: fast"),
        (["--config", "{bad}"], "not valid YAML: expected ',' or ']', but got '<stream end>' at line 3, column 1"),
        (["--config", "{missing}"], "missing.yaml: file not found"),
    ],
)
def test_bad_input_exits_nonzero_with_one_clear_message_and_no_output(tmp_path, args, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  max_epochs: [3\n")
    result = _cli(tmp_path, *(a.format(bad=bad, missing=tmp_path / "missing.yaml") for a in args))
    assert_one_line_error(result, message)
    assert "Seed set" not in result.stdout + result.stderr and "LightningCLI's args" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_single_model_run_resumes_from_its_last_epoch(tmp_path, monkeypatch):
    reference = run_train(tmp_path, "--log_to", "none", "--run_name", "reference", "--trainer.max_epochs", "4")
    monkeypatch.setenv("RELEXP_TEST_INTERRUPT", "1")
    # InterruptChunk fires in a run folder ending with "chunk-001", at the start of epoch 2
    args = ["--log_to", "none", "--run_name", "single-chunk-001", "--trainer.max_epochs", "4",
            "--trainer.callbacks+=tests.support.helpers.InterruptChunk"]  # fmt: skip
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_train(tmp_path, *args)
    run_dir = tmp_path / "german" / "single-chunk-001"
    assert not (run_dir / "metrics.json").exists()
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 1
    monkeypatch.delenv("RELEXP_TEST_INTERRUPT")
    resumed = train.main(["--resume", str(run_dir)])
    w_ref, w_res = _weights(reference), _weights(resumed)
    assert all(torch.equal(w_ref[k], w_res[k]) for k in w_ref)
    assert resumed["test_acc"] == reference["test_acc"]


def test_resumed_run_continues_the_same_wandb_run(tmp_path, monkeypatch):
    wandb.finish()  # each part runs as in its own process: no W&B run of an earlier test is still open
    monkeypatch.setenv("RELEXP_TEST_INTERRUPT", "1")
    args = ["--log_to", "wandb_offline", "--run_name", "w-chunk-001", "--trainer.max_epochs", "3",
            "--trainer.callbacks+=tests.support.helpers.InterruptChunk"]  # fmt: skip
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_train(tmp_path, *args)
    wandb.finish()  # the crashed process's W&B run ends with it
    monkeypatch.delenv("RELEXP_TEST_INTERRUPT")
    run_dir = tmp_path / "german" / "w-chunk-001"
    train.main(["--resume", str(run_dir)])
    wandb.finish()
    runs = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 2  # one W&B directory per process, both for one W&B run id
    # the id from each folder's run-<id>.wandb: folder names are offline-run-<second>-<id>, and W&B
    # appends "-1" to the second one when both parts started within the same second
    ids = {next(path.glob("run-*.wandb")).stem.removeprefix("run-") for path in runs}
    assert len(ids) == 1 and f"id: {ids.pop()}" in (run_dir / "config.yaml").read_text()


def test_wandb_run_ids_stay_strings_through_yaml(monkeypatch):
    import uuid

    from jsonargparse._loaders_dumpers import yaml_load  # what reads config.yaml back on --resume

    assert yaml_load("id: 12e409000000") == {"id": float("inf")}  # the trap: such hex reads as a number
    hex_like_a_float = uuid.UUID("12e40900-0000-4000-8000-000000000000")
    monkeypatch.setattr(uuid, "uuid4", lambda: hex_like_a_float)
    run_id = train.wandb_run_id(None)
    assert yaml_load(f"id: {run_id}") == {"id": run_id}
