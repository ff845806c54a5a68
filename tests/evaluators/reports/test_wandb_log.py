"""W&B logging of the protocols (evaluators/reports/wandb_log.py): the online/offline rule read
from the environment (never going online), the group per population and the training runs'
ids from train.py's run folders, and an offline run read back from its ``.wandb`` file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

import evaluate
from evaluators.reports.wandb_log import (
    WANDB_PROJECT, Link, log_report, population_link, run_group, table_scalars, wandb_mode,
)  # fmt: skip
from foundation.errors import InputError
from tests.support.wandb_runs import offline_runs


def write_run(folder, model: str, logger: dict | bool) -> None:
    """A train.py run folder's config.yaml (the parts ``population_link`` reads)."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"model": {"class_path": model}, "trainer": {"logger": logger}}))


def wandb_logger(run_id: str, group: str) -> dict:
    return {"class_path": "pytorch_lightning.loggers.WandbLogger", "init_args": {"id": run_id, "group": group}}


@pytest.mark.parametrize(("environ", "mode"), [
    ({}, "offline"),
    ({"WANDB_MODE": "offline"}, "offline"),
    ({"WANDB_MODE": "online"}, "online"),
    ({"WANDB_API_KEY": "k"}, "online"),
    ({"WANDB_API_KEY": "k", "WANDB_MODE": "offline"}, "offline"),
    ({"WANDB_API_KEY": ""}, "offline"),
])  # fmt: skip
def test_default_is_online_only_when_the_environment_says_so(environ, mode, monkeypatch):
    for name in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert wandb_mode("wandb") == mode
    assert wandb_mode("wandb_offline") == "offline" and wandb_mode("wandb_online") == "online"
    assert wandb_mode("none") is None


def test_environment_saying_online_reaches_wandb_init_as_online(tmp_path, monkeypatch):
    """The resolved mode is what ``wandb.init`` gets (a stand-in init: nothing goes online)."""
    import wandb

    seen = {}

    class Stub:
        def log(self, values):
            seen["logged"] = values

        def finish(self):
            pass

    def init(**kwargs):
        seen.update(kwargs)
        return Stub()

    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.setenv("WANDB_MODE", "online")
    run = tmp_path / "runs" / "d" / "p"
    write_run(run, "lightning_modules.PopulationMLP", wandb_logger("r1", "d"))
    log_report("wandb", tmp_path, "t", {"a": 1}, scalars={"x": 1.0}, population=run)
    assert seen["mode"] == "online" and seen["project"] == WANDB_PROJECT and seen["group"] == "d/p"
    assert seen["config"]["wandb_link"] == {"group": "d/p", "training_run_ids": ["r1"], "training_groups": ["d"]}
    assert seen["logged"] == {"x": 1.0}


def test_bad_log_to_names_the_option():
    with pytest.raises(InputError, match=r"option log_to='wandb_offlne'"):
        wandb_mode("wandb_offlne")


def test_table_scalars_name_each_numeric_cell_by_its_row():
    columns = ["row", "kind", "mean", "ci95", "best"]
    rows = [["a", 1, 0.5, 0.25, "x"], ["b", 2, float("nan"), 1, "y"]]
    assert table_scalars("t", columns, rows, 2) == {"t/a/1/mean": 0.5, "t/a/1/ci95": 0.25, "t/b/2/ci95": 1.0}


def test_group_and_training_ids_of_a_population_file_a_run_and_a_folder_of_runs(tmp_path):
    population = tmp_path / "runs" / "german" / "pop-8"
    write_run(population, "lightning_modules.PopulationMLP", wandb_logger("rpop", "german"))  # an old run's group
    (population / "population.pt").write_bytes(b"")
    assert population_link(population / "population.pt") == Link("german/pop-8", ["rpop"], ["german"])
    assert population_link(population) == population_link(population / "population.pt")
    members = tmp_path / "members" / "cnn"
    for seed, logger in enumerate([wandb_logger("r0", "fashion_mnist/cnn"), False, wandb_logger("r2", "x")]):
        run = members / "fashion_mnist" / f"seed{seed}"
        write_run(run, "lightning_modules.ImageClassifier", logger)
        (run / "checkpoints").mkdir()
        (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert population_link(members) == Link("fashion_mnist/cnn", ["r0", "r2"], ["fashion_mnist/cnn", "x"])
    # one member alone is a member of its output_dir's population; its checkpoint file too
    seed0 = members / "fashion_mnist" / "seed0"
    assert population_link(seed0) == Link("fashion_mnist/cnn", ["r0"], ["fashion_mnist/cnn"])
    assert population_link(seed0 / "checkpoints" / "last.ckpt") == population_link(seed0)
    assert run_group(seed0, population=False) == "fashion_mnist/cnn"
    assert run_group(population, population=True) == "german/pop-8"
    outside = tmp_path / "models" / "net.pt"  # a user's file outside any run folder: no training link
    outside.parent.mkdir()
    outside.write_bytes(b"")
    assert population_link(outside) == Link("models/net", [], [])


def test_offline_run_holds_the_scalars_table_image_group_and_training_ids(tmp_path):
    png = tmp_path / "fig.png"
    Image.fromarray(np.full((8, 8, 3), 200, np.uint8)).save(png)
    columns, rows = ["method", "sa", "ssa"], [["saliency", 0.5, 0.25], ["smoothgrad", 0.75, 0.125]]
    population = tmp_path / "runs" / "german" / "pop-8"
    write_run(population, "lightning_modules.PopulationMLP", wandb_logger("rabc", "german"))
    log_report("wandb_offline", tmp_path, "consistency", {"k": 5}, {"table1": (columns, rows)}, {"figure": png},
               table_scalars("table1", columns, rows, 1), population)  # fmt: skip
    (run,) = offline_runs(tmp_path)
    assert (run.project, run.group, run.job_type) == (WANDB_PROJECT, "german/pop-8", "consistency")
    assert run.config["k"] == 5 and run.config["wandb_link"]["training_run_ids"] == ["rabc"]
    assert run.logged["table1/smoothgrad/ssa"] == 0.125 and run.logged["table1/saliency/sa"] == 0.5
    table = json.loads(run.media("table1").read_text())
    assert table["columns"] == columns and table["data"] == rows
    assert run.logged["figure/_type"] == "image-file" and run.media("figure").is_file()


def test_a_name_logged_twice_is_refused_before_anything_is_logged(tmp_path):
    with pytest.raises(ValueError, match=r"W&B names logged twice: \['roar'\]"):
        log_report("none", tmp_path, "t", {}, {"roar": (["a"], [[1]])}, {"roar": tmp_path / "roar.png"})


def test_none_writes_no_run(tmp_path):
    log_report("none", tmp_path, "t", {}, scalars={"x": 1.0})
    assert not (tmp_path / "wandb").exists()


def test_consistency_protocol_logs_table1_to_its_population_group(small_population, tmp_path):
    """Table 1's cells as scalars and a table, the figure, in the population's group."""
    summary = evaluate.main([
        "consistency", "--population", small_population, "--output_dir", str(tmp_path), "--n_sets", "2",
        "--set", "n_points=8", "--set", "strategies=[single,average]", "--set", "n_models=[2]",
        "--set", "watson_c=false", "--set", "device=cpu", "--set", "log_to=wandb_offline",
    ])  # fmt: skip
    (out_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    (run,) = offline_runs(out_dir)
    assert run.group == population_link(small_population).group == f"german/{Path(small_population).parent.name}"
    assert run.config["wandb_link"]["training_run_ids"] == []  # the fixture trained with --log_to none
    for row in summary["rows"]:
        key = f"table1/{row['n_models']}/{row['strategy']}/{row['method']}/{row['metric']}"
        assert run.logged[f"{key}/mean"] == pytest.approx(row["mean"])
    table = json.loads(run.media("table1").read_text())
    assert len(table["data"]) == len(summary["rows"])
    assert run.media("agreement_by_strategy").is_file()


def test_every_protocol_config_takes_log_to_from_the_one_shared_section():
    """``ReportLogging``: every registered protocol's config has ``log_to`` from it (default
    ``wandb``, one declaration), and its check runs before the config's other checks."""
    import dataclasses

    import evaluate  # noqa: F401 (registers every protocol)
    from evaluators.protocols.registry import PROTOCOLS
    from evaluators.reports.wandb_log import ReportLogging

    configs = {name: PROTOCOLS[name].config for name in PROTOCOLS}
    assert len(configs) >= 8
    for name, config in configs.items():
        assert issubclass(config, ReportLogging), name
        (field,) = [f for f in dataclasses.fields(config) if f.name == "log_to"]
        assert field.default == "wandb" and "log_to" not in vars(config).get("__annotations__", {}), name
        # every other option missing or left at its default: the bad log_to is named first
        with pytest.raises(InputError, match=r"option log_to='paper'; expected one of"):
            config(**{f.name: "x" for f in dataclasses.fields(config)
                      if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING},
                   log_to="paper")  # fmt: skip


def test_a_population_file_moved_out_of_its_run_folder_keeps_its_link(tmp_path):
    """train.py records the link in the population file (``training_link``): copied out of its run
    folder, the file names the same group and training run id as in place; a population file
    without the record (written before it) and a model file outside any run fall back to
    ``<folder>/<name>`` with no ids."""
    import shutil

    import torch

    import train
    from lightning_modules.population_io import read_population_file

    import wandb

    try:
        metrics = train.main(["--config", "configs/population.yaml", "--model.size", "2", "--trainer.max_epochs", "1",
                              "--trainer.enable_progress_bar", "false", "--log_to", "wandb_offline", "--output_dir",
                              str(tmp_path / "runs"), "--run_name", "pop-2"])  # fmt: skip
    finally:
        wandb.finish()  # as its own process would: no W&B run of this test is left open for the next
    in_place = population_link(metrics["population"])
    config = yaml.safe_load((Path(metrics["run_dir"]) / "config.yaml").read_text())
    run_id = config["trainer"]["logger"]["init_args"]["id"]
    assert in_place == Link("german/pop-2", [run_id], ["german/pop-2"])
    moved = tmp_path / "elsewhere" / "mine.pt"
    moved.parent.mkdir()
    shutil.copy(metrics["population"], moved)
    assert population_link(moved) == in_place
    payload = torch.load(moved, weights_only=True)
    del payload["metadata"]["wandb_link"]  # as a file written before train.py recorded it
    old = tmp_path / "elsewhere" / "old.pt"
    torch.save(payload, old)
    assert "wandb_link" not in read_population_file(old, mmap=True)["metadata"]
    assert population_link(old) == Link("elsewhere/old", [], [])
