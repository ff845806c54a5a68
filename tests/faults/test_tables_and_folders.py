"""Issue 41, real-world tables and folders with the default options: a table of integer counts
(a rare count only in the test split) and one of pixel intensities (scikit-learn's digits, a
table these tests never wrote) train and go through the consistency protocol; a stray 'abc'
in a numeric column, duplicate headers and a column of 7,000 distinct strings end in one short
line naming the raw value, both positions, or the count and memory; a category seen only at
test time is encoded all-zero with one warning line; an image folder of one class and a
streamed folder with an image of another size are refused naming the folder or the file."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import evaluate
import train
from datamodules import CSVDataModule, ImageFolderDataModule, InputError
from foundation.errors import shorten
from tests.support.helpers import assert_one_line_error, run_in_process
from tests.datamodules.test_images import make_folder


def short(message: str, path: str) -> bool:
    """At most about 300 characters besides the file's path (one line, first values only)."""
    return "\n" not in message.strip() and len(message.replace(str(path), "")) <= 320


def counts_table(path: Path, n: int = 300) -> dict:
    """Poisson counts (visits, claims) and an age; one row of the seeded stratified split's test
    rows holds a claim count of 9, beyond every training row (as a rare count in a risk table)."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"visits": rng.poisson(1.5, n), "claims": rng.poisson(0.7, n),
                          "age": rng.integers(18, 80, n)})  # fmt: skip
    frame["risk"] = (frame.visits + frame.claims + rng.normal(0, 1, n) > 2.5).astype(int)
    _, test = train_test_split(np.arange(n), test_size=0.2, random_state=0, stratify=frame.risk)
    frame.loc[test[0], "claims"] = 9
    assert (frame.claims == 9).sum() == 1 and frame.claims.drop(index=test[0]).max() < 9
    frame.to_csv(path, index=False)
    return {"path": str(path), "target": "risk", "rare_row": int(test[0]), "test": test}


def digits_table(path: Path, n: int = 400) -> dict:
    """The first ``n`` of scikit-learn's 8x8 digits: 64 pixel columns of intensities 0-16."""
    frame = load_digits(as_frame=True).frame.iloc[:n]
    frame.to_csv(path, index=False)
    return {"path": str(path), "target": "target"}


TABLES = {"counts": counts_table, "digits": digits_table}


def train_args(table: dict) -> list[str]:
    return ["--data", "CSVDataModule", "--data.path", table["path"], "--data.target", table["target"]]


@pytest.mark.parametrize("name", sorted(TABLES))
def test_integer_tables_train_and_go_through_the_consistency_protocol_with_defaults(name, tmp_path, caplog):
    """No option: integer columns are numeric, the training log lists every column's kind and
    the rule that gave it, and a population of 4 goes through ``evaluate.py consistency``."""
    table = TABLES[name](tmp_path / f"{name}.csv")
    with caplog.at_level(logging.WARNING):
        population = train.main(["--config", "configs/population.yaml", *train_args(table), "--model.size", "4",
                                 "--model.hidden", "[8]", "--trainer.max_epochs", "1", "--log_to", "none",
                                 "--trainer.enable_progress_bar", "false", "--output_dir", str(tmp_path / "runs")])
    kinds = next(r.getMessage() for r in caplog.records if "column kinds:" in r.getMessage())
    expected = "3 numeric (integers): visits, claims, age" if name == "counts" else "numeric (integers): pixel_0_1"
    assert expected in kinds and "Rule: numbers, integers included, are numeric" in kinds
    assert "categorical" not in kinds.split("Rule:")[0] and len(kinds) < 800
    assert "not in the training split" not in caplog.text
    summary = evaluate.main(["consistency", "--config", "configs/consistency/table.yaml",
                             "--population", population["population"], "--n_sets", "2",
                             "--output_dir", str(tmp_path / "consistency"), "--set", "n_models=[2]",
                             "--set", "methods=[saliency]", "--set", "n_points=6", "--set", "k=2",
                             "--set", "strategies=[single]", "--set", "watson_c=false", "--set", "device=cpu"])
    rows = [r for r in summary["rows"] if r["metric"] == "sa"]
    assert rows and all(0.0 <= r["mean"] <= 1.0 for r in rows)


def test_describe_lists_each_kind_with_its_rule(tmp_path):
    table = counts_table(tmp_path / "counts.csv")
    result = run_in_process("-m", "datamodules.describe", table["path"], "--target", "risk")
    out = " ".join(result.stdout.split())
    assert result.returncode == 0, result.stderr
    assert "column kinds: 3 numeric (integers): visits, claims, age." in out
    assert "integer_categories: N takes integer columns with at most N distinct values as categorical" in out
    opted = run_in_process("-m", "datamodules.describe", table["path"], "--target", "risk",
                           "--integer-categories", "10")  # fmt: skip
    assert "categorical (integers with at most 10 values, option integer_categories)" in " ".join(opted.stdout.split())


def test_a_category_seen_only_at_test_time_is_all_zero_with_one_warning(tmp_path, caplog):
    """Declared categorical: the rare count and 40 more unseen values become all-zero one-hots;
    one warning line names the column, the first values with their counts, and how many more."""
    table = counts_table(tmp_path / "counts.csv")
    frame = pd.read_csv(table["path"])
    many = table["test"][1:41]
    frame.loc[many, "claims"] = 100 + np.arange(40)
    frame.to_csv(table["path"], index=False)
    dm = CSVDataModule(path=table["path"], target="risk", categorical=["claims"])
    with caplog.at_level(logging.WARNING):
        x_test, _ = dm.test_tensors
    warnings = [r.getMessage() for r in caplog.records if "not in the training split" in r.getMessage()]
    assert len(warnings) == 1 and short(warnings[0], table["path"]), warnings
    assert "column 'claims': 41 rows" in warnings[0] and "'9' (1 row)" in warnings[0] and " more;" in warnings[0]
    assert "encoded as all-zero one-hot (option unseen_category: error refuses them)" in warnings[0]
    claims = [i for i, name in enumerate(dm.feature_names) if name.startswith("claims=")]
    mean, std = (torch.tensor(dm.fitted_transform[k], dtype=torch.float64)[claims] for k in ("mean", "std"))
    rare = list(table["test"]).index(table["rare_row"])
    assert torch.allclose(x_test[rare, claims].double(), -mean / std, atol=1e-6)
    with pytest.raises(InputError, match=r"column 'claims' holds '9' \(data row \d+, 41 such rows\)") as err:
        CSVDataModule(path=table["path"], target="risk", categorical=["claims"], unseen_category="error").test_tensors
    assert short(str(err.value), table["path"])


def test_a_stray_word_in_a_numeric_column_is_named_as_written(tmp_path):
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"income": rng.normal(50, 12, 200).round(0).astype(str), "y": rng.integers(0, 2, 200)})
    frame.loc[57, "income"] = "abc"
    path = tmp_path / "income.csv"
    frame.to_csv(path, index=False)
    result = run_in_process("train.py", *train_args({"path": str(path), "target": "y"}), "--trainer.max_epochs", "1",
                            "--log_to", "none", "--output_dir", str(tmp_path / "runs"))  # fmt: skip
    assert_one_line_error(result, "column 'income' holds 1 non-numeric value among 199 numbers: 'abc' (first at "
                                  "data row 58); expected numbers")  # fmt: skip
    assert short(result.stderr, path) and not (tmp_path / "runs").exists()
    frame.loc[100:159, "income"] = [f"n/a-{i}" for i in range(60)]  # 61 stray values: the first ones, then how many
    frame.to_csv(path, index=False)
    stray = r"holds 61 non-numeric values among 139 numbers: 'abc', 'n/a-0', .* more \("
    with pytest.raises(InputError, match=stray) as err:
        CSVDataModule(path=str(path), target="y").feature_names
    assert short(str(err.value), path)
    frame["income"] = np.where(np.arange(200) < 150, rng.choice(["low", "high"], 200), frame.income)
    frame.to_csv(path, index=False)  # mostly words: a categorical column with a few numbers among its categories
    assert CSVDataModule(path=str(path), target="y").fitted_transform["features"][0]["kind"] == "categorical"


def test_duplicate_headers_are_refused_naming_both_positions(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("x1,x2,x1,y\n" + "".join(f"{i},{i % 3},{i * 2},{i % 2}\n" for i in range(20)))
    result = run_in_process("-m", "datamodules.describe", str(path), "--target", "y")
    assert_one_line_error(result, f"error: {path}: the header names 'x1' (columns 1 and 3) twice; expected distinct")


def test_a_column_of_7000_distinct_strings_is_refused_with_count_and_memory(tmp_path):
    names = [f"customer-{i:05d}" for i in range(7000)] + [f"customer-{i:05d}" for i in range(500)]
    frame = pd.DataFrame({"name": names, "x": np.arange(7500) % 7 * 0.5, "y": np.arange(7500) % 2})
    path = tmp_path / "names.csv"
    frame.to_csv(path, index=False)
    result = run_in_process("train.py", *train_args({"path": str(path), "target": "y"}), "--trainer.max_epochs", "1",
                            "--log_to", "none", "--output_dir", str(tmp_path / "runs"))  # fmt: skip
    assert_one_line_error(result, "column 'name' (text) holds 7,000 distinct values ('customer-00000'")
    for part in ("one-hot encoding would make 7,000 columns, 420 MB for 7,500 rows",
                 "expected at most max_categories=1000", "option drop"):  # fmt: skip
        assert part in result.stderr
    assert short(result.stderr, path) and not (tmp_path / "runs").exists()


def test_shorten_lists_the_first_values_then_how_many_more():
    text = shorten(range(10_000))
    assert text.startswith("0, 1, 2") and text.endswith(" more") and len(text) <= 320
    assert shorten(["a", "b"]) == "'a', 'b'"


def test_an_image_folder_of_one_class_is_refused(tmp_path):
    make_folder(tmp_path / "one", classes=["cat"], n=2)
    result = run_in_process("-m", "datamodules.describe", str(tmp_path / "one"))
    assert_one_line_error(result, "one: the split folders hold 1 class folder(s) ['cat']; expected at least 2 classes")


def test_a_streamed_folder_names_the_image_of_another_size(tmp_path):
    make_folder(tmp_path / "images", n=2, size=8)
    odd = tmp_path / "images" / "train" / "dog" / "001.png"
    Image.fromarray(np.zeros((8, 10, 3), np.uint8)).save(odd)
    dm = ImageFolderDataModule(root=str(tmp_path / "images"), cache_dir=str(tmp_path / "cache"), in_memory=False,
                               batch_size=6, mean=[0.5] * 3, std=[0.5] * 3)  # fmt: skip
    with pytest.raises(InputError, match=rf"image file '{odd}' is 10x8; expected 8x8 like '.*bird/000.png'"):
        next(iter(dm.train_dataloader()))
