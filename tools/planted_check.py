"""Does a model of planted-pattern images use the pattern? Its test accuracy on the images as
served and with each pattern's square replaced by fresh background (``blank_patterns``): the
second must fall to chance (1 / classes) when the pattern is the only signal (docs/ground_truth.md).

    python tools/planted_check.py runs/planted_patterns/planted-cnn
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datamodules import PlantedPatternDataModule  # noqa: E402
from evaluators.inputs.runs import load_run  # noqa: E402
from foundation.errors import InputError  # noqa: E402


def accuracies(run: Path) -> dict:
    """Test accuracy as served and with the patterns blanked, and chance."""
    model, data, _ = load_run(run, announce=False)
    if not isinstance(data, PlantedPatternDataModule):
        raise InputError(f"run {str(run)!r} was trained on {type(data).__name__}; expected PlantedPatternDataModule")
    data.setup("test")
    images, labels = data.split_images("test")
    blank = data.blank_patterns(images, data.masks("test"))
    model.eval()
    with torch.no_grad():
        out = {name: (model(data.as_model_inputs(x, labels)[0]).argmax(1) == labels).double().mean().item()
               for name, x in (("accuracy", images), ("accuracy_blanked", blank))}  # fmt: skip
    return out | {"chance": 1 / data.num_classes, "n_test": len(labels)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a train.py run folder of PlantedPatternDataModule")
    result = accuracies(parser.parse_args(argv).run)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
