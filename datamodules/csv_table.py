"""``CSVDataModule``: any CSV or Parquet table with a binary or multi-class target.

Preprocessing, fitted on the training rows only: missing values handled per column
(``missing``), categorical columns one-hot encoded (``col=value``, categories sorted),
then every encoded column standardised to zero mean and unit variance (population std;
a column constant on the training rows is only centred), as Ley et al. do for the five
financial datasets. The fitted transform (classes, columns and kinds, medians, modes,
categories, means and stds) is :attr:`CSVDataModule.fitted_transform`; ``train.py`` writes
it into the run's config as the ``fitted`` option, so evaluation and ROAR, which rebuild
the datamodule from that config, apply the same transform. Column kinds:
``datamodules.table_columns``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch
from sklearn.model_selection import train_test_split

from datamodules.table_columns import (
    INFERENCE_RULE,
    MAX_CATEGORIES,
    check_columns,
    first_rows,
    inspect_columns,
    label_strings,
    read_header,
    read_table,
    sorted_labels,
)
from datamodules.tabular import TabularDataModule
from foundation.errors import InputError, number_of, shorten

log = logging.getLogger(__name__)

MissingPolicy = Literal["error", "impute", "drop"]
FITTED_VERSION = 1


def read_classes(path: Path, target: str, test_path: Path | None) -> list[str]:
    """The target's distinct labels (``label_strings``) in ``path`` and ``test_path``, sorted
    (numerically for a numeric column); an error for a missing column or a single class."""
    labels = []
    for file in [path] if test_path is None else [path, test_path]:
        head = read_header(file, option="path" if file == path else "test_path")
        if target not in head:
            raise InputError(f"{file}: no column {target!r} (option target); expected one of {list(head)}")
        labels.append(read_table(file, [target])[target])
    values = pd.concat(labels, ignore_index=True)
    classes = sorted_labels(values)
    if len(classes) < 2:
        raise InputError(f"{path}: the target column {target!r} holds {len(classes)} class {classes}; "
                         "expected at least 2 classes")  # fmt: skip
    return classes


def encode(frame: pd.DataFrame, features: list[dict], impute: set[str], unseen: str, source: str,
           row_name: Callable[[int], str] = lambda i: f"data row {i + 1}") -> np.ndarray:  # fmt: skip
    """The rows of ``frame`` encoded by the fitted ``features`` (float64, one column per
    numeric feature, one per category of a categorical one): missing values of the columns in
    ``impute`` filled with the training median or mode; a category not seen in training an
    all-zero one-hot (``unseen='ignore'``, as scikit-learn's ``handle_unknown='ignore'``) with
    one warning per column naming the values and their rows, or (``unseen='error'``) an error;
    ``row_name``: where the row of an index label lies, for errors."""
    blocks = []
    for feature in features:
        column = feature["column"]
        if feature["kind"] == "numeric":
            values = frame[column].astype(np.float64)
            blocks.append((values.fillna(feature["median"]) if column in impute else values).to_numpy()[:, None])
            continue
        strings = label_strings(frame[column])
        if column in impute:
            strings = strings.fillna(feature["mode"])
        unknown = strings.notna() & ~strings.isin(feature["categories"])
        if unknown.any():
            count, row = first_rows(unknown)
            if unseen == "error":
                raise InputError(f"{source}: column {column!r} holds {strings[row]!r} ({row_name(row)}, "
                                 f"{number_of(count, 'such row')}), a category not in the training split "
                                 f"[{shorten(feature['categories'])}]; "
                                 "expected one of them (option unseen_category: ignore encodes it as all-zero)")
            values = strings[unknown].value_counts()
            listed = shorten(values.items(), 120, lambda v: f"{v[0]!r} ({number_of(v[1], 'row')})")
            log.warning(f"{source}: column {column!r}: {number_of(count, 'row')} (first at {row_name(row)}) "
                        f"{'holds' if count == 1 else 'hold'} values not in the training split: {listed}; "
                        "encoded as all-zero one-hot (option unseen_category: error refuses them)")  # fmt: skip
        categories = np.asarray(feature["categories"], dtype=object)
        blocks.append((strings.to_numpy(dtype=object)[:, None] == categories[None, :]).astype(np.float64))
    return np.concatenate(blocks, axis=1) if blocks else np.zeros((len(frame), 0))


def fit_features(train: pd.DataFrame, kinds: dict[str, str]) -> list[dict]:
    """Per feature column of the training rows: its kind and median (numeric) or its sorted
    categories and mode (categorical; ties: the first category)."""
    features = []
    for column, kind in kinds.items():
        if kind == "numeric":
            features.append({"column": column, "kind": kind, "median": float(train[column].median())})
            continue
        strings = label_strings(train[column])
        categories = sorted_labels(train[column])
        counts = strings.value_counts()
        mode = next((c for c in categories if counts[c] == counts.max()), None)
        features.append({"column": column, "kind": kind, "categories": categories, "mode": mode})
    return features


def feature_names(features: list[dict]) -> list[str]:
    """Encoded column names: a numeric column's name, ``col=value`` per category."""
    return [name for f in features
            for name in ([f["column"]] if f["kind"] == "numeric" else [f"{f['column']}={c}" for c in f["categories"]])]


class CSVDataModule(TabularDataModule):
    """A table read from ``path`` (CSV; Parquet for a ``.parquet``/``.pq`` suffix) whose
    column ``target`` holds the class labels.

    Options: ``columns`` (the features to keep; default all but the target and split
    column), ``drop`` (columns to leave out); ``categorical``/``numeric`` declare column
    kinds, the rest are inferred (``datamodules.table_columns``: numbers, integers included,
    numeric; text and booleans categorical; a warning lists every column's kind and the rule
    that gave it); ``integer_categories`` N > 0 (default 0: none) takes integer columns with
    at most N distinct values as categorical; ``max_categories``: the most categories a
    categorical column may hold (more are refused, with the size of their one-hot encoding);
    ``missing``: ``error`` (default), ``impute`` (training median or
    mode) or ``drop`` (the rows), for all columns or per column as a mapping (columns not in
    it: ``error``); ``unseen_category``: ``ignore`` (default: an all-zero one-hot and a
    warning naming column, values and rows) or ``error`` for a category the training split
    does not hold. Split: seeded and stratified
    (``test_fraction``, ``split_seed``, ``stratify``), or by ``split_column`` (values
    ``train``/``test``), or ``test_path``, a second file with the same columns. ``fitted``:
    a fitted transform (:attr:`fitted_transform`, written by ``train.py``) applied instead
    of fitting one. ``class_names``: the sorted distinct labels, class k the k-th;
    ``num_classes`` is known after ``__init__``.
    """

    location_option = "path"

    def __init__(
        self,
        path: str,
        target: str,
        columns: list[str] | None = None,
        drop: list[str] | None = None,
        categorical: list[str] | None = None,
        numeric: list[str] | None = None,
        missing: MissingPolicy | dict[str, MissingPolicy] = "error",
        unseen_category: Literal["error", "ignore"] = "ignore",
        integer_categories: int = 0,
        max_categories: int = MAX_CATEGORIES,
        split_column: str | None = None,
        test_path: str | None = None,
        fitted: dict | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if split_column is not None and test_path is not None:
            raise InputError("options split_column and test_path both given; expected at most one way to split")
        if unseen_category not in ("error", "ignore"):
            raise InputError(f"option unseen_category={unseen_category!r}; expected 'error' or 'ignore'")
        limits = (("integer_categories", integer_categories, 0), ("max_categories", max_categories, 1))
        for option, value, least in limits:
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InputError(f"option {option}={value!r}; expected an integer of at least {least}")
        self.path, self.target = Path(path).expanduser(), target
        self.test_path = None if test_path is None else Path(test_path).expanduser()
        self.columns, self.drop = list(columns or []), list(drop or [])
        self.categorical, self.numeric = list(categorical or []), list(numeric or [])
        self.missing, self.unseen_category, self.integer_categories = missing, unseen_category, integer_categories
        self.max_categories, self.split_column, self.fitted = max_categories, split_column, fitted
        self.name = self.dataset_name({"path": path})
        if fitted is not None and fitted.get("version") != FITTED_VERSION:
            raise InputError(f"option fitted: version {fitted.get('version')!r}; expected a transform written by "
                             f"train.py (version {FITTED_VERSION})")  # fmt: skip
        self.class_names = fitted["classes"] if fitted else read_classes(self.path, target, self.test_path)
        self.num_classes = len(self.class_names)

    @classmethod
    def dataset_name(cls, options: dict) -> str:
        """The run folder's dataset part: the file's stem (``scores`` for ``scores.csv`` or
        ``scores.csv.gz``)."""
        name = Path(options["path"]).name
        for compressed in (".gz", ".bz2", ".zip", ".xz"):
            name = name.removesuffix(compressed)
        return Path(name).stem

    # --- reading -----------------------------------------------------------
    def _frames(self) -> tuple[pd.DataFrame, np.ndarray]:
        """The table (``test_path``'s rows appended) and per row whether it is a test row
        (None for a seeded split)."""
        frame = read_table(self.path)
        self._path_rows = len(frame)
        check_columns(self.path, frame.columns, [self.target], "target")
        for option in ("columns", "drop"):
            check_columns(self.path, frame.columns, getattr(self, option), option)
        if self.split_column is not None:
            check_columns(self.path, frame.columns, [self.split_column], "split_column")
            split = frame[self.split_column].astype("string").str.strip().str.lower()
            count, row = first_rows(~split.isin(["train", "test"]).fillna(False))
            if count:
                raise InputError(f"{self.path}: column {self.split_column!r} (option split_column) holds "
                                 f"{frame[self.split_column][row]!r} in {count} rows (first at data row {row + 1}); "
                                 "expected 'train' or 'test'")  # fmt: skip
            return frame, (split == "test").to_numpy(bool)
        if self.test_path is None:
            return frame, None
        test = read_table(self.test_path, option="test_path")
        absent = [c for c in frame.columns if c not in test.columns]
        if absent:
            raise InputError(f"{self.test_path} (option test_path): no columns {absent}; expected the columns of "
                             f"{self.path}")  # fmt: skip
        is_test = np.r_[np.zeros(len(frame), bool), np.ones(len(test), bool)]
        return pd.concat([frame, test[frame.columns]], ignore_index=True), is_test

    def _feature_kinds(self, frame: pd.DataFrame) -> dict[str, str]:
        """The features and their kinds: the fitted ones, else inspected (warnings name the
        inferred and the dropped columns)."""
        if self.fitted:
            kinds = {f["column"]: f["kind"] for f in self.fitted["features"]}
            check_columns(self.path, frame.columns, list(kinds), "fitted")
            return kinds
        features = self.columns or [c for c in frame.columns if c not in (self.target, self.split_column)]
        features = [c for c in features if c not in self.drop and c not in (self.target, self.split_column)]
        plan = inspect_columns(self.path, frame, features, self.categorical, self.numeric, self.columns,
                               self.integer_categories, self.max_categories, self._row_name)  # fmt: skip
        dropped = "{" + shorten(plan.dropped.items(), render=lambda item: f"{item[0]!r}: {item[1]!r}") + "}"
        if plan.dropped:
            log.warning(f"{self.path}: dropped {dropped} (declare a column in numeric or categorical to keep it)")
        if plan.kinds:
            log.warning(f"{self.path}: column kinds: {plan.summary()}. Rule: {INFERENCE_RULE}")
        if not plan.kinds:
            raise InputError(f"{self.path}: no feature columns left (dropped: {dropped}); expected at least one")
        return plan.kinds

    def _policies(self, kinds: dict[str, str]) -> dict[str, str]:
        policies = self.missing if isinstance(self.missing, dict) else dict.fromkeys(kinds, self.missing)
        check_columns(self.path, list(kinds), list(policies), "missing (feature columns)")
        wrong = {c: p for c, p in policies.items() if p not in ("error", "impute", "drop")}
        if wrong:
            raise InputError(f"option missing: {wrong}; expected 'error', 'impute' or 'drop'")
        return {c: policies.get(c, "error") for c in kinds}

    def load_raw(self) -> tuple[pd.DataFrame, np.ndarray, str]:
        """The feature columns (numeric ones as float64, NaN where missing, rows dropped by the
        ``drop`` policy taken out), the labels 0..K-1 and the source; which rows a split column
        or ``test_path`` makes test rows is kept for :meth:`_split`."""
        frame, is_test = self._frames()
        kinds = self._feature_kinds(frame)
        source = str(self.path) if self.test_path is None else f"{self.path} + {self.test_path}"
        for column in [c for c, kind in kinds.items() if kind == "numeric"]:
            frame[column] = self._numbers(frame[column], column)
        count, row = first_rows(frame[self.target].isna())
        if count:
            raise InputError(f"{source}: the target column {self.target!r} has {count} missing values (first at "
                             f"{self._row_name(row)}); expected a label in every row")  # fmt: skip
        policies = self._policies(kinds)
        dropped = pd.Series(False, index=frame.index)
        for column, policy in policies.items():
            count, row = first_rows(frame[column].isna())
            if count and policy == "error":
                raise InputError(f"{source}: column {column!r} has {count} missing values (first at "
                                 f"{self._row_name(row)}); expected none (option missing: impute or drop)")  # fmt: skip
            if count and policy == "drop":
                dropped |= frame[column].isna()
                log.warning(f"{source}: dropped {count} rows missing column {column!r}")
            if count and policy == "impute":
                log.warning(f"{source}: column {column!r}: {count} missing values imputed with the training "
                            f"{'median' if kinds[column] == 'numeric' else 'mode'}")  # fmt: skip
        keep = ~dropped.to_numpy(bool)
        labels = label_strings(frame[self.target])[keep]
        unknown = ~labels.isin(self.class_names)
        if unknown.any():
            raise InputError(f"{source}: the target column {self.target!r} holds {labels[unknown].iloc[0]!r}; "
                             f"expected one of the run's classes [{shorten(self.class_names)}]")  # fmt: skip
        y = labels.map({name: k for k, name in enumerate(self.class_names)}).to_numpy(np.int64)
        features = frame.loc[keep, list(kinds)]  # index: the row's position in _frames, for errors
        self._is_test, self._kinds, self._policy = (None if is_test is None else is_test[keep]), kinds, policies
        return features, y, source

    def _numbers(self, values: pd.Series, column: str) -> pd.Series:
        numbers = pd.to_numeric(values, errors="coerce").astype(np.float64)
        count, row = first_rows((values.notna() & numbers.isna()) | np.isinf(numbers))
        if count:
            raise InputError(f"{self.path}: numeric column {column!r} holds {values[row]!r} ({self._row_name(row)}, "
                             f"{number_of(count, 'such row')}); expected finite numbers (or declare it "
                             "categorical)")  # fmt: skip
        return numbers

    def _row_name(self, position: int) -> str:
        """Where row ``position`` of the table (``test_path``'s rows appended) lies in its file."""
        if position >= self._path_rows:
            return f"data row {position - self._path_rows + 1} of {self.test_path}"
        return f"data row {position + 1}"

    def _split(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._is_test is not None:
            return np.flatnonzero(~self._is_test), np.flatnonzero(self._is_test)
        rows = np.arange(len(y))
        try:
            return train_test_split(rows, test_size=self.test_fraction, random_state=self.split_seed,
                                    stratify=y if self.stratify else None)  # fmt: skip
        except ValueError as err:
            counts = {self.class_names[k]: int(n) for k, n in zip(*np.unique(y, return_counts=True))}
            raise InputError(f"{self.path}: a stratified split with test_fraction={self.test_fraction} of the "
                             f"classes {counts} fails ({err}); expected at least 2 rows per class") from None

    # --- fitting -----------------------------------------------------------
    @cached_property
    def _arrays(self) -> dict:
        features, y, source = self.load_raw()
        idx_train, idx_test = self._split(y)
        if len(idx_train) == 0 or len(idx_test) == 0:
            raise InputError(f"{source}: the split leaves {len(idx_train)} training and {len(idx_test)} test rows; "
                             "expected both non-empty")  # fmt: skip
        train, test = features.iloc[idx_train], features.iloc[idx_test]
        missing_classes = [self.class_names[k] for k in range(self.num_classes) if not (y[idx_train] == k).any()]
        if missing_classes:
            log.warning(f"{source}: classes {missing_classes} have no training rows")
        fitted = self.fitted or self._fit(train, source)
        impute = {c for c, p in self._policy.items() if p == "impute"}
        mean, std = np.asarray(fitted["mean"], np.float64), np.asarray(fitted["std"], np.float64)
        names, keep = fitted["feature_names"], fitted["keep"]
        arrays = {}
        for split_name, frame in (("train", train), ("test", test)):
            encoded = encode(frame, fitted["features"], impute, self.unseen_category, source, self._row_name)
            values = (encoded[:, keep] - mean) / std
            finite = np.isfinite(values)
            if not finite.all():
                column = names[np.flatnonzero(~finite.all(axis=0))[0]]
                raise InputError(f"{source}: column {column!r} holds NaN or inf in the {split_name} split after "
                                 "preprocessing; expected finite numbers (is the whole column missing?)")  # fmt: skip
            arrays[f"x_{split_name}"] = torch.tensor(values.astype(np.float32))
        return {"fitted": fitted, "source": source, "feature_names": names, "y_train": torch.tensor(y[idx_train]),
                "y_test": torch.tensor(y[idx_test]), "mean": mean, "std": std, **arrays}  # fmt: skip

    def _fit(self, train: pd.DataFrame, source: str) -> dict:
        """The transform fitted on the training rows ``train`` (the module docstring)."""
        features = fit_features(train, self._kinds)
        names = feature_names(features)
        check_columns(source, names, self.drop_columns, "drop_columns (encoded columns)")
        keep = [i for i, name in enumerate(names) if name not in self.drop_columns]
        impute = {c for c, p in self._policy.items() if p == "impute"}
        values = encode(train, features, impute, "ignore", source)[:, keep]
        mean, std = values.mean(axis=0), values.std(axis=0)
        std[std == 0] = 1.0  # a column constant on the training rows is only centred
        return {"version": FITTED_VERSION, "classes": list(self.class_names), "features": features, "keep": keep,
                "feature_names": [names[i] for i in keep], "mean": mean.tolist(), "std": std.tolist()}  # fmt: skip

    @property
    def fitted_transform(self) -> dict:
        """The transform fitted on the training rows (or the one given as ``fitted``): version,
        classes, features (column, kind, median or categories and mode), ``keep`` (the encoded
        columns left after ``drop_columns``), feature names, means and stds; plain lists and
        numbers, so it travels through a config file exactly."""
        return self._arrays["fitted"]

    def describe(self) -> dict:
        """Rows, features, classes and their counts (all rows), train and test rows."""
        a = self._arrays
        y = torch.cat([a["y_train"], a["y_test"]])
        counts = torch.bincount(y, minlength=self.num_classes)
        test_counts = torch.bincount(a["y_test"], minlength=self.num_classes)
        info = {
            "dataset": self.name, "source": a["source"], "rows": int(len(y)), "features": self.num_features,
            "classes": dict(zip(self.class_names, counts.tolist())), "train_rows": int(len(a["y_train"])),
            "test_rows": int(len(a["y_test"])),
            "majority_rate_test": round(test_counts.max().item() / len(a["y_test"]), 4),
        }  # fmt: skip
        if self.num_classes == 2:
            info["positive_rate"] = round(counts[1].item() / len(y), 4)
        return {**info, **self._permutation_note()}
