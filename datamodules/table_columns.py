"""Reading a user's table (CSV, or Parquet by the file's suffix) and deciding what each
column is: the target, a numeric or categorical feature, or dropped (ID-like, constant).

Kinds of undeclared columns (:func:`inspect_columns`), from the non-missing values of all rows:

- *constant*: at most one distinct value: dropped;
- *ID-like*: text or integer values, every row holding a different one: dropped;
- *categorical*: text or boolean values, or integer values with at most
  ``integer_categories`` distinct ones;
- *numeric*: every other column of numbers.

Columns named in ``categorical`` or ``numeric`` are taken as declared (never dropped as
ID-like); a constant or ID-like column named in ``columns`` is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from datamodules.errors import InputError

PARQUET_SUFFIXES = (".parquet", ".pq")
TABLE_SUFFIXES = (".csv", ".tsv", ".txt", ".gz", ".bz2", ".zip", ".xz", *PARQUET_SUFFIXES)


def is_table_file(path: str | Path) -> bool:
    """A file whose suffix names a CSV (optionally compressed) or Parquet table."""
    return Path(path).suffix.lower() in TABLE_SUFFIXES


def read_table(path: str | Path, columns: list[str] | None = None, option: str = "path",
               nrows: int | None = None) -> pd.DataFrame:  # fmt: skip
    """The table at ``path`` (Parquet for a ``.parquet``/``.pq`` suffix, else CSV, ``.tsv``
    tab-separated), only ``columns`` where given (CSV: the first ``nrows``); ``option``: how
    errors name the option."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise InputError(f"{path}: file not found (option {option}); expected a CSV or Parquet file")
    try:
        if path.suffix.lower() in PARQUET_SUFFIXES:
            return pd.read_parquet(path, columns=columns)
        sep = "\t" if path.suffix.lower() == ".tsv" else ","
        return pd.read_csv(path, usecols=columns, sep=sep, low_memory=False, nrows=nrows)
    except ImportError as err:
        raise InputError(f"{path}: reading Parquet needs pyarrow ({err}); run `make install`") from None
    except (ValueError, OSError, pd.errors.ParserError) as err:
        raise InputError(f"{path}: not a readable {'Parquet' if path.suffix.lower() in PARQUET_SUFFIXES else 'CSV'} "
                         f"table ({str(err).splitlines()[0]})") from None  # fmt: skip


def read_header(path: str | Path, option: str = "path") -> list[str]:
    """The column names of the table at ``path``, read without its rows."""
    path = Path(path).expanduser()
    if path.suffix.lower() not in PARQUET_SUFFIXES:
        return list(read_table(path, option=option, nrows=0).columns)
    read_table(path, [], option=option)  # the file's errors, as read_table words them
    import pyarrow.parquet

    return list(pyarrow.parquet.read_schema(path).names)


def check_columns(path: Path | str, frame_columns, names: list[str], option: str) -> None:
    """Every name in ``names`` is a column of the table, else an error naming ``option``."""
    unknown = [c for c in names if c not in frame_columns]
    if unknown:
        raise InputError(f"{path}: option {option} names {unknown}, not columns of the table; "
                         f"expected some of {list(frame_columns)}")  # fmt: skip


def label_strings(series: pd.Series) -> pd.Series:
    """Values as the strings that name categories and classes: integral numbers without a
    decimal point (so 3 and 3.0 name the same category), missing values kept missing."""
    values = series.dropna()
    if is_text(values):
        strings = values.astype(str)
    else:
        numbers = values.astype(np.float64)
        integral = np.isfinite(numbers) & (numbers == np.round(numbers))
        strings = numbers.map(repr).where(~integral, numbers.where(integral, 0).astype(np.int64).astype(str))
    return strings.reindex(series.index)


def is_text(values: pd.Series) -> bool:
    """Text (or other non-numeric) or boolean values."""
    return pd.api.types.is_bool_dtype(values) or not pd.api.types.is_numeric_dtype(values)


def sorted_labels(values: pd.Series) -> list[str]:
    """The distinct non-missing values as ``label_strings``: sorted as numbers for a numeric
    column, else as text."""
    unique = pd.unique(label_strings(values).dropna())
    return sorted(unique) if is_text(values.dropna()) else sorted(unique, key=float)


def _integral(values: pd.Series) -> bool:
    if is_text(values):
        return False
    numbers = values.to_numpy(np.float64)
    return bool(np.all(np.isfinite(numbers) & (numbers == np.round(numbers))))


@dataclass
class ColumnPlan:
    """What becomes of each column: ``kinds`` (feature -> 'numeric' or 'categorical', in
    the table's order), ``dropped`` (column -> reason) and the undeclared features' ``inferred``."""

    kinds: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    inferred: list[str] = field(default_factory=list)


def inspect_column(values: pd.Series, rows: int, integer_categories: int) -> str:
    """The kind of an undeclared column (module docstring): 'constant', 'ID-like',
    'categorical' or 'numeric'; ``values``: its non-missing values, of ``rows`` rows."""
    distinct = values.nunique()
    if distinct <= 1:
        return "constant"
    text = is_text(values)
    integral = _integral(values)
    if (text and not pd.api.types.is_bool_dtype(values) or integral) and distinct == rows:
        return "ID-like"
    if text or (integral and distinct <= integer_categories):
        return "categorical"
    return "numeric"


def inspect_columns(path: Path | str, frame: pd.DataFrame, features: list[str], categorical: list[str],
                    numeric: list[str], named: list[str], integer_categories: int) -> ColumnPlan:  # fmt: skip
    """The :class:`ColumnPlan` of ``features`` of ``frame`` (declared ``categorical`` and
    ``numeric``; ``named``: the columns the user asked for by name, refused if dropped)."""
    check_columns(path, frame.columns, categorical, "categorical")
    check_columns(path, frame.columns, numeric, "numeric")
    both = sorted(set(categorical) & set(numeric))
    if both:
        raise InputError(f"{path}: columns {both} are declared both categorical and numeric; expected one of the two")
    not_features = [c for c in [*categorical, *numeric] if c not in features]
    if not_features:
        raise InputError(f"{path}: options categorical/numeric name {not_features}, which are not features "
                         "(the target, the split column, or left out by columns/drop); expected feature columns")
    plan = ColumnPlan()
    for column in features:
        if column in categorical or column in numeric:
            plan.kinds[column] = "categorical" if column in categorical else "numeric"
            continue
        kind = inspect_column(frame[column].dropna(), len(frame), integer_categories)
        if kind in ("constant", "ID-like"):
            if column in named:
                what = "one value in every row" if kind == "constant" else "a different value in every row"
                raise InputError(f"{path}: option columns names {column!r}, which holds {what} ({kind}); expected "
                                 "a feature (declare it in numeric or categorical to keep it anyway)")  # fmt: skip
            plan.dropped[column] = kind
            continue
        plan.kinds[column] = kind
        plan.inferred.append(column)
    return plan


def first_rows(mask: pd.Series) -> tuple[int, int]:
    """(how many rows ``mask`` marks, the index label of the first one)."""
    marked = mask.index[mask.to_numpy(bool)]
    return len(marked), (int(marked[0]) if len(marked) else -1)


def describe_table(path: str | Path, target: str, integer_categories: int = 10) -> dict:
    """A user's table as ``CSVDataModule`` would take it with default options: rows, each
    column's type, kind, missing values and distinct values, and the target's classes and counts."""
    frame = read_table(path, option="file")
    check_columns(path, frame.columns, [target], "--target")
    features = [c for c in frame.columns if c != target]
    plan = inspect_columns(path, frame, features, [], [], [], integer_categories)
    labels = label_strings(frame[target])
    counts = labels.value_counts()
    classes = sorted_labels(frame[target])
    columns = [{
        "column": c, "dtype": str(frame[c].dtype), "missing": int(frame[c].isna().sum()),
        "distinct": int(frame[c].nunique()),
        "use": "target" if c == target else plan.kinds.get(c) or f"dropped ({plan.dropped[c]})",
    } for c in frame.columns]  # fmt: skip
    encoded = sum(1 if k == "numeric" else frame[c].nunique() for c, k in plan.kinds.items())
    return {"file": str(path), "rows": len(frame), "columns": columns, "target": target,
            "classes": {c: int(counts[c]) for c in classes}, "features_encoded": int(encoded)}  # fmt: skip
