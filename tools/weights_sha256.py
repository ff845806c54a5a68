"""Print the SHA-256 of a run's trained weights, to compare runs across machines.

    python tools/weights_sha256.py runs/german/<run>          # its checkpoints/last.ckpt
    python tools/weights_sha256.py path/to/last.ckpt

The digest (``portable.weights_sha256``) covers the model's ``state_dict`` in key order:
each key, the tensor's dtype and shape, and its bytes as stored. Two runs print the same
digest exactly when every weight is bit-identical; ``train.py --portable`` prints it too.
The checkpoint is read with ``weights_only=True``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
from portable import weights_sha256  # noqa: E402


def checkpoint_path(path: Path) -> Path:
    if path.is_dir():
        path = path / "checkpoints" / "last.ckpt"
    if not path.is_file():
        raise SystemExit(f"error: {str(path)!r}: file not found; expected a run folder or a .ckpt file")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a train.py run folder or a checkpoint file")
    path = checkpoint_path(parser.parse_args(argv).run)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file ends in one line naming it
        raise SystemExit(f"error: {str(path)!r}: not a readable checkpoint ({type(err).__name__}); "
                         "expected a file written by train.py") from None  # fmt: skip
    print(f"{weights_sha256(checkpoint['state_dict'])}  {path}")


if __name__ == "__main__":
    sys.exit(main())
