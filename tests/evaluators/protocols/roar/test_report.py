"""evaluators/protocols/roar/report.py: a finished grid's rows (t = 0 the shared clean cell), its
table, CSV and JSON from hand-written cell files, each value against the cell it came from."""

from __future__ import annotations

import csv
import json
import statistics

from evaluators.protocols.roar.grid import RoarGrid, cell_path, grid_cells
from evaluators.protocols.roar.report import COLUMNS, collect, markdown_table, result_rows

GRID = RoarGrid(estimators={"saliency": {}, "random": {}}, fractions=[0.5, 0.0], retrainings=3)
# the retrained accuracies per cell, the clean model's accuracy without retraining
ACCURACIES = {"clean-t00": ([0.9, 0.8, 0.85], 0.95), "saliency-t50": ([0.5, 0.6, 0.4], 0.7),
              "random-t50": ([0.7, 0.75, 0.8], 0.9)}  # fmt: skip


def cells() -> list[dict]:
    out = []
    for c in grid_cells(GRID):
        acc, no_retrain = ACCURACIES[c.name]
        out.append({"estimator": c.estimator, "fraction": c.fraction, "retrain_acc": acc,
                    "retrain_mean": statistics.mean(acc), "retrain_std": statistics.stdev(acc),
                    "no_retrain_acc": no_retrain})  # fmt: skip
    return out


def expected_rows() -> list[list]:
    """By hand: per estimator, t = 0 from the clean cell, then t = 0.5 from its own."""
    out = []
    for estimator in ("saliency", "random"):
        for t, name in ((0.0, "clean-t00"), (0.5, f"{estimator}-t50")):
            acc, no_retrain = ACCURACIES[name]
            out.append([estimator, t, statistics.mean(acc), statistics.stdev(acc), no_retrain, 3])
    return out


def test_rows_take_t0_from_the_clean_cell_and_sort_t():
    rows = result_rows(cells(), GRID)
    assert [[r[c] for c in COLUMNS] for r in rows] == expected_rows()


def test_the_markdown_table_in_percent():
    rows = [{"estimator": "saliency", "fraction": 0.5, "retrain_mean": 0.5, "retrain_std": 0.1, "no_retrain_acc": 0.7,
             "k": 3}]  # fmt: skip
    assert markdown_table(rows) == ("| estimator | t | retrained acc. (mean ± std) | no retraining |\n"
                                    "|---|---|---|---|\n| saliency | 0.5 | 50.00 ± 10.00 | 70.00 |\n")  # fmt: skip


def test_collect_writes_the_rows_from_the_cell_files(tmp_path):
    for cell, record in zip(grid_cells(GRID), cells()):
        cell_path(tmp_path, cell).parent.mkdir(exist_ok=True)
        cell_path(tmp_path, cell).write_text(json.dumps(record))
    summary = collect(tmp_path, GRID, {"note": 1}, "none")
    with (tmp_path / "roar.csv").open() as f:
        written = list(csv.reader(f))
    assert written[0] == COLUMNS
    parsed = [[r[0], float(r[1]), float(r[2]), float(r[3]), float(r[4]), int(r[5])] for r in written[1:]]
    assert parsed == expected_rows()
    assert json.loads((tmp_path / "roar.json").read_text()) == json.loads(json.dumps(summary))
    assert summary["config"] == {"note": 1} and summary["cells"] == cells()
    for png in ("roar.png", "retrain_vs_no_retrain.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"
