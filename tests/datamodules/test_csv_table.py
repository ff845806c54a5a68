"""CSVDataModule on small tables of its own: kinds, missing values, categories, splits, the
transform fitted on training rows and saved with the run, train.py/evaluate.py end to end, and
bad input ending in one line with exit status 2."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from sklearn.model_selection import train_test_split

import evaluate
import train
from datamodules import CSVDataModule, FinancialDataModule, InputError
from foundation.errors import run_entry_point


def make_table(n: int = 90, classes: tuple[str, ...] = ("bad", "good"), seed: int = 0) -> pd.DataFrame:
    """Rows with a numeric, a text categorical, a few-valued integer, an ID and a constant column."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "customer": [f"c{i:03d}" for i in range(n)],
        "income": rng.normal(50.0, 12.0, n).round(3),
        "city": rng.choice(["paris", "oslo", "rome"], n),
        "children": rng.integers(0, 4, n),
        "country": "fr",
        "label": rng.choice(list(classes), n),
    })  # fmt: skip


def write(frame: pd.DataFrame, path: Path) -> str:
    if path.suffix == ".parquet":
        frame.to_parquet(path)
    else:
        frame.to_csv(path, index=False)
    return str(path)


@pytest.fixture
def table(tmp_path) -> tuple[pd.DataFrame, str]:
    frame = make_table()
    return frame, write(frame, tmp_path / "scores.csv")


def test_binary_table_kinds_encoding_and_dropped_columns_with_warnings(table, tmp_path, caplog):
    frame, path = table
    dm = CSVDataModule(path=path, target="label")
    assert "_arrays" not in dm.__dict__  # num_classes and class names come from the target column alone
    assert (dm.num_classes, dm.class_names, dm.name) == (2, ["bad", "good"], "scores")
    with caplog.at_level(logging.WARNING):
        names = dm.feature_names
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "'customer': 'ID-like'" in messages and "'country': 'constant'" in messages
    assert ("column kinds: 1 numeric (numbers): income; 1 categorical (text): city (3 categories); "
            "1 numeric (integers): children. Rule: numbers, integers included, are numeric") in messages
    assert names == ["income", "city=oslo", "city=paris", "city=rome", "children"]
    opted = CSVDataModule(path=path, target="label", integer_categories=4)  # integers with <= 4 values categorical
    assert opted.feature_names == [*names[:-1], *[f"children={k}" for k in range(4)]]
    y = torch.cat([dm.train_tensors[1], dm.test_tensors[1]])
    assert torch.bincount(y).tolist() == [(frame.label == "bad").sum(), (frame.label == "good").sum()]
    parquet = CSVDataModule(path=write(frame, tmp_path / "scores.parquet"), target="label")
    for a, b in zip([*dm.train_tensors, *dm.test_tensors], [*parquet.train_tensors, *parquet.test_tensors]):
        assert torch.equal(a, b)
    assert FinancialDataModule().num_classes == 2


def test_three_classes_sorted_and_mapped_with_a_stratified_split(tmp_path):
    frame = make_table(120, classes=("low", "mid", "high"))
    dm = CSVDataModule(path=write(frame, tmp_path / "three.csv"), target="label", test_fraction=0.25)
    assert (dm.num_classes, dm.class_names) == (3, ["high", "low", "mid"])
    idx_train, idx_test = train_test_split(np.arange(120), test_size=0.25, random_state=0, stratify=frame.label)
    codes = frame.label.map({"high": 0, "low": 1, "mid": 2}).to_numpy()
    assert dm.train_tensors[1].tolist() == codes[idx_train].tolist()
    assert dm.test_tensors[1].tolist() == codes[idx_test].tolist()
    info = dm.describe()
    assert info["classes"] == {c: int((frame.label == c).sum()) for c in ["high", "low", "mid"]}
    assert "positive_rate" not in info


def test_split_is_reproducible_by_seed_and_stratified(table):
    frame, path = table
    a, b = CSVDataModule(path=path, target="label"), CSVDataModule(path=path, target="label")
    c = CSVDataModule(path=path, target="label", split_seed=1)
    assert torch.equal(a.test_tensors[0], b.test_tensors[0]) and torch.equal(a.train_tensors[0], b.train_tensors[0])
    assert not torch.equal(a.test_tensors[0], c.test_tensors[0])
    for dm in (a, c):
        rate = dm.test_tensors[1].float().mean().item()
        assert abs(rate * len(dm.test_tensors[1]) - (frame.label == "good").mean() * 18) <= 1


def test_transform_is_fitted_on_training_rows_only(table):
    frame, path = table
    dm = CSVDataModule(path=path, target="label", categorical=["children"], numeric=[])
    idx_train, idx_test = train_test_split(np.arange(len(frame)), test_size=0.2, random_state=0,
                                           stratify=frame.label)  # fmt: skip
    raw = pd.concat([frame[["income"]].astype(np.float64),
                     *[(frame.city == c).astype(np.float64).rename(c) for c in ["oslo", "paris", "rome"]],
                     *[(frame.children == k).astype(np.float64).rename(k) for k in range(4)]], axis=1).to_numpy()
    mean = raw[idx_train].mean(axis=0)
    std = np.sqrt(((raw[idx_train] - mean) ** 2).mean(axis=0))
    assert np.allclose(dm.fitted_transform["mean"], mean, rtol=1e-12, atol=0)
    assert np.allclose(dm.fitted_transform["std"], std, rtol=1e-12, atol=0)
    assert not np.allclose(raw.mean(axis=0)[0], mean[0], rtol=1e-6)  # all rows' mean differs: the check can fail
    assert torch.allclose(dm.train_tensors[0].double(), torch.tensor((raw[idx_train] - mean) / std), atol=1e-6)
    assert torch.allclose(dm.test_tensors[0].double(), torch.tensor((raw[idx_test] - mean) / std), atol=1e-6)


def test_saved_transform_reloaded_gives_identical_tensors_and_is_not_refitted(table, tmp_path):
    frame, path = table
    dm = CSVDataModule(path=path, target="label")
    fitted = yaml.safe_load(yaml.safe_dump(dm.fitted_transform))  # as config.yaml carries it
    again = CSVDataModule(path=path, target="label", fitted=fitted)
    for a, b in zip([*dm.train_tensors, *dm.test_tensors], [*again.train_tensors, *again.test_tensors]):
        assert torch.equal(a, b)
    changed = frame.copy()
    changed["income"] = changed["income"] * 2  # other statistics: a refit would move every row
    changed_path = write(changed, tmp_path / "changed.csv")
    reloaded = CSVDataModule(path=changed_path, target="label", fitted=fitted)
    refitted = CSVDataModule(path=changed_path, target="label")
    mean, std = dm.fitted_transform["mean"][0], dm.fitted_transform["std"][0]
    expected = (changed["income"].to_numpy() - mean) / std
    x_test = reloaded.test_tensors[0][:, 0].double()
    idx_test = train_test_split(np.arange(len(frame)), test_size=0.2, random_state=0, stratify=frame.label)[1]
    assert torch.allclose(x_test, torch.tensor(expected[idx_test]), atol=1e-6)
    assert not torch.allclose(refitted.test_tensors[0][:, 0], reloaded.test_tensors[0][:, 0], atol=1e-3)


def with_missing(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    frame.loc[[4, 7, 30], "income"] = np.nan
    frame.loc[[11], "city"] = np.nan
    return frame


def test_missing_values_error_names_column_count_and_first_row(tmp_path):
    path = write(with_missing(make_table()), tmp_path / "gaps.csv")
    with pytest.raises(InputError, match=r"gaps.csv: column 'income' has 3 missing values \(first at data row 5\)"):
        CSVDataModule(path=path, target="label").feature_names


def test_missing_values_imputed_with_training_median_and_mode(tmp_path, caplog):
    frame = with_missing(make_table())
    dm = CSVDataModule(path=write(frame, tmp_path / "gaps.csv"), target="label", missing="impute")
    with caplog.at_level(logging.WARNING):
        x_train, _ = dm.train_tensors
    assert "'income': 3 missing values imputed" in caplog.text and "'city': 1 missing values imputed" in caplog.text
    idx_train = train_test_split(np.arange(len(frame)), test_size=0.2, random_state=0, stratify=frame.label)[0]
    train_rows = frame.iloc[idx_train]
    median = float(np.median(train_rows.income.dropna()))
    mode = train_rows.city.value_counts().sort_index().idxmax()
    features = {f["column"]: f for f in dm.fitted_transform["features"]}
    assert features["income"]["median"] == median and features["city"]["mode"] == mode
    filled = train_rows.income.fillna(median).to_numpy()
    assert torch.allclose(x_train[:, 0].double(), torch.tensor((filled - filled.mean()) / filled.std()), atol=1e-6)


def test_missing_values_drop_their_rows_per_column_policy(tmp_path, caplog):
    frame = with_missing(make_table())
    path = write(frame, tmp_path / "gaps.csv")
    with caplog.at_level(logging.WARNING):
        dm = CSVDataModule(path=path, target="label", missing={"income": "drop", "city": "impute"})
        rows = dm.describe()["rows"]
    assert rows == len(frame) - 3 and "dropped 3 rows missing column 'income'" in caplog.text
    with pytest.raises(InputError, match="column 'city' has 1 missing values"):
        CSVDataModule(path=path, target="label", missing={"income": "drop"}).feature_names


def test_category_only_in_the_test_split_is_an_error_or_all_zero(tmp_path, caplog):
    frame = make_table()
    frame["split"] = ["test" if i % 5 == 0 else "train" for i in range(len(frame))]
    frame.loc[[5, 10], "city"] = "lima"  # test rows only
    path = write(frame, tmp_path / "cities.csv")
    with pytest.raises(InputError, match=r"column 'city' holds 'lima' \(data row 6, 2 such rows\), a category not in"):
        CSVDataModule(path=path, target="label", split_column="split", unseen_category="error").feature_names
    dm = CSVDataModule(path=path, target="label", split_column="split")  # default: ignore
    with caplog.at_level(logging.WARNING):
        x_test, _ = dm.test_tensors
    assert ("column 'city': 2 rows (first at data row 6) hold values not in the training split: 'lima' (2 rows); "
            "encoded as all-zero one-hot") in caplog.text
    assert "city=lima" not in dm.feature_names and len(dm.test_tensors[1]) == 18
    cities = [dm.feature_names.index(f"city={c}") for c in ["oslo", "paris", "rome"]]
    mean, std = (torch.tensor(dm.fitted_transform[k], dtype=torch.float64)[cities] for k in ("mean", "std"))
    assert torch.allclose(x_test[[1, 2]][:, cities].double(), (0 - mean / std).expand(2, 3), atol=1e-6)


def test_constant_or_id_column_named_in_columns_is_refused(table):
    _, path = table
    for column, kind in (("country", "constant"), ("customer", "ID-like")):
        with pytest.raises(InputError, match=f"option columns names '{column}', which holds .* \\({kind}\\)"):
            CSVDataModule(path=path, target="label", columns=["income", column]).feature_names
    dm = CSVDataModule(path=path, target="label", columns=["income", "city"], drop=["city"])
    assert dm.feature_names == ["income"]


def test_separate_test_file(tmp_path):
    frame = make_table(100)
    train_path, test_path = write(frame[:70], tmp_path / "a.csv"), write(frame[70:], tmp_path / "b.parquet")
    dm = CSVDataModule(path=train_path, target="label", test_path=test_path, numeric=["children"])
    assert (len(dm.train_tensors[1]), len(dm.test_tensors[1])) == (70, 30)
    income = frame.income.to_numpy()
    expected = (income[70:] - income[:70].mean()) / income[:70].std()
    assert torch.allclose(dm.test_tensors[0][:, 0].double(), torch.tensor(expected), atol=1e-6)


def run_cli(main, args, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stop:
        run_entry_point(main, args)
    return stop.value.code, capsys.readouterr().err


def test_train_on_a_csv_then_evaluate_the_run(table, tmp_path, capsys):
    _, path = table
    metrics = train.main(["--data", "CSVDataModule", "--data.path", path, "--data.target", "label",
                          "--model.hidden", "[8]", "--trainer.max_epochs", "1", "--log_to", "none",
                          "--output_dir", str(tmp_path / "runs"), "--run_name", "csv"])  # fmt: skip
    run_dir = Path(metrics["run_dir"])
    assert run_dir == tmp_path / "runs" / "scores" / "csv"
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["data"]["init_args"]["fitted"]["feature_names"][0] == "income"
    evaluated = evaluate.main(["run", str(run_dir)])
    assert evaluated["test_acc"] == pytest.approx(metrics["test_acc"], abs=1e-6)
    assert evaluated["data"]["classes"] == metrics["data"]["classes"]


@pytest.mark.parametrize(
    ("change", "args", "message"),
    [
        (None, ["--data.target", "outcome"], "scores.csv: no column 'outcome' (option target); expected one of"),
        ("one_class", [], "the target column 'label' holds 1 class ['bad']; expected at least 2 classes"),
        ("text", ["--data.numeric", "[income]"], "numeric column 'income' holds 'unknown' (data row 3, 1 such row)"),
        ("unseen", ["--data.split_column", "split", "--data.unseen_category", "error"], "column 'city' holds 'lima'"),
        ("missing_file", [], "nothing.csv: file not found (option path)"),
        (None, ["--data.columns", "[income, salary]"], "option columns names ['salary'], not columns of the table"),
        (None, ["--data.drop", "[salary]"], "option drop names ['salary'], not columns of the table"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_left(tmp_path, capsys, change, args, message):
    frame = make_table()
    frame["split"] = ["test" if i % 5 == 0 else "train" for i in range(len(frame))]
    if change == "one_class":
        frame["label"] = "bad"
    if change == "text":
        frame["income"] = frame["income"].astype(str)
        frame.loc[2, "income"] = "unknown"
    if change == "unseen":
        frame.loc[5, "city"] = "lima"
    path = write(frame, tmp_path / "scores.csv") if change != "missing_file" else str(tmp_path / "nothing.csv")
    base = ["--data", "CSVDataModule", "--data.path", path, "--data.target", "label", "--trainer.max_epochs", "1",
            "--log_to", "csv", "--output_dir", str(tmp_path / "runs")]  # fmt: skip
    status, err = run_cli(train.main, [*base, *args], capsys)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert not (tmp_path / "runs").exists()


def test_population_datamodule_reads_a_moved_table(table, tmp_path):
    from lightning_modules.population_io import population_datamodule

    frame, path = table
    moved = write(frame, tmp_path / "moved.csv.gz")
    payload = {"metadata": {"datamodule": {"class_path": "datamodules.CSVDataModule",
                                           "init_args": {"path": path, "target": "label"}}}}  # fmt: skip
    dm = population_datamodule(payload, moved)
    assert dm.path == Path(moved) and dm.name == CSVDataModule.dataset_name({"path": moved}) == "moved"
    assert torch.equal(dm.test_tensors[0], CSVDataModule(path=path, target="label").test_tensors[0])
