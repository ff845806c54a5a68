"""Several modified copies of one training set served to a population (datamodules/stacked_cells.py):
member m reads copy ⌊m / K⌋ of every batch, the batches in the wrapped datamodule's own order
(its training loader's labels, epoch after epoch, and its rows picked from each copy by hand)."""

from __future__ import annotations

import pytest
import torch

from datamodules import TwoMoonsDataModule
from datamodules.stacked_cells import StackedCellsDataModule


@pytest.mark.parametrize("shuffle", [False, True])
def test_member_m_reads_copy_m_over_k_in_the_datamodules_order(shuffle):
    data = TwoMoonsDataModule(n_samples=60, batch_size=16, shuffle=shuffle, data_order_seed=4)
    x, y = data.train_tensors
    copies = torch.stack([x, x * 0, x + 10])  # three "cells": C = 3, N rows, d features
    stacked = StackedCellsDataModule(data, copies, repeats=2)  # M = 6 members
    assert stacked.train_tensors[0] is copies and torch.equal(stacked.train_tensors[1], y)
    their_loader, our_loader = data.train_dataloader(), stacked.train_dataloader()
    orders = []
    for _ in range(2):  # two epochs of one loader: each its own order, the wrapped datamodule's
        theirs, ours = list(their_loader), list(our_loader)
        assert len(ours) == len(theirs) == 3
        orders.append(torch.cat([yb for _, yb in ours]))
        for (xb, yb), (xs, ys) in zip(theirs, ours):
            assert xs.shape == (6, len(yb), 2) and torch.equal(ys, yb)
            rows = [int((x == row).all(1).nonzero()[0]) for row in xb]  # the batch's rows by hand
            for m in range(6):
                torch.testing.assert_close(xs[m], copies[m // 2, rows], rtol=0, atol=0)
    assert shuffle != torch.equal(*orders)  # shuffled: the second epoch's order differs
