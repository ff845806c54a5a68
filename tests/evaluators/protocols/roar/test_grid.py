"""The ROAR grid runner (evaluators/protocols/roar/grid.py): shards cover every cell once, a killed grid
resumes to the uninterrupted results, a tabular cell's K-population equals K MLPs trained alone. The
protocol: test_protocol.py; the callback: tests/callbacks/test_roar.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

import evaluators.protocols.roar.grid as roar_grid
from datamodules.roar import RemoveAndRetrainDataModule
from datamodules.tabular import TwoMoonsDataModule
from evaluators.protocols.roar.grid import Cell, RoarGrid, grid_cells, parse_shard, run_grid, shard_cells
from evaluators.protocols.roar.maps import dataset_maps
from evaluators.protocols.roar.report import collect
from foundation.errors import InputError
from lightning_modules.mlp import MLPClassifier

QUICK = {"accelerator": "cpu", "max_epochs": 1}


def tiny_grid(**options) -> RoarGrid:
    return RoarGrid(**{"estimators": {"saliency": {}, "random": {}}, "fractions": [0.0, 0.5], "retrainings": 2,
                       "trainer": QUICK, **options})  # fmt: skip


def moons() -> TwoMoonsDataModule:
    return TwoMoonsDataModule(n_samples=400, batch_size=32)


def records(out: Path) -> dict:
    """Every cell file's content without its timing."""
    cells = {}
    for path in sorted((out / "cells").glob("*.json")):
        record = json.loads(path.read_text())
        record.pop("seconds")
        cells[path.name] = record
    return cells


def test_cells_order_and_shards_cover_every_cell_once():
    grid = RoarGrid(estimators={"saliency": {}, "vargrad": {}, "random": {}}, fractions=[0.9, 0.0, 0.1, 0.5])
    cells = grid_cells(grid)
    assert [c.name for c in cells[:4]] == ["clean-t00", "saliency-t10", "saliency-t50", "saliency-t90"]
    assert len(cells) == 1 + 3 * 3 and len(set(cells)) == len(cells)
    for k in (1, 2, 3, 4, 11, 20):
        parts = [shard_cells(cells, (i, k)) for i in range(k)]
        flat = [c for part in parts for c in part]
        assert sorted(flat, key=cells.index) == cells and len(flat) == len(cells)
    assert shard_cells(cells, (1, 4)) == [cells[1], cells[5], cells[9]]
    assert parse_shard("3/8") == (3, 8)
    for bad in ("8/8", "-1/2", "1", "a/b"):
        with pytest.raises(InputError, match="--shard"):
            parse_shard(bad)


def test_bad_grid_options_name_themselves():
    with pytest.raises(InputError, match="fractions"):
        tiny_grid(fractions=[0.0, 1.0])
    with pytest.raises(InputError, match="unit"):
        tiny_grid(unit="channel")
    with pytest.raises(InputError, match="retrainings"):
        tiny_grid(retrainings=0)
    with pytest.raises(InputError, match="clean"):
        tiny_grid(estimators={"clean": {}})


def test_killed_grid_resumes_to_the_uninterrupted_results(tmp_path, monkeypatch):
    """A grid killed after two cells, then re-run; and the same grid in two shards: both end
    with cell files equal to one uninterrupted run's, and the same report."""
    clean, grid = MLPClassifier(in_features=2, seed=7), tiny_grid()
    run_grid(clean, moons(), grid, tmp_path / "whole")
    whole = records(tmp_path / "whole")
    assert list(whole) == ["clean-t00.json", "random-t50.json", "saliency-t50.json"]

    real_run_cells, calls = roar_grid.run_cells, []

    def dies_at_the_third(*args, **kwargs):
        calls.append(args[3])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_run_cells(*args, **kwargs)

    grid4 = tiny_grid(fractions=[0.0, 0.5, 0.7], cells_per_population=2)  # 5 cells: 2 + 2 + 1
    monkeypatch.setattr(roar_grid, "run_cells", dies_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        run_grid(clean, moons(), grid4, tmp_path / "killed")
    assert len(records(tmp_path / "killed")) == 4
    calls.clear()
    run_grid(clean, moons(), grid4, tmp_path / "killed")
    assert calls == [[Cell("random", 0.7)]]  # the re-run ran what the kill lost, alone
    monkeypatch.setattr(roar_grid, "run_cells", real_run_cells)
    run_grid(clean, moons(), grid4, tmp_path / "whole4")
    assert records(tmp_path / "killed") == records(tmp_path / "whole4")
    assert records(tmp_path / "whole4") != records(tmp_path / "whole")

    missing = run_grid(clean, moons(), grid, tmp_path / "shards", shard=(1, 2))
    assert [c.name for c in missing] == ["clean-t00", "random-t50"]
    assert run_grid(clean, moons(), grid, tmp_path / "shards", shard=(0, 2)) == []
    assert records(tmp_path / "shards") == whole
    a = collect(tmp_path / "whole", grid, {}, "none")
    b = collect(tmp_path / "shards", grid, {}, "none")
    assert [(r["retrain_mean"], r["no_retrain_acc"]) for r in a["rows"]] == \
        [(r["retrain_mean"], r["no_retrain_acc"]) for r in b["rows"]]
    for name in ("roar.json", "roar.csv", "roar.png", "retrain_vs_no_retrain.png"):
        assert (tmp_path / "shards" / name).is_file()


@pytest.mark.parametrize("shuffle", [False, True])
def test_tabular_cells_population_equals_k_mlps_trained_alone(tmp_path, shuffle):
    """The grid's three cells x K = 3 retrainings, trained as one 9-member PopulationMLP, score
    what 9 MLPClassifier fits alone on each cell's modified data (RemoveAndRetrainDataModule)
    score; the no-retrain variant is the clean model on the modified test rows."""
    clean, grid = MLPClassifier(in_features=2, seed=3), tiny_grid(retrainings=3)
    data = TwoMoonsDataModule(n_samples=400, batch_size=32, shuffle=shuffle, data_order_seed=5)
    run_grid(clean, data, grid, tmp_path)
    for name, estimator, fraction in [("clean-t00", "random", 0.0), ("saliency-t50", "saliency", 0.5),
                                      ("random-t50", "random", 0.5)]:  # fmt: skip
        record = json.loads((tmp_path / "cells" / f"{name}.json").read_text())
        maps = {s: dataset_maps(clean, data, estimator, s, tmp_path / "maps") for s in ("train", "test")}
        modified = RemoveAndRetrainDataModule(data, maps["train"], maps["test"], fraction)
        x, y = modified.modified_split("test")
        assert (x == data.test_tensors[0]).all(1).sum() == (len(y) if fraction == 0 else 0)  # 1 of 2 features
        alone = []
        for seed in (0, 1, 2):
            model = MLPClassifier(in_features=2, seed=seed)
            pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                       **QUICK).fit(model, datamodule=modified)  # fmt: skip
            with torch.no_grad():
                alone.append((model(x).argmax(1) == y).double().mean().item())
        assert record["retrain_acc"] == pytest.approx(alone, abs=1e-12)
        with torch.no_grad():
            assert record["no_retrain_acc"] == pytest.approx((clean(x).argmax(1) == y).double().mean().item())
        assert record["retrain_std"] == pytest.approx(torch.tensor(alone).std().item())


def test_tabular_grid_refuses_ddp():
    with pytest.raises(InputError, match="one device"):
        run_grid(MLPClassifier(in_features=2), moons(), tiny_grid(trainer={"devices": 2, "max_epochs": 1}),
                 Path("unused"))  # fmt: skip


def test_image_models_compute_channels_last_with_the_same_weights():
    """``in_fast_layout``: a copy of an NCHW ``ImageClassifier`` with its option on and its
    convolutions' weights channels-last, the same state dict bytes (so the same map cache key),
    logits equal to float rounding; the clean model untouched; the retrainings built from its
    hyperparameters channels-last too; a table model and a model already channels-last as they are."""
    from evaluators.protocols.roar.grid import fresh_models, in_fast_layout
    from evaluators.protocols.roar.maps import model_digest
    from lightning_modules.image_classifier import ImageClassifier

    clean = ImageClassifier(arch="small_cnn", num_classes=3, in_channels=1, seed=0)
    fast = in_fast_layout(clean)
    convs = [m.weight for m in fast.modules() if isinstance(m, torch.nn.Conv2d)]
    assert fast is not clean and fast.hparams.channels_last and not clean.hparams.channels_last and convs
    assert all(w.is_contiguous(memory_format=torch.channels_last) for w in convs)
    assert not convs[1].is_contiguous()  # 32 input channels: the two layouts differ (for 1 they coincide)
    assert all(m.weight.is_contiguous() for m in clean.modules() if isinstance(m, torch.nn.Conv2d))
    assert model_digest(fast) == model_digest(clean)
    x = torch.randn(5, 1, 12, 12, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(fast(x), clean.eval()(x), rtol=1e-5, atol=1e-6)
    (retrained,) = fresh_models(fast, [3])
    assert retrained.hparams.channels_last and retrained.hparams.seed == 3
    mlp = MLPClassifier(in_features=2, seed=0)
    assert in_fast_layout(mlp) is mlp and in_fast_layout(fast) is fast
