"""evaluators/protocols/roar/protocol.py: ``evaluate.py roar`` shards filling one grid folder, and the
folder's name: the same for options that change no number, another for one that does."""

from __future__ import annotations

import json


from evaluators.protocols.roar.protocol import RoarConfig, grid_report_dir
from tests.support.wandb_runs import assert_logged


def test_the_grid_folder_is_named_by_the_options_that_change_its_numbers(tmp_path):
    run = tmp_path / "runs" / "german" / "r"
    run.mkdir(parents=True)

    def folder(**options):
        return grid_report_dir(RoarConfig(run=str(run), output_dir=str(tmp_path / "roar"), **options))

    first = folder()
    assert first.parent == tmp_path / "roar" and first.name.startswith("german-")  # the run's dataset folder
    assert len(first.name) == len("german-") + 12
    assert (first / "config.yaml").is_file()
    assert folder(log_to="none", cache_dir=str(tmp_path / "maps"), cells_per_population=1) == first
    assert folder(retrainings=3) != first and folder(seed=1) != first and folder(data={"subset": 5}) != first
    # channels-last (the default since issue 42) changes numbers by rounding only: a grid named before it
    # existed keeps its name; the NCHW layout asked for is another grid
    assert folder(channels_last=True) == first and folder(channels_last=False) != first


def test_evaluate_py_roar_shards_fill_one_folder(tmp_path):
    """``evaluate.py roar --shard i/k`` on a train.py run: both shards land in the grid's one
    folder (named by its config), the second writes the report, a third call only collects."""
    import evaluate
    import train

    train.main(["--trainer.max_epochs", "1", "--log_to", "none", "--output_dir", str(tmp_path / "runs"),
                "--run_name", "r", "--trainer.enable_progress_bar", "false"])  # fmt: skip
    config = tmp_path / "roar.yaml"
    config.write_text(f"run: {tmp_path / 'runs' / 'german' / 'r'}\nestimators: {{saliency: {{}}, random: {{}}}}\n"
                      "fractions: [0.0, 0.5]\nretrainings: 2\ntrainer: {max_epochs: 1, accelerator: cpu}\n"
                      f"log_to: wandb_offline\ndevice: cpu\noutput_dir: {tmp_path / 'roar'}\n")  # fmt: skip
    assert evaluate.main(["roar", "--config", str(config), "--shard", "1/2"]) == {}
    summary = evaluate.main(["roar", "--config", str(config), "--shard", "0/2"])
    (grid,) = (tmp_path / "roar").iterdir()
    assert grid.name.startswith("german-") and (grid / "roar.json").is_file()
    cells = sorted(p.name for p in (grid / "cells").iterdir())
    assert cells == ["clean-t00.json", "random-t50.json", "saliency-t50.json"]
    assert len(summary["rows"]) == 4 and summary["rows"][0]["k"] == 2
    table = (grid / "table.md").read_text().splitlines()  # the report's table, one line per row of roar.json
    rows = json.loads((grid / "roar.json").read_text())["rows"]
    assert len(table) == 2 + len(rows)
    for line, r in zip(table[2:], rows):
        assert line.split(" | ")[:2] == [f"| {r['estimator']}", f"{r['fraction']:.1f}"]
        assert f"{100 * r['retrain_mean']:.2f} ± {100 * r['retrain_std']:.2f}" in line
    (saliency,) = [r for r in rows if (r["estimator"], r["fraction"]) == ("saliency", 0.5)]
    assert_logged(grid, "roar", tmp_path / "runs" / "german" / "r", {
        "roar/saliency/0.5/retrain_mean": saliency["retrain_mean"]}, ["roar"], ["retrained", "retrain_vs_no_retrain"])
    again = evaluate.main(["roar", "--config", str(config), "--set", "cells_per_population=1"])
    assert again["rows"] == summary["rows"] and len(list((tmp_path / "roar").iterdir())) == 1
