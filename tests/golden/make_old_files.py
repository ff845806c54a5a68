"""Writes the files of ``tests/fixtures/old_files/`` with today's code: what ``tests/golden/test_old_files.py``
checks still loads and resumes after a change of the library.

    .venv/bin/python -m tests.golden.make_old_files      # (re)writes tests/fixtures/old_files/

* ``population.pt``: a German Credit population of 4 members (``train.py`` with
  ``configs/population.yaml``, 1 epoch, hidden (16, 8));
* ``image_population.pt``: an ``ImagePopulation`` of 2 small CNNs (1 epoch on 12 random
  8x8 images, ``save_image_population``);
* ``run/``: a ``train.py`` run folder (German Credit MLP, hidden (16, 8), 1 epoch):
  ``config.yaml``, ``checkpoints/last.ckpt``, ``metrics.json``;
* ``consistency/``: an ``evaluate.py consistency`` run folder on ``population.pt``, stopped
  part way (the report and the later ensembles removed, as a kill leaves it);
* ``roar/``: a ROAR grid folder of ``run/`` (``run_grid``: saliency and random at t = 0.5,
  2 retrainings) with its map cache ``maps/``, stopped part way (one cell removed);
* ``stored.json``: digests of what the files hold (weights, explanations), for the test.

The run folder keeps the absolute (temporary) paths train.py wrote into it, as a moved run
folder has them (``--resume`` and ``load_run`` do not read them); the consistency folder's
``population`` is made relative (``../population.pt``), and the test copies every folder to a
temporary one and points that option at the copied population file. Rewriting these files is
a decision for the closing note: they stand for files users already have.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "tests" / "fixtures" / "old_files"
SMALL_MLP = ["--model.hidden", "[16, 8]", "--trainer.enable_progress_bar", "false", "--log_to", "none"]
CONSISTENCY = {
    "strategies": ["single", "average", "majority", "perturb", "connect", "combine"],
    "methods": ["saliency", "smoothgrad", "deepshap"], "n_models": [2], "n_sets": 2, "n_points": 6,
    "n_points_smoothgrad": 6, "n_points_deepshap": 3, "n_background": 4, "smoothgrad_samples": 4, "k": 3, "n_t": 2,
    "n_perturb": 2, "curve_epochs": 1, "device": "cpu",
}  # fmt: skip
KEPT_STRATEGIES = ("single", "average", "majority")  # the consistency sets left in place; the rest are removed
ROAR = {"estimators": {"saliency": {}, "random": {}}, "fractions": [0.0, 0.5], "retrainings": 2,
        "trainer": {"accelerator": "cpu", "max_epochs": 1}}  # fmt: skip
REMOVED_CELL = "random-t50.json"


def digest(tensors: dict) -> str:
    """SHA-256 of tensors in key order (key, dtype, shape, bytes)."""
    from portable import weights_sha256

    return weights_sha256(tensors)


def relative_paths(config: Path, **options: str) -> None:
    """Rewrite options of a folder's config.yaml to the given (relative) values."""
    data = yaml.safe_load(config.read_text())
    data.update(options)
    config.write_text(yaml.safe_dump(data, sort_keys=False))


def tabular_population(tmp: Path) -> dict:
    import train
    from lightning_modules import load_population

    metrics = train.main(["--config", "configs/population.yaml", "--model.size", "4", "--trainer.max_epochs", "1",
                          *SMALL_MLP, "--output_dir", str(tmp / "pop")])  # fmt: skip
    shutil.copyfile(metrics["population"], FILES / "population.pt")
    population, payload = load_population(FILES / "population.pt")
    return {"weights": digest(population.state_dict()), "member_test_acc": payload["member_test_acc"],
            "seeds": population.seeds}  # fmt: skip


def image_population() -> dict:
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader, TensorDataset

    from lightning_modules import ImagePopulation, save_image_population

    g = torch.Generator().manual_seed(71)
    x, y = torch.rand(12, 3, 8, 8, generator=g), torch.randint(0, 3, (12,), generator=g)
    population = ImagePopulation(arch="small_cnn", num_classes=3, seeds=[4, 2], stacking="loop", lr=0.05,
                                 warmup_epochs=0)  # fmt: skip
    pl.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False).fit(population, DataLoader(TensorDataset(x, y), batch_size=4))  # fmt: skip
    save_image_population(FILES / "image_population.pt", population, [0.25, 0.5], {"note": "tests/golden"})
    return {"members": [digest(population.member(i).net.state_dict()) for i in range(2)]}


def train_run(tmp: Path) -> dict:
    import train

    metrics = train.main(["--trainer.max_epochs", "1", *SMALL_MLP, "--output_dir", str(tmp / "runs"),
                          "--run_name", "run"])  # fmt: skip
    shutil.copytree(tmp / "runs" / "german" / "run", FILES / "run")
    state = torch.load(FILES / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    return {"weights": digest(state["state_dict"]), "test_acc": metrics["test_acc"], "epoch": state["epoch"]}


def consistency(tmp: Path) -> dict:
    import evaluate

    config = tmp / "consistency.yaml"
    config.write_text(yaml.safe_dump({"population": str(FILES / "population.pt"), **CONSISTENCY,
                                      "output_dir": str(tmp / "consistency")}))  # fmt: skip
    summary = evaluate.main(["consistency", "--config", str(config)])
    (run,) = (tmp / "consistency").iterdir()
    stopped = FILES / "consistency"
    shutil.copytree(run, stopped)
    for path in sorted(stopped.iterdir()):
        if path.is_file() and path.name != "config.yaml":
            path.unlink()  # the report: written only at the end
    for folder in sorted((stopped / "sets" / "n2").iterdir()):
        if folder.name not in KEPT_STRATEGIES:
            shutil.rmtree(folder)
    relative_paths(stopped / "config.yaml", population="../population.pt", output_dir=".")
    kept = {}
    for path in sorted((stopped / "sets").rglob("*.pt")):
        saved = torch.load(path, map_location="cpu", weights_only=True)
        kept[str(path.relative_to(stopped))] = {"accuracy": saved["accuracy"],
                                                "explanations": digest(saved["explanations"])}  # fmt: skip
    return {"kept": kept, "rows": summary["rows"]}


def roar(tmp: Path) -> dict:
    from evaluators.protocols.roar.grid import RoarGrid, run_grid
    from evaluators.inputs.runs import load_run

    clean, data, _ = load_run(FILES / "run", data_location=str(ROOT.parent / "shared" / "data"))
    out = FILES / "roar"
    run_grid(clean, data, RoarGrid(**ROAR), out)
    shutil.rmtree(out / "trainer", ignore_errors=True)
    removed = json.loads((out / "cells" / REMOVED_CELL).read_text())
    (out / "cells" / REMOVED_CELL).unlink()
    maps = {}
    for path in sorted((out / "maps").glob("*.pt")):
        saved = torch.load(path, map_location="cpu", weights_only=True)
        maps[path.name] = {"key": saved["key"], "maps": digest({"maps": saved["maps"]})}
    return {"removed": removed, "maps": maps}


def main() -> None:
    sys.path.insert(0, str(ROOT))
    if FILES.exists():
        shutil.rmtree(FILES)
    FILES.mkdir(parents=True)
    stored = {}
    with tempfile.TemporaryDirectory() as tmp:
        stored["population"] = tabular_population(Path(tmp))
        stored["image_population"] = image_population()
        stored["run"] = train_run(Path(tmp))
        stored["consistency"] = consistency(Path(tmp))
        stored["roar"] = roar(Path(tmp))
    (FILES / "stored.json").write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
