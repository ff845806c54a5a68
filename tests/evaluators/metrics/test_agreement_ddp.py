"""PairwiseAgreement under DDP: two gloo processes, each scoring its own individuals,
reduce to the score of all individuals (the functional core on the whole data)."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from evaluators.metrics.agreement import PairwiseAgreement
from evaluators.metrics.agreement_functional import AGREEMENTS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank: int, world: int, port: int, e: torch.Tensor, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        shard = e[:, rank::world]
        for name in ("sa", "ssa", "cdc", "rank"):
            metric = PairwiseAgreement(name, k=3)
            metric.update(shard[:, :7])
            metric.update(shard[:, 7:])
            out[(rank, name)] = metric.compute()["mean"].item()
    finally:
        dist.destroy_process_group()


def test_metric_syncs_across_two_processes():
    torch.manual_seed(0)
    e = torch.randn(5, 40, 8)
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(worker, args=(2, free_port(), e, out), nprocs=2, join=True)
        results = dict(out)
    for name in ("sa", "ssa", "cdc", "rank"):
        expected = AGREEMENTS[name](e, 3).double().mean().item()
        assert abs(results[(0, name)] - expected) < 1e-9
        assert abs(results[(1, name)] - expected) < 1e-9


def nan_worker(rank: int, world: int, port: int, e: torch.Tensor, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        shard = e[:, rank::world].clone()
        if rank == 1:
            shard[0, 2, 4] = float("nan")  # one map entry of one individual on one rank
        metric = PairwiseAgreement("sa", k=3)
        metric.update(shard)
        out[rank] = metric.compute()["mean"].item()
    except Exception as err:  # kept for the test, then raised as the launcher sees it
        out[rank] = f"{type(err).__name__}: {err}"
        raise
    finally:
        dist.destroy_process_group()


def test_a_nan_on_one_rank_stops_the_job_naming_it_not_a_number_or_a_hang():
    """The rank holding the NaN raises the error naming the map; the launcher ends the job (the
    other rank, waiting in the reduction, fails or is stopped), so no process returns a score.
    Which rank's error the launcher reports first is a race, so each rank's own is kept."""
    torch.manual_seed(0)
    e = torch.randn(4, 20, 8)
    with mp.Manager() as manager:
        out = manager.dict()
        with pytest.raises(mp.ProcessRaisedException):
            mp.spawn(nan_worker, args=(2, free_port(), e, out), nprocs=2, join=True)
        results = dict(out)
    assert results[1].startswith("InputError: SA@k: explanations[0]: map 2 has 1 NaN value(s)")
    assert not any(isinstance(value, float) for value in results.values())
