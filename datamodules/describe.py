"""Print rows, features and class balance of each dataset after preprocessing.

    python -m datamodules.describe                       # embedded German Credit and Adult
    python -m datamodules.describe --data-dir ../shared/data   # all five
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from datamodules.errors import OneLineParser, run_entry_point
from datamodules.specs import DATASETS
from datamodules.tabular import FinancialDataModule


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(prog="python -m datamodules.describe", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("datasets", nargs="*", help=f"any of {sorted(DATASETS)} (default: all available)")
    parser.add_argument("--data-dir", default=None, help="folder holding <dataset>/<raw file>; default: embedded")
    args = parser.parse_args(argv)
    names = args.datasets or [n for n, s in DATASETS.items() if args.data_dir or s.embedded]
    table = Table(title="Datasets after preprocessing (Ley et al., Appendix A.1)")
    for col in ["dataset", "rows", "paper rows", "features", "paper features", "positive rate", "train", "test"]:
        table.add_column(col, justify="right")
    for name in names:
        dm = FinancialDataModule(dataset=name, data_dir=args.data_dir)
        info = dm.describe()
        table.add_row(
            name,
            f"{info['rows']:,}",
            f"{dm.spec.paper_rows:,}",
            str(info["features"]),
            str(dm.spec.paper_features),
            f"{info['positive_rate']:.3f}",
            f"{info['train_rows']:,}",
            f"{info['test_rows']:,}",
        )
    Console(width=120).print(table)


if __name__ == "__main__":
    run_entry_point(main)
