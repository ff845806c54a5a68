"""What every population shares (lightning_modules/population_base.py): the members' seeds, the
data order option, and the test loop: each member's accuracy against its own extracted model's
predictions counted by hand, their mean, std (NumPy's, ddof 0), min and max logged."""

from __future__ import annotations

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from datamodules import TwoMoonsDataModule
from foundation.errors import InputError
from lightning_modules import PopulationMLP
from lightning_modules.population_base import check_data_order, seed_list


def test_seeds_given_or_counted_from_the_first_and_distinct():
    assert seed_list(3, 5, None) == [5, 6, 7] and seed_list(3, 5, [9, 2]) == [9, 2]
    with pytest.raises(InputError, match="option size=0; expected at least one member"):
        seed_list(0, 0, None)
    with pytest.raises(InputError, match="repeated seeds"):
        seed_list(2, 0, [1, 1])
    check_data_order("per_member")
    with pytest.raises(InputError, match="option data_order='random'"):
        check_data_order("random")


def test_the_test_loop_scores_every_member_as_its_own_model():
    data = TwoMoonsDataModule(n_samples=120, eval_batch_size=7)  # several test batches of 7
    population = PopulationMLP(2, size=4, first_seed=3, hidden=(5,))
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)  # fmt: skip
    logged = trainer.test(population, datamodule=data, verbose=False)[0]
    x, y = data.test_tensors
    with torch.no_grad():
        by_hand = np.array([(population.member(i).eval()(x).argmax(1) == y).double().mean().item() for i in range(4)])
    np.testing.assert_allclose(population.member_test_acc.numpy(), by_hand, rtol=0, atol=1e-6)
    assert len(set(by_hand.tolist())) > 1  # the members differ: a mix-up of members would show
    for key, value in (("mean", by_hand.mean()), ("std", by_hand.std()), ("min", by_hand.min()),
                       ("max", by_hand.max())):  # fmt: skip
        assert logged[f"test/member_acc_{key}"] == pytest.approx(value, abs=1e-6), key
