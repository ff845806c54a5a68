"""Print rows, features and class balance of each dataset after preprocessing, and the
classes, images per split and image size of the image sets.

    python -m datamodules.describe                       # embedded German Credit and Adult, built-in image sets
    python -m datamodules.describe --data-dir ../shared/data   # all five, and the archives in images/
    python -m datamodules.describe mnist5k path/to/folder-or-archive.tar.gz

Image sets are described from their file lists and one image header (archives: their
member list), without unpacking or decoding them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from datamodules.errors import InputError, OneLineParser, run_entry_point
from datamodules.image_cache import describe_archive, is_archive
from datamodules.images import FashionMNISTDataModule, ImageFolderDataModule, MNIST5kDataModule
from datamodules.specs import DATASETS
from datamodules.tabular import FinancialDataModule

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


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(prog="python -m datamodules.describe", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument(
        "datasets", nargs="*",
        help=f"any of {sorted(DATASETS)}, {sorted(BUILT_IN_IMAGE_SETS)}, or an image folder or .tar.gz archive "
        "(default: all available)",
    )  # fmt: skip
    parser.add_argument("--data-dir", default=None, help="folder holding <dataset>/<raw file>; default: embedded")
    args = parser.parse_args(argv)
    if args.datasets:
        image_names = [n for n in args.datasets if n in BUILT_IN_IMAGE_SETS or Path(n).expanduser().exists()]
        names = [n for n in args.datasets if n not in image_names]
    else:
        names = [n for n, s in DATASETS.items() if args.data_dir or s.embedded]
        image_names = available_image_sets(args.data_dir)
    console = Console(width=120)
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
