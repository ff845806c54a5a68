"""Reading a user's table (CSV, or Parquet by the file's suffix) and deciding what each
column is: the target, a numeric or categorical feature, or dropped (ID-like, constant).

Kinds of undeclared columns (:func:`inspect_columns`), from the non-missing values of all rows
(:data:`INFERENCE_RULE`):

- *constant*: at most one distinct value: dropped;
- *ID-like*: text or integer values, every row holding a different one: dropped;
- *categorical*: text or boolean values (and, only with ``integer_categories`` N > 0, integer
  values with at most N distinct ones);
- *numeric*: every other column of numbers, integers included: counts, pixel intensities,
  ages and 0/1 flags are quantities, and a value seen only at test time is just a number.

A text column most of whose values are numbers is refused, naming its other values as they
appear in the file (a stray ``'abc'`` in a numeric column is a typo, not 117 categories). A
categorical column with more than ``max_categories`` distinct values is refused with the
size its one-hot encoding would take. Columns named in ``categorical`` or ``numeric`` are
taken as declared (never dropped as ID-like); a constant or ID-like column named in
``columns`` is refused. A CSV file whose header names a column twice is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from foundation.errors import InputError, number_of, shorten

MAX_CATEGORIES = 1000
INFERENCE_RULE = ("numbers, integers included, are numeric; text and booleans are categorical (declare kinds with "
                  "the options numeric and categorical; integer_categories: N takes integer columns with at most N "
                  "distinct values as categorical)")  # fmt: skip
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
        check_header(path, pd.read_csv(path, sep=sep, header=None, nrows=1, dtype=str).iloc[0].tolist())
        return pd.read_csv(path, usecols=columns, sep=sep, low_memory=False, nrows=nrows)
    except InputError:
        raise
    except ImportError as err:
        raise InputError(f"{path}: reading Parquet needs pyarrow ({err}); run `make install`") from None
    except (ValueError, OSError, pd.errors.ParserError) as err:
        raise InputError(f"{path}: not a readable {'Parquet' if path.suffix.lower() in PARQUET_SUFFIXES else 'CSV'} "
                         f"table ({str(err).splitlines()[0]})") from None  # fmt: skip


def check_header(path: Path, names: list) -> None:
    """A header naming a column twice is refused, naming both positions (pandas would
    silently rename the second ``x1.1``)."""
    seen: dict[str, int] = {}
    twice = []
    for position, name in enumerate(names, start=1):
        if isinstance(name, str) and name in seen:
            twice.append(f"{name!r} (columns {seen[name]} and {position})")
        seen.setdefault(name, position)
    if twice:
        raise InputError(f"{path}: the header names {shorten(twice, render=str)} twice; expected distinct column "
                         "names (rename or remove one of each)")  # fmt: skip


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
        raise InputError(f"{path}: option {option} names [{shorten(unknown)}], not columns of the table; "
                         f"expected some of [{shorten(frame_columns)}]")  # fmt: skip


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


def data_row(position: int) -> str:
    """Where row ``position`` (0-based, after the header) lies in its file."""
    return f"data row {position + 1}"


def format_bytes(size: float) -> str:
    """``size`` bytes as "560 MB" (decimal units)."""
    for unit in ("bytes", "kB", "MB", "GB"):
        if size < 1000:
            return f"{size:.0f} {unit}"
        size /= 1000
    return f"{size:,.0f} TB"


@dataclass
class ColumnPlan:
    """What becomes of each column: ``kinds`` (feature -> 'numeric' or 'categorical', in
    the table's order), ``dropped`` (column -> reason), the undeclared features' ``inferred``,
    per feature the ``rules`` that gave its kind ('declared', 'text', 'integers', ...) and per
    categorical one its number of ``categories``."""

    kinds: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    inferred: list[str] = field(default_factory=list)
    rules: dict[str, str] = field(default_factory=dict)
    categories: dict[str, int] = field(default_factory=dict)

    def label(self, column: str) -> str:
        """'numeric', 'binary' (two categories) or 'categorical (N categories)'."""
        if self.kinds[column] == "numeric":
            return "numeric"
        count = self.categories[column]
        return "binary" if count == 2 else f"categorical ({count:,} categories)"

    def summary(self) -> str:
        """Every feature's kind, grouped by kind and rule: "3 numeric (integers): a, b, c; ..."."""
        groups: dict[tuple[str, str], list[str]] = {}
        for column in self.kinds:
            label = self.label(column)
            kind = label.split(" (")[0]
            name = column if label == kind else f"{column} ({self.categories[column]:,} categories)"
            groups.setdefault((kind, self.rules[column]), []).append(name)
        return "; ".join(f"{len(names):,} {kind} ({rule}): {shorten(names, 200, str)}"
                         for (kind, rule), names in groups.items())  # fmt: skip


def inspect_column(values: pd.Series, rows: int, integer_categories: int) -> tuple[str, str]:
    """The kind of an undeclared column (module docstring): 'constant', 'ID-like',
    'categorical' or 'numeric', and the rule that gave it; ``values``: its non-missing values,
    of ``rows`` rows."""
    distinct = values.nunique()
    if distinct <= 1:
        return "constant", "one value"
    boolean, text, integral = pd.api.types.is_bool_dtype(values), is_text(values), _integral(values)
    if (text and not boolean or integral) and distinct == rows:
        return "ID-like", "a different value in every row"
    if text:
        return "categorical", "booleans" if boolean else "text"
    if integral and distinct <= integer_categories:
        return "categorical", f"integers with at most {integer_categories} values, option integer_categories"
    return "numeric", "integers" if integral else "numbers"


def check_numbers_in_text(path: Path | str, column: str, values: pd.Series, row_name: Callable[[int], str]) -> None:
    """A text column most of whose (non-missing) ``values`` are numbers is refused, naming
    the others as they appear in the file."""
    stray = pd.to_numeric(values, errors="coerce").isna().to_numpy(bool)
    if stray.mean() >= 0.5:
        return
    first = values.index[stray][0]
    others = pd.unique(values[stray].astype(str))
    raise InputError(f"{path}: column {column!r} holds {number_of(int(stray.sum()), 'non-numeric value')} among "
                     f"{number_of(int((~stray).sum()), 'number')}: {shorten(others, 60)} (first at {row_name(first)}); "
                     "expected "
                     "numbers (an empty cell is a missing value: option missing), or declare the column categorical "
                     "or drop it (options categorical, drop)")  # fmt: skip


def check_cardinality(path: Path | str, column: str, values: pd.Series, rows: int, rule: str,
                      max_categories: int) -> int:  # fmt: skip
    """The number of categories of a categorical column (non-missing ``values``, of ``rows``
    rows); more than ``max_categories`` refused with the size of their one-hot encoding."""
    distinct = int(values.nunique())
    if distinct > max_categories:
        first = pd.unique(label_strings(values.iloc[:100]))[:3]
        raise InputError(f"{path}: column {column!r} ({'declared categorical' if rule == 'declared' else rule}) "
                         f"holds {distinct:,} distinct values ({shorten(first, 60)}, ...): one-hot encoding would "
                         f"make {distinct:,} columns, {format_bytes(8.0 * distinct * rows)} for {rows:,} rows; "
                         f"expected at most max_categories={max_categories} (leave the column out: option drop; "
                         f"{'' if rule == 'text' else 'or declare it numeric, '}or raise max_categories)")
    return distinct


def inspect_columns(path: Path | str, frame: pd.DataFrame, features: list[str], categorical: list[str],
                    numeric: list[str], named: list[str], integer_categories: int = 0,
                    max_categories: int = MAX_CATEGORIES, row_name: Callable[[int], str] = data_row) -> ColumnPlan:
    """The :class:`ColumnPlan` of ``features`` of ``frame`` (declared ``categorical`` and
    ``numeric``; ``named``: the columns the user asked for by name, refused if dropped;
    ``row_name``: where a row lies, for errors)."""  # fmt: skip
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
        values = frame[column].dropna()
        if column in categorical or column in numeric:
            kind, rule = ("categorical" if column in categorical else "numeric"), "declared"
        else:
            kind, rule = inspect_column(values, len(frame), integer_categories)
            if is_text(values) and not pd.api.types.is_bool_dtype(values):
                check_numbers_in_text(path, column, values, row_name)
            if kind in ("constant", "ID-like"):
                if column in named:
                    what = "one value in every row" if kind == "constant" else "a different value in every row"
                    raise InputError(f"{path}: option columns names {column!r}, which holds {what} ({kind}); "
                                     "expected a feature (declare it in numeric or categorical to keep it anyway)")
                plan.dropped[column] = kind
                continue
            plan.inferred.append(column)
        if kind == "categorical":
            plan.categories[column] = check_cardinality(path, column, values, len(frame), rule, max_categories)
        plan.kinds[column], plan.rules[column] = kind, rule
    return plan


def first_rows(mask: pd.Series) -> tuple[int, int]:
    """(how many rows ``mask`` marks, the index label of the first one)."""
    marked = mask.index[mask.to_numpy(bool)]
    return len(marked), (int(marked[0]) if len(marked) else -1)


def describe_table(path: str | Path, target: str, integer_categories: int = 0,
                   max_categories: int = MAX_CATEGORIES) -> dict:  # fmt: skip
    """A user's table as ``CSVDataModule`` would take it with these options: rows, each
    column's type, kind, the rule that gave it, missing and distinct values, and the target's
    classes and counts."""
    frame = read_table(path, option="file")
    check_columns(path, frame.columns, [target], "--target")
    features = [c for c in frame.columns if c != target]
    plan = inspect_columns(path, frame, features, [], [], [], integer_categories, max_categories)
    labels = label_strings(frame[target])
    counts = labels.value_counts()
    classes = sorted_labels(frame[target])
    columns = [{
        "column": c, "dtype": str(frame[c].dtype), "missing": int(frame[c].isna().sum()),
        "distinct": int(frame[c].nunique()),
        "use": "target" if c == target else plan.label(c) if c in plan.kinds else f"dropped ({plan.dropped[c]})",
        "rule": plan.rules.get(c, ""),
    } for c in frame.columns]  # fmt: skip
    encoded = sum(1 if k == "numeric" else plan.categories[c] for c, k in plan.kinds.items())
    return {"file": str(path), "rows": len(frame), "columns": columns, "target": target,
            "classes": {c: int(counts[c]) for c in classes}, "features_encoded": int(encoded),
            "kinds": plan.summary()}  # fmt: skip
