"""Non-finite numbers in training and testing (lightning_modules/finite.py): outputs refused naming
the input, the parameter or the members by seed; ``FiniteTraining`` stops at the first non-finite
loss one step later, naming epoch, step, batch and the kept checkpoint (train.py end to end:
tests/faults/test_nonfinite_training.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from foundation.errors import InputError
from lightning_modules.finite import (FiniteTraining, check_member_outputs, check_outputs, kinds, kept_checkpoint,
                                      member_seeds, nonfinite_parameter)  # fmt: skip

NAN, INF = float("nan"), float("inf")


def test_kinds_parameters_and_member_seeds():
    assert kinds(torch.tensor([NAN])) == "NaN" and kinds(torch.tensor([INF, NAN])) == "NaN and infinite"
    layer = nn.Linear(2, 2)
    assert nonfinite_parameter(layer) == "its parameters are all finite"
    with torch.no_grad():
        layer.bias[1] = -INF
    assert nonfinite_parameter(layer) == "its parameter 'bias' holds infinite values"
    assert member_seeds([3, 5, 8], torch.tensor([False, True, False])) == "the member of seed 5 (1 of 3 members)"
    assert member_seeds(list(range(12)), torch.ones(12, dtype=torch.bool), "x") == \
        "the members of seeds 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 2 more (12 of 12 x)"  # fmt: skip


def test_outputs_of_a_model_and_of_members():
    layer = nn.Linear(2, 2)
    logits = torch.zeros(4, 2)
    check_outputs(layer, logits, "test")
    logits[2, 1] = NAN
    with pytest.raises(InputError, match=r"^Linear: its val outputs \(logits\): input 2 has 1 NaN value\(s\) .*; "
                                         r"its parameters are all finite$"):  # fmt: skip
        check_outputs(layer, logits, "val")
    population = SimpleNamespace(seeds=[10, 11, 12])
    member_logits = torch.zeros(3, 4, 2)
    check_member_outputs(population, member_logits, "test")
    member_logits[2, 0, 0] = INF
    with pytest.raises(InputError, match=r"the test outputs \(logits\) of the member of seed 12 \(1 of 3 members\) "
                                         r"hold infinite values"):  # fmt: skip
        check_member_outputs(population, member_logits, "test")


def trainer(step, epoch=0, checkpoint=""):
    return SimpleNamespace(global_step=step, current_epoch=epoch,
                           checkpoint_callback=SimpleNamespace(best_model_path=checkpoint))  # fmt: skip


def test_training_stops_one_step_after_a_nan_loss_naming_where(tmp_path):
    callback, module = FiniteTraining(), nn.Linear(1, 1)
    callback.on_train_batch_end(trainer(1), module, {"loss": torch.tensor(0.5)}, None, 0)
    callback.on_train_batch_end(trainer(2), module, {"loss": torch.tensor(NAN)}, None, 1)  # read at the next hook
    ckpt = tmp_path / "last.ckpt"
    ckpt.write_bytes(b"")
    with pytest.raises(InputError, match=rf"^Linear: the training loss is NaN at epoch 0, step 1 \(batch 1 of the "
                                         rf"epoch; counted from 0\); training stopped, its last good checkpoint "
                                         rf"{ckpt} is kept; expected finite losses"):  # fmt: skip
        callback.on_save_checkpoint(trainer(2, checkpoint=str(ckpt)), module, {})
    callback.on_train_end(trainer(2), module)  # the pending step is done with


def test_a_populations_loss_names_its_members():
    callback = FiniteTraining()
    population = SimpleNamespace(seeds=[4, 5, 6])
    callback.on_train_batch_end(trainer(8, epoch=2), population, {"member_loss": torch.tensor([0.1, INF, NAN])},
                                None, 3)  # fmt: skip
    with pytest.raises(InputError, match=r"SimpleNamespace: the training loss of the members of seeds 5, 6 \(2 of 3 "
                                         r"members trained at once\) is NaN and infinite at epoch 2, step 7 .*no "
                                         r"checkpoint was written before it"):  # fmt: skip
        callback.on_train_epoch_end(trainer(8, epoch=2), population)
    assert kept_checkpoint(trainer(0, checkpoint="/no/such.ckpt")) == "no checkpoint was written before it"
