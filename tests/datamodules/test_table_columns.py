"""Reading a user's table and deciding each column's kind (datamodules/table_columns.py): the
module docstring's rules column by column, labels as strings (3 and 3.0 one category), files read
as pandas reads them, and every refusal (a header naming a column twice, numbers with a stray
text value, too many categories with their one-hot size by hand: 8 bytes × categories × rows)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from datamodules.table_columns import (ColumnPlan, check_cardinality, check_numbers_in_text, describe_table,
                                       format_bytes, inspect_column, inspect_columns, is_table_file, label_strings,
                                       read_header, read_table, sorted_labels)  # fmt: skip
from foundation.errors import InputError


@pytest.mark.parametrize("values, integer_categories, kind", [
    ([5, 5, 5, 5], 0, ("constant", "one value")),
    (["a", "b", "c", "d"], 0, ("ID-like", "a different value in every row")),
    ([1, 2, 3, 4], 0, ("ID-like", "a different value in every row")),
    ([0.5, 1.5, 2.5, 3.5], 0, ("numeric", "numbers")),  # every row different, but not integers: numeric
    (["a", "b", "a", "b"], 0, ("categorical", "text")),
    ([True, False, True, True], 0, ("categorical", "booleans")),
    ([1, 2, 2, 7], 0, ("numeric", "integers")),
    ([1, 2, 2, 7], 3, ("categorical", "integers with at most 3 values, option integer_categories")),
    ([1, 2, 2, 7], 2, ("numeric", "integers")),
])  # fmt: skip
def test_the_kind_of_an_undeclared_column(values, integer_categories, kind):
    assert inspect_column(pd.Series(values), 4, integer_categories) == kind


def test_labels_are_strings_integral_numbers_without_a_point():
    got = label_strings(pd.Series([3.0, 3, np.nan, 2.5, -1.0]))
    assert got.iloc[[0, 1, 3, 4]].tolist() == ["3", "3", "2.5", "-1"] and pd.isna(got.iloc[2])
    assert label_strings(pd.Series(["b", None, "a"])).tolist()[::2] == ["b", "a"]
    assert sorted_labels(pd.Series([10, 9, 2, 9])) == ["2", "9", "10"]  # as numbers, not as text
    assert sorted_labels(pd.Series(["b", "a", "B"])) == ["B", "a", "b"]


def test_sizes_in_decimal_units():
    assert [format_bytes(s) for s in (999, 1000, 560e6, 2.5e15)] == ["999 bytes", "1 kB", "560 MB", "2,500 TB"]


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".parquet"])
def test_tables_read_as_pandas_writes_them(tmp_path, suffix):
    frame = pd.DataFrame({"x1": [1.5, 2.0, np.nan], "colour": ["red", "blue", "red"], "y": [0, 1, 1]})
    path = tmp_path / f"table{suffix}"
    if suffix == ".parquet":
        frame.to_parquet(path)
    else:
        frame.to_csv(path, sep="\t" if suffix == ".tsv" else ",", index=False)
    assert is_table_file(path) and not is_table_file(tmp_path / "table.json")
    pd.testing.assert_frame_equal(read_table(path), frame)
    pd.testing.assert_frame_equal(read_table(path, ["y"]), frame[["y"]])
    assert read_header(path) == ["x1", "colour", "y"]


def test_unreadable_tables_are_named(tmp_path):
    with pytest.raises(InputError, match="file not found \\(option data_path\\)"):
        read_table(tmp_path / "none.csv", option="data_path")
    (tmp_path / "twice.csv").write_text("a,b,a,b,c\n1,2,3,4,5\n")
    with pytest.raises(InputError, match="the header names 'a' \\(columns 1 and 3\\), 'b' \\(columns 2 and 4\\) twice"):
        read_table(tmp_path / "twice.csv")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(InputError, match="bad.parquet: not a readable Parquet table"):
        read_table(tmp_path / "bad.parquet")


def test_a_stray_text_value_among_numbers_is_named_with_its_row():
    values = pd.Series(["1", "2", "abc", "4", "5"])
    with pytest.raises(InputError, match=r"column 'age' holds 1 non-numeric value among 4 numbers: 'abc' "
                                         r"\(first at data row 3\)"):  # fmt: skip
        check_numbers_in_text("t.csv", "age", values, lambda i: f"data row {i + 1}")
    check_numbers_in_text("t.csv", "city", pd.Series(["a", "b", "1"]), str)  # mostly text: a text column


def test_too_many_categories_are_refused_with_their_one_hot_size():
    values = pd.Series([f"v{i}" for i in range(30)] * 2)
    assert check_cardinality("t.csv", "c", values, 60, "text", 30) == 30
    size = format_bytes(8.0 * 30 * 60)  # 14 kB
    with pytest.raises(InputError, match=f"holds 30 distinct values .*: one-hot encoding would make 30 columns, "
                                         f"{size} for 60 rows; expected at most max_categories=29"):  # fmt: skip
        check_cardinality("t.csv", "c", values, 60, "text", 29)


def test_the_plan_of_a_table():
    frame = pd.DataFrame({"id": [11, 12, 13, 14], "const": [1, 1, 1, 1], "age": [30, 40, 30, 50],
                          "city": ["a", "b", "a", "a"], "code": [1, 2, 1, 2]})  # fmt: skip
    features = list(frame.columns)
    plan = inspect_columns("t.csv", frame, features, categorical=["code"], numeric=["id"], named=[])
    assert plan.kinds == {"id": "numeric", "age": "numeric", "city": "categorical", "code": "categorical"}
    assert plan.dropped == {"const": "constant"} and plan.inferred == ["age", "city"]
    assert plan.categories == {"city": 2, "code": 2} and plan.label("city") == "binary"
    assert plan.summary() == "1 numeric (declared): id; 1 numeric (integers): age; 1 binary (text): city; " \
        "1 binary (declared): code"  # fmt: skip
    with pytest.raises(InputError, match="option columns names 'const', which holds one value in every row"):
        inspect_columns("t.csv", frame, features, [], [], named=["const"])
    with pytest.raises(InputError, match=r"columns \['age'\] are declared both categorical and numeric"):
        inspect_columns("t.csv", frame, features, ["age"], ["age"], [])
    with pytest.raises(InputError, match=r"option numeric names \['nope'\], not columns of the table"):
        inspect_columns("t.csv", frame, features, [], ["nope"], [])
    assert ColumnPlan(kinds={"c": "categorical"}, categories={"c": 1200}).label("c") == "categorical (1,200 categories)"


def test_a_table_described(tmp_path):
    frame = pd.DataFrame({"x": [0.5, 1.5, np.nan, 2.5, 0.5], "k": ["u", "v", "w", "u", "u"], "y": [1, 0, 1, 1, 1.0]})
    frame.to_csv(tmp_path / "t.csv", index=False)
    described = describe_table(tmp_path / "t.csv", "y")
    assert described["rows"] == 5 and described["classes"] == {"0": 1, "1": 4}
    assert described["features_encoded"] == 1 + 3  # x numeric, k one-hot over 3 categories
    x = described["columns"][0]
    assert (x["missing"], x["distinct"], x["use"], x["rule"]) == (1, 3, "numeric", "numbers")
    with pytest.raises(InputError, match=r"option --target names \['label'\]"):
        describe_table(tmp_path / "t.csv", "label")
