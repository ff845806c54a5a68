"""Readers for the five financial datasets in their original raw formats.

Each reader takes the path of the raw file and returns ``(features, label)``:
a numeric ``DataFrame`` after the dataset-specific encoding of Ley et al.
(Appendix A.1) and an ``int64`` array with 1 = the desired outcome (low risk,
income > 50K, no default) and 0 = the negative outcome. Everything that needs
statistics (median imputation, standardisation) is left to the datamodule so
that it can be fitted on the training split alone.

Missing values: HELOC's special values (-7/-8/-9) are returned as NaN, for the
datamodule to impute with the training-split median (the paper's policy; it warns
with the count per column); GMSC drops rows with a missing value before sampling (as
the paper); German Credit, Adult and Default Credit refuse one (their raw UCI files
have none, so a missing value means a damaged file), naming column, count and row.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from foundation.errors import InputError

# --- shared checks ---------------------------------------------------------


def read_csv(path: Path, **kwargs) -> pd.DataFrame:
    """``pd.read_csv`` whose failures name the file and what was expected."""
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    try:
        return pd.read_csv(path, **kwargs)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, zipfile.BadZipFile, ValueError) as err:
        raise InputError(f"{path}: cannot be read as {kwargs.get('sep', ',')!r}-separated text ({err})") from err


def require_columns(frame: pd.DataFrame, expected: list[str], path: Path) -> None:
    """Columns must be exactly ``expected`` (any order)."""
    missing = [c for c in expected if c not in frame.columns]
    unexpected = [c for c in frame.columns if c not in expected]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing column(s) {missing}")
        if unexpected:
            parts.append(f"unexpected column(s) {unexpected}")
        raise InputError(f"{path}: {'; '.join(parts)}; expected the columns {expected}")


def to_numeric(frame: pd.DataFrame, columns: list[str], path: Path, allow_missing: bool = False) -> pd.DataFrame:
    """Parse ``columns`` as numbers, naming the first column and row that is not one;
    a missing value (empty, NA, NaN) is refused unless ``allow_missing``."""
    out = frame.copy()
    for col in columns:
        parsed = pd.to_numeric(out[col], errors="coerce")
        bad = parsed.isna() & out[col].notna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(f"{path}: column {col!r} row {row} holds {out[col].iloc[row]!r}; expected a number")
        missing = out[col].isna().to_numpy()
        if missing.any() and not allow_missing:
            raise InputError(f"{path}: column {col!r} has {int(missing.sum())} missing value(s), the first in row "
                             f"{int(np.flatnonzero(missing)[0])}; expected none (the raw file has no missing values)")
        out[col] = parsed.astype("float64")
    return out


def binary_label(values: pd.Series, positive: set, negative: set, column: str, path: Path) -> np.ndarray:
    """Map raw target values to 1 (desired outcome) / 0 (negative outcome)."""
    unknown = sorted({str(v) for v in values.unique()} - {str(v) for v in positive | negative})
    if unknown:
        raise InputError(
            f"{path}: target column {column!r} holds {unknown[:5]}; expected values in "
            f"{sorted(map(str, positive))} (desired outcome) or {sorted(map(str, negative))}"
        )
    return values.astype(str).isin({str(v) for v in positive}).to_numpy().astype(np.int64)


def one_hot(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """One-hot encode ``columns`` (one indicator per category present in the data)."""
    encoded = pd.get_dummies(frame, columns=columns, prefix_sep="=", dtype="float64")
    return encoded.astype("float64")


# --- HELOC -----------------------------------------------------------------

HELOC_TARGET = "RiskPerformance"
HELOC_FEATURES = [
    "ExternalRiskEstimate", "MSinceOldestTradeOpen", "MSinceMostRecentTradeOpen", "AverageMInFile",
    "NumSatisfactoryTrades", "NumTrades60Ever2DerogPubRec", "NumTrades90Ever2DerogPubRec",
    "PercentTradesNeverDelq", "MSinceMostRecentDelq", "MaxDelq2PublicRecLast12M", "MaxDelqEver",
    "NumTotalTrades", "NumTradesOpeninLast12M", "PercentInstallTrades", "MSinceMostRecentInqexcl7days",
    "NumInqLast6M", "NumInqLast6Mexcl7days", "NetFractionRevolvingBurden", "NetFractionInstallBurden",
    "NumRevolvingTradesWBalance", "NumInstallTradesWBalance", "NumBank2NatlTradesWHighUtilization",
    "PercentTradesWBalance",
]  # fmt: skip


def read_heloc(path: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """FICO HELOC: drop duplicate rows and rows whose features are all special values
    (-7/-8/-9, i.e. negative); the remaining special values become NaN (imputed later
    with the training-split median). Label 1 = ``Good``."""
    frame = read_csv(path)
    require_columns(frame, [HELOC_TARGET, *HELOC_FEATURES], path)
    frame = to_numeric(frame, HELOC_FEATURES, path, allow_missing=True)
    frame = frame.drop_duplicates()
    frame = frame[~(frame[HELOC_FEATURES] < 0).all(axis=1)]
    label = binary_label(frame[HELOC_TARGET], {"Good"}, {"Bad"}, HELOC_TARGET, path)
    features = frame[HELOC_FEATURES].mask(frame[HELOC_FEATURES] < 0)
    return features.reset_index(drop=True), label


# --- German Credit ---------------------------------------------------------

GERMAN_COLUMNS = [
    "checking_status", "duration", "credit_history", "purpose", "credit_amount", "savings",
    "employment_since", "installment_rate", "personal_status_sex", "other_debtors", "residence_since",
    "property", "age", "other_installment_plans", "housing", "existing_credits", "job",
    "people_liable", "telephone", "foreign_worker",
]  # fmt: skip
GERMAN_NUMERIC = [
    "duration", "credit_amount", "installment_rate", "residence_since", "age", "existing_credits", "people_liable",
]  # fmt: skip
GERMAN_TARGET = "credit_risk"


def read_german(path: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """UCI Statlog German Credit (``german.data``: 20 space-separated attributes, A-codes
    for the 13 categorical ones, then class 1 = good / 2 = bad). The categorical
    attributes are one-hot encoded; label 1 = good credit risk."""
    frame = read_csv(path, sep=r"\s+", header=None, dtype=str)
    if frame.shape[1] != len(GERMAN_COLUMNS) + 1:
        raise InputError(
            f"{path}: {frame.shape[1]} whitespace-separated fields per row; expected "
            f"{len(GERMAN_COLUMNS) + 1} (20 attributes and the class)"
        )
    frame.columns = [*GERMAN_COLUMNS, GERMAN_TARGET]
    categorical = [c for c in GERMAN_COLUMNS if c not in GERMAN_NUMERIC]
    for col in categorical:
        bad = ~frame[col].str.fullmatch(r"A\d+")
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(f"{path}: attribute {col!r} row {row} holds {frame[col].iloc[row]!r}; expected an A-code")
    frame = to_numeric(frame, GERMAN_NUMERIC, path)
    label = binary_label(frame[GERMAN_TARGET], {"1"}, {"2"}, GERMAN_TARGET, path)
    return one_hot(frame[GERMAN_COLUMNS], categorical), label


# --- Adult -----------------------------------------------------------------

ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country", "income",
]  # fmt: skip
ADULT_CONTINUOUS = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]


def read_adult(path: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """UCI Adult (``adult.data``: comma-separated, no header). Only the 6 continuous
    features are kept; label 1 = income > 50K."""
    frame = read_csv(path, header=None, skipinitialspace=True, dtype=str, comment="|")
    if frame.shape[1] != len(ADULT_COLUMNS):
        raise InputError(f"{path}: {frame.shape[1]} comma-separated fields per row; expected {len(ADULT_COLUMNS)}")
    frame.columns = ADULT_COLUMNS
    frame = to_numeric(frame, ADULT_CONTINUOUS, path)
    income = frame["income"].str.rstrip(".")  # adult.test writes '>50K.'
    label = binary_label(income, {">50K"}, {"<=50K"}, "income", path)
    return frame[ADULT_CONTINUOUS].reset_index(drop=True), label


# --- Default of Credit Card Clients ---------------------------------------

DEFAULT_TARGET = "default.payment.next.month"
DEFAULT_CATEGORICAL = ["SEX", "EDUCATION", "MARRIAGE", "PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5", "PAY_6"]
DEFAULT_NUMERIC = (
    ["LIMIT_BAL", "AGE"] + [f"BILL_AMT{i}" for i in range(1, 7)] + [f"PAY_AMT{i}" for i in range(1, 7)]
)


def read_default_credit(path: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """UCI Default of Credit Card Clients (Taiwan, CSV with header). The categorical
    attributes (sex, education, marriage and the six repayment statuses) are one-hot
    encoded; the ``ID`` column is dropped; label 1 = no default next month."""
    frame = read_csv(path)
    require_columns(frame, ["ID", *DEFAULT_NUMERIC, *DEFAULT_CATEGORICAL, DEFAULT_TARGET], path)
    frame = to_numeric(frame, DEFAULT_NUMERIC + DEFAULT_CATEGORICAL, path)
    label = binary_label(frame[DEFAULT_TARGET], {0, "0"}, {1, "1"}, DEFAULT_TARGET, path)
    features = frame[DEFAULT_NUMERIC + DEFAULT_CATEGORICAL].copy()
    features[DEFAULT_CATEGORICAL] = features[DEFAULT_CATEGORICAL].astype("int64")
    return one_hot(features, DEFAULT_CATEGORICAL), label


# --- Give Me Some Credit ---------------------------------------------------

GMSC_TARGET = "SeriousDlqin2yrs"
GMSC_FEATURES = [
    "RevolvingUtilizationOfUnsecuredLines", "age", "NumberOfTime30-59DaysPastDueNotWorse", "DebtRatio",
    "MonthlyIncome", "NumberOfOpenCreditLinesAndLoans", "NumberOfTimes90DaysLate",
    "NumberRealEstateLoansOrLines", "NumberOfTime60-89DaysPastDueNotWorse", "NumberOfDependents",
]  # fmt: skip
GMSC_ROWS = 11_426  # Ley et al., Table 2


def read_gmsc(path: Path, rows: int = GMSC_ROWS, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """Kaggle Give Me Some Credit (``cs-training.csv``, also zipped; first column an
    unnamed index). Rows with missing values are dropped, then a class-balanced random
    sample of ``rows`` rows (half per class) is drawn with ``seed``; label 1 = no serious
    delinquency."""
    frame = read_csv(path, index_col=0)
    require_columns(frame, [GMSC_TARGET, *GMSC_FEATURES], path)
    frame = to_numeric(frame, GMSC_FEATURES, path, allow_missing=True).dropna()
    label = binary_label(frame[GMSC_TARGET], {0, "0"}, {1, "1"}, GMSC_TARGET, path)
    per_class = rows // 2
    rng = np.random.default_rng(seed)
    picks = []
    for cls in (0, 1):
        members = np.flatnonzero(label == cls)
        if len(members) < per_class:
            raise InputError(
                f"{path}: only {len(members)} complete rows of class {cls} in {GMSC_TARGET!r}; "
                f"a balanced sample of {rows} rows needs {per_class}"
            )
        picks.append(rng.choice(members, size=per_class, replace=False))
    chosen = np.sort(np.concatenate(picks))
    return frame[GMSC_FEATURES].iloc[chosen].reset_index(drop=True), label[chosen]
