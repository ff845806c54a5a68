"""Loaders on small malformed files: one clear InputError naming the file, column
or option and what was expected."""

from __future__ import annotations

import zipfile

import pytest
import torch

from datamodules import FinancialDataModule, InputError, TwoMoonsDataModule
from datamodules.raw_readers import GMSC_FEATURES, HELOC_FEATURES

HELOC_HEADER = ",".join(["RiskPerformance", *HELOC_FEATURES])


def heloc_rows(n: int, value: str = "5") -> list[str]:
    return [f"{'Good' if i % 2 else 'Bad'}," + ",".join([str(i + 1)] + [value] * 22) for i in range(n)]


def write_heloc(tmp_path, header: str, rows: list[str]):
    folder = tmp_path / "heloc"
    folder.mkdir(exist_ok=True)
    (folder / "heloc_dataset_v1.csv").write_text("\n".join([header, *rows]) + "\n")
    return FinancialDataModule(dataset="heloc", data_dir=str(tmp_path))


def test_small_valid_file_loads(tmp_path):
    dm = write_heloc(tmp_path, HELOC_HEADER, heloc_rows(20))
    assert dm.describe()["rows"] == 20 and dm.num_features == 23


def test_missing_file_names_the_paths(tmp_path):
    with pytest.raises(InputError, match=r"heloc_dataset_v1\.csv"):
        FinancialDataModule(dataset="heloc", data_dir=str(tmp_path)).describe()


def test_missing_data_dir(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        FinancialDataModule(dataset="heloc", data_dir=str(tmp_path / "nowhere")).describe()


def test_wrong_format(tmp_path):
    folder = tmp_path / "heloc"
    folder.mkdir()
    with zipfile.ZipFile(folder / "heloc_dataset_v1.csv", "w") as zf:
        zf.writestr("x.bin", bytes(range(256)) * 50)
    with pytest.raises(InputError, match=r"heloc_dataset_v1\.csv"):
        FinancialDataModule(dataset="heloc", data_dir=str(tmp_path)).describe()


def test_missing_column(tmp_path):
    header = HELOC_HEADER.replace(",ExternalRiskEstimate", "")
    rows = [r.split(",", 2)[0] + "," + r.split(",", 2)[2] for r in heloc_rows(10)]
    with pytest.raises(InputError, match=r"missing column\(s\) \['ExternalRiskEstimate'\]"):
        write_heloc(tmp_path, header, rows).describe()


def test_unexpected_column(tmp_path):
    rows = [r + ",1" for r in heloc_rows(10)]
    with pytest.raises(InputError, match=r"unexpected column\(s\) \['Extra'\]"):
        write_heloc(tmp_path, HELOC_HEADER + ",Extra", rows).describe()


def test_non_numeric_value_names_column_and_row(tmp_path):
    rows = heloc_rows(10)
    rows[3] = rows[3].replace("Good,4,", "Good,four,")
    with pytest.raises(InputError, match=r"column 'ExternalRiskEstimate' row 3 holds 'four'"):
        write_heloc(tmp_path, HELOC_HEADER, rows).describe()


def test_unknown_target_value(tmp_path):
    rows = heloc_rows(10)
    rows[0] = "Maybe" + rows[0][3:]
    with pytest.raises(InputError, match=r"target column 'RiskPerformance' holds \['Maybe'\]"):
        write_heloc(tmp_path, HELOC_HEADER, rows).describe()


def test_single_class_target(tmp_path):
    rows = [r.replace("Bad,", "Good,") for r in heloc_rows(10)]
    with pytest.raises(InputError, match=r"only class \[1\]"):
        write_heloc(tmp_path, HELOC_HEADER, rows).describe()


def test_nan_left_after_preprocessing_names_column(tmp_path):
    # A column of special values only: its median is missing, so imputation leaves NaN.
    rows = heloc_rows(10, value="-9")
    rows = [r.split(",", 2)[0] + "," + r.split(",", 2)[1] + "," + "7," + r.split(",", 3)[3] for r in rows]
    with pytest.raises(InputError, match=r"column 'MSinceMostRecentTradeOpen' holds NaN or inf"):
        write_heloc(tmp_path, HELOC_HEADER, rows).describe()


def test_german_wrong_field_count(tmp_path):
    (tmp_path / "german.data").write_text("A11 6 A34\nA12 48 A32\n")
    with pytest.raises(InputError, match=r"german\.data: 3 whitespace-separated fields per row; expected 21"):
        FinancialDataModule(dataset="german", data_dir=str(tmp_path)).describe()


def test_german_bad_code(tmp_path, data_dir):
    lines = (data_dir / "german" / "german.data").read_text().splitlines()[:50]
    lines[7] = lines[7].replace("A1", "Z1", 1)
    (tmp_path / "german.data").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"attribute 'checking_status' row 7 holds 'Z1\d'; expected an A-code"):
        FinancialDataModule(dataset="german", data_dir=str(tmp_path)).describe()


def test_gmsc_too_few_rows_for_balanced_sample(tmp_path):
    header = "," + ",".join(["SeriousDlqin2yrs", *GMSC_FEATURES])
    rows = [f"{i},{i % 2}," + ",".join(["1"] * 10) for i in range(100)]
    with zipfile.ZipFile(tmp_path / "cs-training.csv.zip", "w") as zf:
        zf.writestr("cs-training.csv", "\n".join([header, *rows]) + "\n")
    with pytest.raises(InputError, match=r"only 50 complete rows of class 0"):
        FinancialDataModule(dataset="gmsc", data_dir=str(tmp_path)).describe()


def test_unknown_dataset_lists_known_ones():
    with pytest.raises(InputError, match=r"unknown dataset 'hmda'; expected one of \['heloc', 'german', 'adult'"):
        FinancialDataModule(dataset="hmda")


def test_no_embedded_copy_asks_for_data_dir():
    with pytest.raises(InputError, match=r"dataset 'gmsc' has no embedded copy; pass data_dir"):
        FinancialDataModule(dataset="gmsc").describe()


@pytest.mark.parametrize("option", [{"batch_size": 0}, {"test_fraction": 1.5}])
def test_bad_options(option):
    with pytest.raises(InputError, match=f"option {next(iter(option))}="):
        TwoMoonsDataModule(**option)


def test_two_moons():
    dm = TwoMoonsDataModule(n_samples=500, noise=0.1)
    info = dm.describe()
    assert (info["rows"], info["features"], info["positive_rate"]) == (500, 2, 0.5)


def test_german_missing_value_is_refused_with_column_and_rows(tmp_path, data_dir):
    lines = (data_dir / "german" / "german.data").read_text().splitlines()[:50]
    for row in (4, 9):
        fields = lines[row].split()
        fields[1] = "NaN"  # duration
        lines[row] = " ".join(fields)
    (tmp_path / "german.data").write_text("\n".join(lines) + "\n")
    message = r"column 'duration' has 2 missing value\(s\), the first in row 4; expected none"
    with pytest.raises(InputError, match=message):
        FinancialDataModule(dataset="german", data_dir=str(tmp_path)).describe()


def test_heloc_special_values_are_imputed_with_a_warning_naming_columns_and_counts(tmp_path, caplog):
    rows = heloc_rows(20)
    for i in (2, 5, 11):
        head, first, rest = rows[i].split(",", 2)
        rows[i] = f"{head},{first},-8,{rest.split(',', 1)[1]}"  # MSinceOldestTradeOpen: special value
    write_heloc(tmp_path, HELOC_HEADER, rows).describe()
    (record,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert record.getMessage().endswith(
        "heloc_dataset_v1.csv: imputed missing values with the training-split median: 'MSinceOldestTradeOpen' 3 rows")


def test_drop_columns_removes_a_column_and_leaves_the_others_as_they_were():
    full = TwoMoonsDataModule(n_samples=60)
    part = TwoMoonsDataModule(n_samples=60, drop_columns=["x2"])
    assert part.feature_names == ["x1"] and part.num_features == 1
    x_full, y_full = full.train_tensors
    x_part, y_part = part.train_tensors
    assert torch.equal(x_part[:, 0], x_full[:, 0]) and torch.equal(y_part, y_full)


def test_drop_columns_naming_no_column_lists_the_columns():
    with pytest.raises(InputError, match=r"option drop_columns names \['x3'\].*\['x1', 'x2'\]"):
        TwoMoonsDataModule(n_samples=60, drop_columns=["x3"]).describe()


def test_sample_seed_for_a_dataset_read_whole_names_the_option():
    with pytest.raises(InputError, match=r"option sample_seed=1 for dataset 'heloc'; it applies to \['gmsc'\] only"):
        FinancialDataModule(dataset="heloc", sample_seed=1)
