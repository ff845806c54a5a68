"""Print rows, features and class balance of each dataset after preprocessing, and the
classes, images per split and image size of the image sets.

    python -m datamodules.describe                       # embedded German Credit and Adult, built-in image sets
    python -m datamodules.describe --data-dir ../shared/data   # all five, and the archives in images/
    python -m datamodules.describe mnist5k path/to/folder-or-archive.tar.gz
    python -m datamodules.describe my.csv --target y   # a CSV or Parquet table, as CSVDataModule takes it

Image sets are described from their file lists and one image header (archives: their
member list), without unpacking or decoding them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from datamodules.image_cache import describe_archive, is_archive
from datamodules.images import FashionMNISTDataModule, ImageFolderDataModule, MNIST5kDataModule
from datamodules.specs import DATASETS
from datamodules.table_columns import INFERENCE_RULE, MAX_CATEGORIES, describe_table, is_table_file
from datamodules.tabular import FinancialDataModule
from foundation.errors import InputError, OneLineParser, run_entry_point

BUILT_IN_IMAGE_SETS = {"mnist5k": MNIST5kDataModule, "fashion_mnist": FashionMNISTDataModule}


def describe_images(name: str) -> dict:
    """One image set: a built-in name, a folder in the ImageNet layout or a .tar.gz archive of one."""
    if name in BUILT_IN_IMAGE_SETS:
        return BUILT_IN_IMAGE_SETS[name]().describe()
    path = Path(name).expanduser()
    if path.is_file() and is_archive(path):
        return describe_archive(path)
    return ImageFolderDataModule(root=str(path)).describe()


def available_image_sets(data_dir: str | None) -> list[str]:
    """The built-in sets that are installed, and the archives in ``<data_dir>/images``."""
    names = []
    for name, cls in BUILT_IN_IMAGE_SETS.items():
        try:
            cls().describe()
        except InputError:
            continue
        names.append(name)
    if data_dir is not None:
        names += [str(p) for p in sorted((Path(data_dir) / "images").glob("*.tar.gz"))]
    return names


def is_table(name: str) -> bool:
    """A name with a table file's suffix (``.csv``, ``.parquet``, ...; not an image archive)."""
    path = Path(name).expanduser()
    return is_table_file(path) and not (path.is_file() and is_archive(path)) and not name.endswith(".tar.gz")


def print_table(console: Console, name: str, target: str | None, integer_categories: int = 0,
                max_categories: int = MAX_CATEGORIES) -> None:  # fmt: skip
    """Rows, columns (type, missing and distinct values, use: the kind, the rule that gave it)
    and classes of a table file, and the inference rule with the options that change it."""
    if target is None:
        raise InputError(f"{name}: option --target is missing; expected the name of the table's class column")
    info = describe_table(name, target, integer_categories, max_categories)
    table = Table(title=f"{info['file']}: {info['rows']:,} rows; {info['features_encoded']} features after one-hot "
                        "encoding (kinds inferred as CSVDataModule infers them)")  # fmt: skip
    for col in ["column", "type", "missing", "distinct", "use", "rule"]:
        table.add_column(col, justify="right" if col in ("missing", "distinct") else "left")
    for c in info["columns"]:
        table.add_row(c["column"], c["dtype"], f"{c['missing']:,}", f"{c['distinct']:,}", c["use"], c["rule"])
    console.print(table)
    console.print(f"column kinds: {info['kinds']}.\nRule: {INFERENCE_RULE}.", markup=False, highlight=False)
    classes = Table(title=f"classes of {target!r}")
    classes.add_column("class")
    classes.add_column("rows", justify="right")
    for label, count in info["classes"].items():
        classes.add_row(label, f"{count:,}")
    console.print(classes)


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(prog="python -m datamodules.describe", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument(
        "datasets", nargs="*",
        help=f"any of {sorted(DATASETS)}, {sorted(BUILT_IN_IMAGE_SETS)}, an image folder or .tar.gz archive, "
        "or a CSV or Parquet table (with --target) (default: all available)",
    )  # fmt: skip
    parser.add_argument("--data-dir", default=None, help="folder holding <dataset>/<raw file>; default: embedded")
    parser.add_argument("--target", default=None, help="a table's class column")
    parser.add_argument("--integer-categories", type=int, default=0, metavar="N",
                        help="a table's integer columns with at most N distinct values are categorical (default 0: "
                        "integers are numeric), as CSVDataModule's option integer_categories")
    parser.add_argument("--max-categories", type=int, default=MAX_CATEGORIES, metavar="N",
                        help="a categorical column with more categories is refused, as CSVDataModule's option")
    args = parser.parse_args(argv)
    tables = [n for n in args.datasets if is_table(n)]
    if args.datasets:
        image_names = [n for n in args.datasets if n not in tables
                       and (n in BUILT_IN_IMAGE_SETS or Path(n).expanduser().exists())]  # fmt: skip
        names = [n for n in args.datasets if n not in image_names and n not in tables]
    else:
        names = [n for n, entry in DATASETS.items() if args.data_dir or entry.obj.embedded]
        image_names = available_image_sets(args.data_dir)
    console = Console(width=120)
    for name in tables:
        print_table(console, name, args.target, args.integer_categories, args.max_categories)
    if names:
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
        console.print(table)
    if image_names:
        table = Table(title="Image sets")
        for col in ["dataset", "classes", "train", "val", "test", "first image (CxHxW)"]:
            table.add_column(col, justify="right")
        for name in image_names:
            info = describe_images(name)
            table.add_row(info["dataset"], str(info["classes"]), *(f"{info[s]:,}" for s in ("train", "val", "test")),
                          info["image"])  # fmt: skip
        console.print(table)


if __name__ == "__main__":
    run_entry_point(main)
