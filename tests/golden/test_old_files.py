"""Files written by the code of issue 29's start keep loading and resuming.

``tests/fixtures/old_files/`` (written by ``tests/golden/make_old_files.py``, whose docstring lists
them) holds a tabular population file, an image population file, a ``train.py`` run folder, a
consistency run folder and a ROAR grid folder with its map cache, the last two stopped part
way. Each test reads a file with today's loaders and checks the values against the digests the
writer stored (``stored.json``); the resumable folders are copied to a temporary folder (the
tests never write into ``tests/golden/``), resumed, and must finish with what an uninterrupted
run gives on this machine, loading the finished parts instead of recomputing them.
"""

from __future__ import annotations

import json
import shutil
from hashlib import sha256
from pathlib import Path

import pytest
import torch
import yaml

from tests.golden.make_old_files import CONSISTENCY, FILES, REMOVED_CELL, ROAR, SMALL_MLP, digest

STORED = json.loads((FILES / "stored.json").read_text())


def untouched(folder: Path) -> dict:
    """Every file under ``folder``: its inode, modification time and SHA-256 (an atomic
    rewrite changes the inode even where the bytes stay)."""
    return {str(p.relative_to(folder)): (p.stat().st_ino, p.stat().st_mtime_ns, sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


def test_population_file_loads():
    from lightning_modules import load_member, load_population

    population, payload = load_population(FILES / "population.pt")
    stored = STORED["population"]
    assert digest(population.state_dict()) == stored["weights"]
    assert population.seeds == stored["seeds"] and payload["member_test_acc"] == stored["member_test_acc"]
    member = load_member(FILES / "population.pt", 2)
    assert digest(member.net.state_dict()) == digest(population.member(2).net.state_dict())


def test_image_population_file_loads():
    from lightning_modules import load_image_member, load_image_population

    population, _ = load_image_population(FILES / "image_population.pt")
    stored = STORED["image_population"]["members"]
    assert [digest(population.member(i).net.state_dict()) for i in range(population.size)] == stored
    assert digest(load_image_member(FILES / "image_population.pt", 1).net.state_dict()) == stored[1]


def test_train_run_loads_and_resumes(tmp_path, data_dir):
    import evaluate
    import train
    from evaluators.inputs.runs import load_run

    run = tmp_path / "run"
    shutil.copytree(FILES / "run", run)
    model, _, _ = load_run(run, data_location=str(data_dir))
    assert digest(model.state_dict()) == STORED["run"]["weights"]
    assert evaluate.evaluate_run(run, str(data_dir), accelerator="cpu")["test_acc"] == STORED["run"]["test_acc"]
    train.main(["--resume", str(run), "--trainer.max_epochs", "2", "--data.data_dir", str(data_dir), *SMALL_MLP[2:]])
    whole = train.main(["--trainer.max_epochs", "2", *SMALL_MLP, "--output_dir", str(tmp_path / "whole"),
                        "--run_name", "run", "--data.data_dir", str(data_dir)])  # fmt: skip
    resumed = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    fresh = torch.load(Path(whole["run_dir"]) / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert resumed["epoch"] == STORED["run"]["epoch"] + 1 == fresh["epoch"]
    assert digest(resumed["state_dict"]) == digest(fresh["state_dict"]) != STORED["run"]["weights"]


def copied_consistency_run(tmp_path: Path) -> tuple[Path, Path]:
    """The stopped consistency folder and its population copied under ``tmp_path``, the folder's
    config pointed at the copied population."""
    run, population = tmp_path / "consistency", tmp_path / "population.pt"
    shutil.copytree(FILES / "consistency", run)
    shutil.copyfile(FILES / "population.pt", population)
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["population"] == "../population.pt"
    config["population"] = str(population)  # the folder's own path to the population, once moved
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return run, population


def test_consistency_run_resumes(tmp_path):
    import evaluate

    run, population = copied_consistency_run(tmp_path)
    for name, stored in STORED["consistency"]["kept"].items():
        saved = torch.load(run / name, map_location="cpu", weights_only=True)
        assert (saved["accuracy"], digest(saved["explanations"])) == (stored["accuracy"], stored["explanations"])
    before = {name: torch.load(run / name, weights_only=True) for name in STORED["consistency"]["kept"]}
    with pytest.warns(UserWarning) as caught:
        resumed = evaluate.main(["consistency", "--resume", str(run)])
    # the kept sets hold SmoothGrad's maps of before issue 42 (one draw per call, no definitions
    # written): each file named once in a warning, its SmoothGrad computed again
    recomputed = [str(w.message) for w in caught if "computing again what it keeps of smoothgrad" in str(w.message)]
    assert len(recomputed) == len(before)
    assert all(any(str(run / name) in m for m in recomputed) for name in before)
    assert len(untouched(run / "sets")) == 12 and (run / "consistency.json").is_file()
    fresh_config = tmp_path / "fresh.yaml"
    fresh_config.write_text(yaml.safe_dump({"population": str(population), **CONSISTENCY,
                                            "output_dir": str(tmp_path / "fresh")}))  # fmt: skip
    fresh = evaluate.main(["consistency", "--config", str(fresh_config)])
    (fresh_run,) = (tmp_path / "fresh").iterdir()
    for name, old in before.items():
        after = torch.load(run / name, weights_only=True)
        assert after["definitions"] == {"saliency": 1, "smoothgrad": 2, "deepshap": 1}
        assert after["accuracy"] == old["accuracy"]
        for method in ("saliency", "deepshap"):  # deterministic: the kept maps, bit for bit
            assert torch.equal(after["explanations"][method], old["explanations"][method])
        new = torch.load(fresh_run / name, weights_only=True)["explanations"]["smoothgrad"]
        assert torch.equal(after["explanations"]["smoothgrad"], new)
        assert not torch.equal(new, old["explanations"]["smoothgrad"])
    assert resumed["rows"] == fresh["rows"]  # every method: the resumed run is an uninterrupted one
    # the stored rows, and Watson et al.'s C (added since) per strategy and method
    assert [(r["strategy"], r["method"], r["metric"]) for r in resumed["rows"] if r["metric"] != "watson_c"] == \
        [(r["strategy"], r["method"], r["metric"]) for r in STORED["consistency"]["rows"]]
    assert [(r["strategy"], r["method"]) for r in resumed["rows"] if r["metric"] == "watson_c"] == \
        list(dict.fromkeys((r["strategy"], r["method"]) for r in STORED["consistency"]["rows"]))


def test_an_old_definition_smoothgrad_set_is_recomputed_and_deterministic_maps_read(tmp_path):
    """A kept set of before issue 42: its SmoothGrad maps are computed again, its Saliency maps
    read (marked here by doubling them in the file: the resumed run keeps the doubled ones); a
    set rewritten with today's definitions is then read whole, without a warning."""
    import warnings

    import evaluate

    run, _ = copied_consistency_run(tmp_path)
    name = "sets/n2/single/set-000.pt"
    payload = torch.load(run / name, weights_only=True)
    payload["explanations"]["saliency"] = 2 * payload["explanations"]["saliency"]
    torch.save(payload, run / name)
    with pytest.warns(UserWarning, match=f"{run / name}: computing again what it keeps of smoothgrad: "
                                         "made under definition 1 of the method, today's is 2"):  # fmt: skip
        evaluate.main(["consistency", "--resume", str(run)])
    after = torch.load(run / name, weights_only=True)
    assert torch.equal(after["explanations"]["saliency"], payload["explanations"]["saliency"])
    assert not torch.equal(after["explanations"]["smoothgrad"], payload["explanations"]["smoothgrad"])
    (run / "consistency.json").unlink()
    files = untouched(run / "sets")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*computing again")
        evaluate.main(["consistency", "--resume", str(run)])
    assert untouched(run / "sets") == files


def test_roar_grid_resumes_from_its_cells_and_map_cache(tmp_path, data_dir, monkeypatch):
    from evaluators.protocols.roar import maps as roar_maps
    from evaluators.protocols.roar.grid import RoarGrid, run_grid
    from evaluators.inputs.runs import load_run

    grid_dir = tmp_path / "roar"
    shutil.copytree(FILES / "roar", grid_dir)
    for name, stored in STORED["roar"]["maps"].items():
        saved = torch.load(grid_dir / "maps" / name, map_location="cpu", weights_only=True)
        assert {"key": saved["key"], "maps": digest({"maps": saved["maps"]})} == stored
    before = untouched(grid_dir)
    clean, data, _ = load_run(FILES / "run", data_location=str(data_dir))

    def no_new_maps(*args, **kwargs):
        raise AssertionError("a map was recomputed; expected every map from the cache")

    monkeypatch.setattr(roar_maps, "estimator_maps", no_new_maps)
    assert run_grid(clean, data, RoarGrid(**ROAR), grid_dir) == []
    after = untouched(grid_dir)
    assert {k: after[k] for k in before} == before  # finished cells and cached maps untouched
    resumed = json.loads((grid_dir / "cells" / REMOVED_CELL).read_text())
    removed = STORED["roar"]["removed"]
    assert {k: resumed[k] for k in ("estimator", "fraction", "seeds")} == \
        {k: removed[k] for k in ("estimator", "fraction", "seeds")}
    fresh_dir = tmp_path / "fresh"
    run_grid(clean, data, RoarGrid(**{**ROAR, "estimators": {"random": {}}}), fresh_dir, cache_dir=grid_dir / "maps")
    fresh = json.loads((fresh_dir / "cells" / REMOVED_CELL).read_text())
    assert {k: v for k, v in resumed.items() if k != "seconds"} == {k: v for k, v in fresh.items() if k != "seconds"}
