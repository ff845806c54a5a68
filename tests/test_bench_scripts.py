"""Every benchmark still runs end to end: each ``bench/*.py`` with its sizes shrunk
(module constants), its own agreement checks included, ending in one JSON line with a
positive ``ratio``. The speeds themselves are the benches' business, not the tests'."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from evaluators.roar_grid import RoarGrid

ROOT = Path(__file__).resolve().parent.parent
ROAR_STEPS = {"accelerator": "cpu", "max_epochs": 1, "limit_train_batches": 2}

SHRUNK = {
    "consistency": {"M": 4, "N": 12},
    "ensembles": {"N_INPUTS": 16, "N_T": 3, "N_PERTURB": 2},
    "image_explainers": {"N_CIFAR": 3, "N_224": 1, "STEPS": 3, "STEPS_224": 2},
    "image_loader": {"WARMUP": 1, "N_BATCHES": 2},
    "image_population": {"K": 2, "STEPS": 1},
    "insertion_deletion": {"N_IMAGES": 3, "STEPS": 4, "REFERENCE_RUN": ROOT / "no-such-run"},
    "optimised_aggregation": {"N_BATCHED": 2, "M_AGG": 6, "N_BATCHED_224": 2, "M_ROBUST_224": 6, "STEPS_224": 2,
                              "SIZE_224": 32, "REFERENCE_RUN": ROOT / "no-such-run", "DATA_DIR": ROOT / "no-such-data"},
    "population": {"K": 2, "SETTINGS": [("adult", 512, 4e-3, 1), ("german", 32, 4e-3, 1)]},
    "simplex_qp": {"K_VALUES": (3,), "B_VALUES": (1, 8), "REPEATS": 1},
    "roar": {"TABULAR": RoarGrid(estimators={"saliency": {}}, fractions=[0.0, 0.5], retrainings=2, trainer=ROAR_STEPS),
             "IMAGES": RoarGrid(estimators={"random": {}}, fractions=[0.5], retrainings=1, trainer=ROAR_STEPS),
             "CLEAN_TRAINING": {"tabular": ROAR_STEPS, "images": ROAR_STEPS}},
}
NEEDS = {"insertion_deletion": "quantus"}  # benches that compare with an optional package


@pytest.mark.parametrize("name", sorted(SHRUNK))
def test_bench_script_runs_and_ends_in_json(name, monkeypatch, capsys):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name], reason=f"bench/{name}.py compares with {NEEDS[name]}, not installed")
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for constant, value in SHRUNK[name].items():
        assert hasattr(module, constant), f"bench/{name}.py no longer has {constant}"
        monkeypatch.setattr(module, constant, value)
    module.main()
    last = capsys.readouterr().out.strip().splitlines()[-1]
    result = json.loads(last)
    assert result["ratio"] > 0
