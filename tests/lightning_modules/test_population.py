"""PopulationMLP: members equal the same models trained alone; chunked, resumable runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

import train
from datamodules import FinancialDataModule
from lightning_modules import MLPClassifier, PopulationMLP, load_member, load_population
from lightning_modules import population as population_module


def quiet_trainer(max_epochs: int = 1, **kwargs) -> pl.Trainer:
    # On the CPU, where a member equals its model alone bit for bit; tests/gpu/test_gpu.py holds the GPU's bound.
    return pl.Trainer(
        max_epochs=max_epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, deterministic=True, accelerator="cpu", **kwargs,
    )  # fmt: skip


def max_param_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def test_member_initialisation_is_mlpclassifier_with_its_seed():
    population = PopulationMLP(in_features=7, seeds=[3, 11, 5])
    for i, seed in enumerate([3, 11, 5]):
        alone = MLPClassifier(in_features=7, seed=seed)
        assert max_param_diff(population.member(i), alone) == 0.0
        x = torch.randn(4, 7)
        torch.testing.assert_close(population(x)[i], alone(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("dataset", "batch_size", "lr", "loss_on"),
    [("german", 32, 4e-3, "logits"), ("adult", 128, 4e-3, "logits"),  # 61 and 6 inputs; paper hyperparameters
     ("german", 32, 4e-3, "probabilities")],  # the reference code's loss
)  # fmt: skip
def test_population_member_equals_model_trained_alone(dataset, batch_size, lr, loss_on):
    seeds = [0, 7, 42]
    data = FinancialDataModule(dataset=dataset, batch_size=batch_size)
    population = PopulationMLP(in_features=data.num_features, seeds=seeds, lr=lr, loss_on=loss_on)
    quiet_trainer().fit(population, datamodule=data)
    for i, seed in enumerate(seeds):
        alone = MLPClassifier(in_features=data.num_features, seed=seed, lr=lr, loss_on=loss_on)
        quiet_trainer().fit(alone, datamodule=FinancialDataModule(dataset=dataset, batch_size=batch_size))
        assert max_param_diff(population.member(i), alone) == 0.0  # bit for bit


def test_per_member_data_order_equals_each_model_shuffled_alone():
    seeds = [1, 2]
    population = PopulationMLP(in_features=61, seeds=seeds, lr=4e-3, data_order="per_member")
    quiet_trainer(max_epochs=2).fit(population, datamodule=FinancialDataModule(dataset="german"))
    shared = PopulationMLP(in_features=61, seeds=seeds, lr=4e-3)
    quiet_trainer(max_epochs=2).fit(shared, datamodule=FinancialDataModule(dataset="german"))
    for i, seed in enumerate(seeds):
        alone = MLPClassifier(in_features=61, seed=seed, lr=4e-3)
        data = FinancialDataModule(dataset="german", shuffle=True, data_order_seed=seed)
        quiet_trainer(max_epochs=2).fit(alone, datamodule=data)
        assert max_param_diff(population.member(i), alone) <= 1e-5
        assert max_param_diff(shared.member(i), alone) > 1e-3  # the order matters


def test_gradient_clipping_acts_per_member():
    seeds = [4, 9]
    population = PopulationMLP(in_features=61, seeds=seeds, lr=4e-3, grad_clip_norm=0.05)
    quiet_trainer().fit(population, datamodule=FinancialDataModule(dataset="german"))
    for i, seed in enumerate(seeds):
        alone = MLPClassifier(in_features=61, seed=seed, lr=4e-3)
        clipped = quiet_trainer(gradient_clip_val=0.05, gradient_clip_algorithm="norm")
        clipped.fit(alone, datamodule=FinancialDataModule(dataset="german"))
        assert max_param_diff(population.member(i), alone) <= 1e-5


def test_test_pass_in_row_pieces_scores_each_member_like_alone(monkeypatch):
    seeds = [3, 4, 9]
    data = FinancialDataModule(dataset="german")
    population = PopulationMLP(in_features=61, seeds=seeds, lr=4e-3)
    quiet_trainer().fit(population, datamodule=data)
    # pieces of 7 rows (the 200 test rows are one evaluation batch)
    monkeypatch.setattr(population_module, "EVAL_BLOCK_BYTES", 4 * len(seeds) * 128 * 7)
    assert population._eval_rows() == 7
    quiet_trainer().test(population, datamodule=data, verbose=False)
    x, y = data.test_tensors
    for i in range(len(seeds)):
        with torch.no_grad():
            alone = (population.member(i)(x).argmax(dim=-1) == y).double().mean().item()
        assert population.member_test_acc[i].item() == pytest.approx(alone, abs=1e-7)


def test_subset_and_concatenate_keep_members():
    population = PopulationMLP(in_features=5, seeds=[10, 11, 12, 13])
    with torch.no_grad():
        for p in population.parameters():
            p.add_(torch.randn_like(p))
    parts = [population.subset([0, 1]), population.subset([2, 3])]
    whole = PopulationMLP.concatenate(parts)
    assert whole.seeds == [10, 11, 12, 13]
    assert max_param_diff(whole, population) == 0.0
    assert max_param_diff(parts[1].member(0), population.member(2)) == 0.0


def population_args(out: Path, *extra: str) -> list[str]:
    return [
        "--config", "configs/population.yaml", "--model.size", "6", "--population.chunk_size", "3",
        "--trainer.max_epochs", "4", "--trainer.enable_progress_bar", "false", "--log_to", "csv",
        "--output_dir", str(out), *extra,
    ]  # fmt: skip


def test_interrupted_run_resumes_without_redoing_chunks_or_epochs(tmp_path, monkeypatch):
    reference = train.main(population_args(tmp_path / "reference", "--run_name", "ref"))
    record = tmp_path / "epochs.txt"
    monkeypatch.setenv("RELEXP_TEST_RECORD", str(record))
    monkeypatch.setenv("RELEXP_TEST_INTERRUPT", "1")
    args = population_args(
        tmp_path / "runs", "--run_name", "crash",
        "--trainer.callbacks+=tests.support.helpers.InterruptChunk",
        "--trainer.callbacks+=tests.support.helpers.RecordEpochs",
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="simulated crash"):
        train.main(args)
    run_dir = tmp_path / "runs" / "german" / "crash"
    assert not (run_dir / "population.pt").exists() and not (run_dir / "metrics.json").exists()
    assert (run_dir / "chunks" / "chunk-000.pt").exists()
    first_metrics = (run_dir / "csv" / "metrics.csv").read_text()
    monkeypatch.delenv("RELEXP_TEST_INTERRUPT")
    resumed = train.main(["--resume", str(run_dir)])
    assert not (run_dir / "chunks").exists()  # all of it is in population.pt now
    # the interrupted part's metrics stay; the resumed part logs beside them
    assert (run_dir / "csv" / "metrics.csv").read_text() == first_metrics
    assert "train/member_loss_mean" in (run_dir / "csv" / "resume-1" / "metrics.csv").read_text()
    epochs = record.read_text().split("\n")
    assert [e for e in epochs if e.startswith("chunk-000")] == [f"chunk-000 {k}" for k in range(4)]
    # chunk 1 crashed at the start of epoch 2 and resumed there from its epoch-1 checkpoint
    assert [e for e in epochs if e.startswith("chunk-001")] == [f"chunk-001 {k}" for k in range(4)]
    a, payload_a = load_population(reference["population"])
    b, payload_b = load_population(resumed["population"])
    assert a.seeds == b.seeds == list(range(6))
    for key, value in payload_a["state_dict"].items():
        assert torch.equal(value, payload_b["state_dict"][key]), key
    assert payload_a["member_test_acc"] == payload_b["member_test_acc"]
    metadata = payload_b["metadata"]
    assert metadata["dataset"]["dataset"] == "german" and "torch" in metadata["versions"]
    member = load_member(resumed["population"], 4)
    assert isinstance(member, MLPClassifier) and member.hparams.seed == 4
    x = torch.randn(3, 61)
    torch.testing.assert_close(member(x), b(x)[4])
    assert (run_dir / "members.csv").read_text().count("\n") == 7
    assert (run_dir / "accuracy_histogram.png").stat().st_size > 1000


def test_filter_drops_members_below_mean(tmp_path):
    metrics = train.main(population_args(tmp_path, "--population.drop_below_mean", "0.0", "--population.keep_chunks",
                                         "true"))  # fmt: skip
    assert sorted(p.name for p in (Path(metrics["run_dir"]) / "chunks").iterdir()) == [
        "chunk-000", "chunk-000.pt", "chunk-001", "chunk-001.pt"]  # fmt: skip
    population, payload = load_population(metrics["population"])
    lines = (Path(metrics["run_dir"]) / "members.csv").read_text().split()[1:]
    accuracy = [float(line.split(",")[1]) for line in lines]
    mean = sum(accuracy) / len(accuracy)
    assert population.size == sum(a >= mean - 1e-6 for a in accuracy) == metrics["members_kept"]
    assert 0 < population.size < 6
    assert all(a >= mean - 1e-6 for a in payload["member_test_acc"])
    assert os.path.getsize(metrics["population"]) > 0
