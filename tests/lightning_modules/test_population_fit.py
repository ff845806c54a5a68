"""lightning_modules/population_fit.py: the chunk plan and size, the mean filter, fitting from finished
chunks, and the reports; each against a hand computation or the saved weights."""

from __future__ import annotations

import pytest
import torch

from lightning_modules import PopulationMLP
from lightning_modules.population_fit import (auto_chunk_size, drop_below_mean, fit_population, plan_chunks,
                                              write_reports)
from lightning_modules.population_io import save_population


def test_chunk_plan_and_auto_size():
    assert plan_chunks(7, 3) == [[0, 1], [2, 3, 4], [5, 6]]
    assert plan_chunks(100, 69) == [list(range(50)), list(range(50, 100))]
    assert plan_chunks(6, 3) == [[0, 1, 2], [3, 4, 5]]
    # On the CPU: 32 MiB = 2**25 bytes over the largest tensor's bytes, widths 6-128-64-16-2.
    population, cpu = PopulationMLP(in_features=6, size=500), torch.device("cpu")
    assert auto_chunk_size(population, batch_size=1024, device=cpu) == 2**25 // (4 * 1024 * 128) == 64
    # batch 16: the largest is the 128 x 64 weight (2**15 bytes), room for 1024 members, capped at the 500
    assert auto_chunk_size(population, batch_size=16, device=cpu) == 500
    assert auto_chunk_size(PopulationMLP(in_features=6, size=10), batch_size=1024, device=cpu) == 10


def test_drop_below_mean_matches_hand_computation():
    accuracy = torch.tensor([0.80, 0.81, 0.79, 0.70, 0.805])  # mean 0.781 -> threshold 0.771
    assert drop_below_mean(accuracy, 0.01).tolist() == [True, True, True, False, True]
    assert drop_below_mean(accuracy, None).all()


def saved_chunks(run_dir, population, plan, accuracy):
    """The finished chunk files of ``population`` split by ``plan``, as fit_population writes them."""
    (run_dir / "chunks").mkdir(parents=True)
    for k, indices in enumerate(plan):
        save_population(run_dir / "chunks" / f"chunk-{k:03d}.pt", population.subset(indices),
                        [accuracy[i] for i in indices], {"chunk": k})  # fmt: skip


def no_trainer(_):
    raise AssertionError("a finished chunk was trained again")


def test_finished_chunks_are_loaded_not_retrained_and_concatenated_in_order(tmp_path):
    torch.manual_seed(0)
    population = PopulationMLP(in_features=5, seeds=[3, 4, 5, 6, 7], hidden=(4,))
    accuracy = [0.5, 0.6, 0.7, 0.8, 0.9]
    saved_chunks(tmp_path, population, plan_chunks(5, 3), accuracy)  # [[0, 1], [2, 3, 4]]
    whole, tested = fit_population(PopulationMLP(in_features=5, seeds=[3, 4, 5, 6, 7], hidden=(4,)), None,
                                   no_trainer, tmp_path, chunk_size=3)  # fmt: skip
    assert whole.seeds == [3, 4, 5, 6, 7]
    for key, value in population.state_dict().items():
        assert torch.equal(whole.state_dict()[key], value), key
    assert tested.tolist() == pytest.approx(accuracy)


def test_a_finished_chunk_of_other_seeds_is_refused(tmp_path):
    population = PopulationMLP(in_features=5, seeds=[0, 1, 2, 3], hidden=(4,))
    saved_chunks(tmp_path, population, [[0, 1], [2, 3]], [0.5] * 4)
    with pytest.raises(RuntimeError, match=r"holds seeds \[0, 1\]"):
        fit_population(PopulationMLP(in_features=5, seeds=[9, 1, 2, 3], hidden=(4,)), None, no_trainer, tmp_path,
                       chunk_size=2)  # fmt: skip


def test_reports_list_each_member_and_draw_the_histogram(tmp_path):
    accuracy = torch.tensor([0.8, 0.7, 0.9])
    kept = drop_below_mean(accuracy, 0.0)  # mean 0.8: 0.7 is dropped
    path = write_reports(tmp_path, [10, 11, 12], accuracy, kept, "title", train_accuracy=torch.tensor([1.0, 0.5, 0.25]))
    assert (tmp_path / "members.csv").read_text() == (
        "seed,test_acc,kept,train_acc\n10,0.800000,1,1.000000\n11,0.700000,0,0.500000\n12,0.900000,1,0.250000\n"
    )
    assert path == tmp_path / "accuracy_histogram.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
