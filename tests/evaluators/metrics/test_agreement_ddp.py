"""PairwiseAgreement under DDP: two gloo processes, each scoring its own individuals,
reduce to the score of all individuals (the functional core on the whole data)."""

from __future__ import annotations

import os
import socket

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
