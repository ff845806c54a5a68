"""The aggregation and optimised-aggregation protocols reading their inputs a chunk at a
time (``chunk_size``, ``evaluators.inputs.chunks``) from an image folder served from files:
per-input results equal to all inputs at once in memory, whatever the chunk size; a run
killed (SIGKILL) after its first chunk resumes to an uninterrupted run's report without
recomputing that chunk; the parts of insertion/deletion and ROAD calls equal the whole call."""

from __future__ import annotations

import json
import os
import multiprocessing
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

import evaluate
from evaluators.inputs.chunks import streamed_references
from evaluators.inputs.runs import load_run, reference_inputs
from evaluators.metrics.insertion_deletion import insertion_deletion_curves
from evaluators.metrics.road import road_curves
from evaluators.protocols import aggregation
from foundation.errors import InputError
from tests.datamodules.test_images import make_folder

AGGREGATION = {
    "explainers": {"saliency": {}, "smoothgrad": {"nt_samples": 3}, "gradient_shap": {"n_samples": 2,
                   "baselines": "training"}, "integrated_gradients": {"n_steps": 3, "baselines": "blur"}},
    "aggregators": {"mean": {}, "ucb": {}}, "normalisations": ["z", "linear"], "sweeps": {}, "steps": 5,
    "n_baselines": 4, "n_grid": 3, "baseline_stats": "training",
}  # fmt: skip
OPTIMISED = {
    "explainers": {"saliency": {}, "smoothgrad": {"nt_samples": 3}, "input_x_gradient": {}},
    "m_agg": 3, "m_eval": 4, "m_sens": 2, "stability_samples": 2,
}  # fmt: skip


def tiny_cnn(classes: int = 3) -> nn.Module:
    """A seeded float32 CNN of 16 x 16 RGB images (the protocols' model in these tests)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                         nn.Linear(64, classes))  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """16 x 16 PNGs (3 classes, 3 images each per split), the CNN's state dict, and a data
    config per way of serving them: decoded into memory, or one file at a time."""
    tmp = tmp_path_factory.mktemp("streaming")
    make_folder(tmp / "images", size=16, n=3)
    torch.save(tiny_cnn().state_dict(), tmp / "net.pt")
    for in_memory in (True, False):
        data = {"class_path": "datamodules.ImageFolderDataModule",
                "init_args": {"root": str(tmp / "images"), "in_memory": in_memory, "batch_size": 4}}  # fmt: skip
        (tmp / f"data-{in_memory}.yaml").write_text(yaml.safe_dump({"data": data}))
    return tmp


def config(folder: Path, out: Path, protocol: str, in_memory: bool = True, **extra) -> str:
    cfg = {"run": str(folder / "net.pt"), "model_class": "tests.evaluators.inputs.test_chunks.tiny_cnn",
           "data_config": str(folder / f"data-{in_memory}.yaml"), "n_inputs": 6, "device": "cpu", "log_to": "none",
           "output_dir": str(out / "out"), **(AGGREGATION if protocol == "aggregation" else OPTIMISED),
           **extra}  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(json.dumps(cfg))
    return str(out / "config.yaml")


def report(out: Path) -> Path:
    (found,) = (out / "out").iterdir()
    return found


def chunk_folders(run_dir: Path) -> list[Path]:
    """The folders holding each chunk's caches, in order (the report folder itself for one chunk)."""
    return sorted((run_dir / "inputs").glob("chunk-*")) or [run_dir]


def per_input_aucs(run_dir: Path) -> dict[str, torch.Tensor]:
    """Every row's per-input insertion and deletion AUCs, from the chunks' score files."""
    rows = sorted(p.stem for p in (chunk_folders(run_dir)[0] / "scores").iterdir())
    return {f"{row}:{mode}": torch.cat([torch.load(c / "scores" / f"{row}.pt", weights_only=True)[mode]
                                        for c in chunk_folders(run_dir)])
            for row in rows for mode in ("insertion", "deletion")}  # fmt: skip


def assert_rows_close(got: dict, expected: dict) -> None:
    assert list(got) == list(expected)
    for row in expected:
        for metric, entry in expected[row].items():
            for key, value in entry.items():
                assert got[row][metric][key] == pytest.approx(value, rel=1e-5, abs=1e-6), (row, metric, key)


@pytest.fixture(scope="module")
def aggregation_runs(folder, tmp_path_factory) -> dict[str, tuple[dict, Path]]:
    """The aggregation report of all inputs at once in memory (``whole``), streamed from the
    files in chunks of 4 (``files``), and in chunks of 1 (``ones``): (summary, report folder)."""
    tmp, runs = tmp_path_factory.mktemp("aggregation_runs"), {}
    for name, options in (("whole", {}), ("files", {"in_memory": False, "chunk_size": 4}),
                          ("ones", {"chunk_size": 1})):  # fmt: skip
        summary = evaluate.main(["aggregation", "--config", config(folder, tmp / name, "aggregation", **options)])
        runs[name] = summary, report(tmp / name)
    return runs


def test_aggregation_streamed_from_files_equals_all_inputs_in_memory(aggregation_runs):
    whole, whole_dir = aggregation_runs["whole"]
    assert [p.name for p in chunk_folders(aggregation_runs["files"][1])] == ["chunk-00000", "chunk-00001"]
    assert len(chunk_folders(aggregation_runs["ones"][1])) == 6
    reference = per_input_aucs(whole_dir)
    assert len(reference["base__saliency:insertion"]) == 6
    table = (whole_dir / "table.md").read_text()
    for name in ("files", "ones"):
        summary, run_dir = aggregation_runs[name]
        got = per_input_aucs(run_dir)
        for key, values in reference.items():
            torch.testing.assert_close(got[key], values, rtol=1e-5, atol=1e-6, msg=key)
        assert_rows_close(summary["rows"], whole["rows"])
        assert summary["findings"] == whole["findings"] and summary["blank_maps"] == whole["blank_maps"]
        assert summary["n_inputs"] == 6
        assert (run_dir / "table.md").read_text() == table  # the report's table, to its printed digits


def test_optimised_streamed_from_files_equals_all_inputs_in_memory(folder, tmp_path):
    whole = evaluate.main(["optimised", "--config", config(folder, tmp_path / "whole", "optimised")])
    streamed = evaluate.main(["optimised", "--config", config(folder, tmp_path / "files", "optimised",
                                                              in_memory=False, chunk_size=4)])  # fmt: skip
    assert len(chunk_folders(report(tmp_path / "files"))) == 2
    scores = {}
    for out in ("whole", "files"):
        parts = [torch.load(c / "scores.pt", weights_only=True) | {} for c in chunk_folders(report(tmp_path / out))]
        for name in ("road.pt", "stability.pt", "weights.pt"):
            for part, c in zip(parts, chunk_folders(report(tmp_path / out))):
                part[name] = torch.load(c / name, weights_only=True)
        scores[out] = parts
    for row, metrics in scores["whole"][0].items():
        if row.endswith(".pt") or row == "definitions":  # "definitions": the methods' versions
            continue
        for metric, values in metrics.items():  # per input: infidelity, FCOR, sensitivities
            got = torch.cat([part[row][metric] for part in scores["files"]])
            torch.testing.assert_close(got, values, rtol=1e-4, atol=1e-6, equal_nan=True, msg=f"{row} {metric}")
        for name in ("road.pt", "stability.pt"):
            for metric, values in scores["whole"][0][name][row].items():
                got = torch.cat([part[name][row][metric] for part in scores["files"]])
                torch.testing.assert_close(got, values, rtol=1e-4, atol=1e-6, equal_nan=True, msg=f"{row} {metric}")
    for agg, weights in scores["whole"][0]["weights.pt"]["weights"].items():
        got = torch.cat([part["weights.pt"]["weights"][agg] for part in scores["files"]])
        torch.testing.assert_close(got, weights, rtol=1e-4, atol=1e-6, msg=agg)
    assert_rows_close(streamed["rows"], whole["rows"])
    assert streamed["blank_maps"] == whole["blank_maps"] and streamed["n_inputs"] == whole["n_inputs"] == 6


def evaluate_quietly(argv: list[str]) -> None:
    """``evaluate.main`` in a forked process: one thread (as DataLoader workers), no output."""
    torch.set_num_threads(1)
    sys.stdout = open(os.devnull, "w")
    evaluate.main(argv)


def test_a_killed_run_resumes_to_an_uninterrupted_runs_report(folder, aggregation_runs, tmp_path, monkeypatch):
    """SIGKILL of a process running the protocol once the first chunk's last score file is
    written; ``--resume`` computes only what is not finished (never the first chunk), and
    the report equals an uninterrupted run's. The process is forked, sparing a fresh
    interpreter's imports."""
    path = config(folder, tmp_path / "killed", "aggregation", in_memory=False, chunk_size=4)
    last_row = "norm__linear.pt"
    process = multiprocessing.get_context("fork").Process(target=evaluate_quietly,
                                                          args=(["aggregation", "--config", path],))  # fmt: skip
    process.start()
    out = tmp_path / "killed" / "out"
    deadline = time.monotonic() + 120
    while not list(out.glob(f"*/inputs/chunk-00000/scores/{last_row}")):
        assert process.is_alive(), f"the run stopped early (exit code {process.exitcode})"
        assert time.monotonic() < deadline, "the first chunk took over 120 s"
        time.sleep(0.02)
    process.kill()  # SIGKILL: no handler runs
    process.join()
    assert process.exitcode == -signal.SIGKILL
    run_dir = report(tmp_path / "killed")
    assert not (run_dir / "aggregation.json").exists()
    finished = {p.name for p in run_dir.glob("inputs/chunk-*") if (p / "scores" / last_row).is_file()}
    assert finished == {"chunk-00000"}
    left = 8 - len(list(run_dir.glob("inputs/chunk-00001/scores/*.pt")))  # 8 rows; any done before the kill stay
    calls, score_row = [], aggregation.score_row
    monkeypatch.setattr(aggregation, "score_row", lambda cfg, model, chunk, maps: calls.append(chunk.start) or
                        score_row(cfg, model, chunk, maps))  # fmt: skip
    resumed = evaluate.main(["aggregation", "--resume", str(run_dir)])
    assert calls == [4] * left  # the finished chunk is read; the second chunk's rows left are scored
    fresh, fresh_dir = aggregation_runs["files"]  # uninterrupted, the same options
    assert resumed["rows"] == fresh["rows"] and resumed["curves"] == fresh["curves"]
    got, expected = per_input_aucs(run_dir), per_input_aucs(fresh_dir)
    assert all(torch.equal(got[key], expected[key]) for key in expected)


def test_streamed_references_equal_the_in_memory_ones(folder):
    """The training images and statistics the chunks share, read a batch at a time from the
    files, equal ``reference_inputs``' from memory (the statistics to float32 rounding)."""
    data_of = {m: load_run(folder / "net.pt", model_class="tests.evaluators.inputs.test_chunks.tiny_cnn",
                           data_config=str(folder / f"data-{m}.yaml"))[1] for m in (True, False)}  # fmt: skip
    sample, (mean, std), _ = reference_inputs(data_of[True], 4, 0, torch.device("cpu"), {})
    got, (got_mean, got_std), modality = streamed_references(data_of[False], 4, torch.device("cpu"), {}, batch=2)
    assert modality.name == "images" and torch.equal(got, sample) and len(got) == 4
    torch.testing.assert_close(got_mean, mean, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got_std, std, rtol=1e-6, atol=1e-6)


def test_a_resume_with_another_chunk_size_is_refused(folder, tmp_path):
    """The chunks of a report folder are made with one chunk size (a config.yaml edited in
    between would otherwise mix chunks of two sizes)."""
    evaluate.main(["aggregation", "--config", config(folder, tmp_path, "aggregation", chunk_size=3, n_inputs=4)])
    run_dir = report(tmp_path)
    assert json.loads((run_dir / "inputs" / "chunking.json").read_text()) == {"chunk_size": 3, "n_inputs": 4}
    (run_dir / "aggregation.json").unlink()
    settings = yaml.safe_load((run_dir / "config.yaml").read_text())
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**settings, "chunk_size": 2}))
    with pytest.raises(InputError, match=r"chunking.json: the report folder's chunks were made with"):
        evaluate.main(["aggregation", "--resume", str(run_dir)])
    with pytest.raises(InputError, match=r"option chunk_size=0; expected null"):
        aggregation.AggregationConfig(run="r", chunk_size=0)


def test_non_finite_maps_in_a_chunk_are_refused_and_not_cached(folder, tmp_path, monkeypatch):
    explain = aggregation.explain

    def nan_in_the_second_chunk(model, x, name, index=None, **options):
        maps = explain(model, x, name, index=index, **options)
        if index is not None and int(index[0]) == 3 and name == "smoothgrad":
            maps[1, 0, 2, 2] = float("nan")
        return maps

    monkeypatch.setattr(aggregation, "explain", nan_in_the_second_chunk)
    with pytest.raises(InputError, match=r"explainer 'smoothgrad' \(the chunk of inputs 3 … 5\): map 1 has 1 NaN"):
        evaluate.main(["aggregation", "--config", config(folder, tmp_path, "aggregation", in_memory=False,
                                                         chunk_size=3)])  # fmt: skip
    run_dir = report(tmp_path)
    assert (run_dir / "inputs" / "chunk-00000" / "maps" / "smoothgrad.pt").is_file()
    assert not (run_dir / "inputs" / "chunk-00001" / "maps" / "smoothgrad.pt").exists()


@pytest.mark.parametrize("baseline", ["normal", "blur", "zero"])
def test_parts_of_an_insertion_deletion_call_equal_the_whole_call(baseline):
    model = tiny_cnn().eval()
    torch.manual_seed(1)
    x, maps = torch.randn(7, 3, 16, 16), torch.randn(7, 16, 16).round()  # rounded: ties, broken at random
    for mode in ("insertion", "deletion"):
        _, whole = insertion_deletion_curves(model, x, maps, mode, steps=6, baseline=baseline, seed=3)
        parts = [insertion_deletion_curves(model, x[a:b], maps[a:b], mode, steps=6, baseline=baseline, seed=3,
                                           offset=a, total=7)[1] for a, b in ((0, 3), (3, 4), (4, 7))]  # fmt: skip
        torch.testing.assert_close(torch.cat(parts), whole, rtol=1e-6, atol=1e-7)
    for order in ("morf", "lerf"):
        _, whole = road_curves(model, x, maps, order, seed=3)
        parts = [road_curves(model, x[a:b], maps[a:b], order, seed=3, offset=a, total=7)[1]
                 for a, b in ((0, 1), (1, 5), (5, 7))]  # fmt: skip
        torch.testing.assert_close(torch.cat(parts), whole, rtol=1e-6, atol=1e-7)


def test_a_part_whose_normal_noise_cannot_be_replayed_is_refused():
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 5 * 5, 2)).eval()
    x, maps = torch.randn(6, 3, 5, 5), torch.randn(6, 5, 5)  # 75 values per image: parts must hold 16 k
    with pytest.raises(InputError, match="cannot be replayed"):
        insertion_deletion_curves(model, x[1:3], maps[1:3], "insertion", steps=5, offset=1, total=6)
    with pytest.raises(InputError, match=r"options offset=4, total=5"):
        insertion_deletion_curves(model, x[:2], maps[:2], "insertion", steps=5, offset=4, total=5)
