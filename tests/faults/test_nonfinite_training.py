"""Issue 41, non-finite values in training and testing, and valid JSON results files.

A model whose outputs turn NaN stops ``train.py`` with one line (rc 2) naming the epoch, the step
and the non-finite loss, and, in a population, the member by seed; the last good checkpoint stays
and loads. NaN test outputs are an error naming the model (``train.py``'s test, ``evaluate.py run``)
or the members, never an accuracy. Results files parse as strict JSON: a number that is not finite
is ``null``, and the file says why. Before: rc 0, no warning, ``"test_loss": NaN`` in
``metrics.json``."""

from __future__ import annotations

import json
import math

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from foundation.errors import InputError
from foundation.files import json_text, write_json
from lightning_modules import ImageClassifier, PopulationMLP
from lightning_modules.finite import FiniteTraining
from tests.support.helpers import PoisonMember, assert_one_line_error, run_in_process

QUIET = ["--log_to", "none", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--trainer.limit_train_batches", "4", "--trainer.limit_test_batches", "2"]  # fmt: skip
# a user's TableNet whose outputs turn NaN from its 7th training forward pass: step 6 = epoch 1, batch 2
DIVERGES = ["--model", "lightning_modules.Classifier", "--model.net", "tests.support.user_nets.NaNAfter",
            "--model.net.hidden", "4", "--model.net.after", "6"]  # fmt: skip


def strict_json(text: str):
    """``json.loads`` that refuses NaN and ±inf (Python's reader takes them by default)."""
    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def finite_checkpoint(path) -> dict:
    """The checkpoint at ``path``, asserted to hold finite weights only."""
    ckpt = torch.load(path, weights_only=True)
    assert all(bool(torch.isfinite(w).all()) for w in ckpt["state_dict"].values() if w.is_floating_point())
    return ckpt


@pytest.fixture(scope="module")
def diverged(tmp_path_factory):
    """A train.py run of the diverging net (3 epochs of 4 batches): its result and run folder."""
    out = tmp_path_factory.mktemp("diverged")
    result = run_in_process("train.py", *DIVERGES, *QUIET, "--trainer.max_epochs", "3", "--output_dir", str(out),
                            "--run_name", "nan")  # fmt: skip
    return result, out / "german" / "nan"


def test_train_py_stops_at_the_first_nan_loss_naming_epoch_and_step(diverged):
    result, _ = diverged
    assert_one_line_error(result, "Classifier: the training loss is NaN at epoch 1, step 6 (batch 2 of the epoch; "
                                  "counted from 0); training stopped, its last good checkpoint ")  # fmt: skip


def test_the_last_good_checkpoint_is_kept_and_no_metrics_written(diverged):
    result, run = diverged
    assert f"{run / 'checkpoints' / 'last.ckpt'} is kept" in result.stderr
    ckpt = finite_checkpoint(run / "checkpoints" / "last.ckpt")  # loads and is finite: epoch 0, not the NaN model
    assert ckpt["epoch"] == 0 and ckpt["global_step"] == 4
    assert not (run / "metrics.json").exists()


def test_evaluate_run_refuses_nan_test_outputs_naming_the_model_and_parameter(diverged, tmp_path):
    _, run = diverged
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    ckpt["state_dict"]["net.0.weight"][1, 2] = math.nan  # a checkpoint whose model outputs NaN
    torch.save(ckpt, run / "checkpoints" / "nan.ckpt")
    result = run_in_process("evaluate.py", "run", str(run), "--checkpoint", "nan.ckpt", "--accelerator", "cpu",
                            "--out", str(tmp_path / "m.json"))  # fmt: skip
    assert_one_line_error(result, "Classifier: its test outputs (logits): input 0 has 2 NaN value(s) (")
    assert "inputs not finite); expected finite values; its parameter 'net.0.weight' holds NaN values" in result.stderr
    assert not (tmp_path / "m.json").exists()


def test_train_py_refuses_nan_test_outputs_instead_of_an_accuracy(tmp_path):
    result = run_in_process("train.py", *DIVERGES[:-2], "--model.net.in_eval", "true", *QUIET, "--trainer.max_epochs",
                            "1", "--output_dir", str(tmp_path), "--run_name", "eval")  # fmt: skip
    assert_one_line_error(result, "Classifier: its test outputs (logits): input 0 has 2 NaN value(s)")
    assert "its parameters are all finite" in result.stderr  # the network, not its weights, made the NaN
    assert not (tmp_path / "german" / "eval" / "metrics.json").exists()


@pytest.mark.parametrize("model", [["--config", "configs/population.yaml", "--population.chunk_size", "2"],
                                   ["--model", "lightning_modules.ModulePopulation", "--model.net",
                                    "tests.support.user_nets.TableNet", "--model.net.hidden", "4"]],
                         ids=["stacked-chunks", "whole"])  # fmt: skip
def test_a_population_stops_naming_the_member_whose_loss_is_nan(model, tmp_path):
    """Member 1 (seed 11) of a stacked population trained in chunks of two, its first chunk's
    second, and of a ModulePopulation trained whole, turns NaN before step 6 (epoch 1)."""
    result = run_in_process("train.py", *model, "--model.size", "4", "--model.first_seed", "10",
                            "--trainer.callbacks+=tests.support.helpers.PoisonMember", "--trainer.callbacks.step", "6",
                            *QUIET, "--trainer.max_epochs", "2", "--output_dir", str(tmp_path), "--run_name", "pop")
    chunked = model[0] == "--config"
    kind, members = ("PopulationMLP", 2) if chunked else ("ModulePopulation", 4)
    assert_one_line_error(result, f"{kind}: the training loss of the member of seed 11 (1 of {members} members "
                                  "trained at once) is NaN at epoch 1, step 6 (batch 2 of the epoch")  # fmt: skip
    run = tmp_path / "german" / "pop"
    kept = run / "chunks" / "chunk-000" / "last.ckpt" if chunked else run / "checkpoints" / "last.ckpt"
    assert finite_checkpoint(kept)["epoch"] == 0
    assert not (run / "population.pt").exists() and not (run / "metrics.json").exists()


def image_batches(n: int = 16) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.arange(n) % 2), batch_size=4)


def test_an_image_model_diverging_on_an_epochs_last_batch_is_never_saved(tmp_path):
    """The loss's check waits one step; the last batch's is made before the epoch's checkpoint."""
    model = ImageClassifier(arch="small_cnn", num_classes=2, in_channels=1, schedule="none")
    checkpoint = ModelCheckpoint(dirpath=tmp_path, filename="last")
    trainer = pl.Trainer(max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[FiniteTraining(), PoisonMember(member=0, step=3), checkpoint])  # fmt: skip
    with pytest.raises(InputError, match=r"^ImageClassifier: the training loss is NaN at epoch 0, step 3 \(batch 3 "
                                         r"of the epoch; counted from 0\); training stopped, no checkpoint was "
                                         r"written before it"):  # fmt: skip
        trainer.fit(model, image_batches())
    assert not list(tmp_path.iterdir())


def test_member_test_accuracies_are_refused_where_a_members_outputs_are_nan():
    population = PopulationMLP(in_features=3, hidden=(4,), seeds=[5, 6, 7])
    with torch.no_grad():
        population.weights[0][1, 0, 0] = math.inf  # member 1: inf * 0 and inf - inf make NaN logits
        population.biases[0][1] = -math.inf
    rows = DataLoader(TensorDataset(torch.randn(8, 3), torch.arange(8) % 2), batch_size=4)
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(InputError, match=r"^PopulationMLP: the test outputs \(logits\) of the member of seed 6 "
                                         r"\(1 of 3 members\) hold NaN values; expected finite values$"):  # fmt: skip
        trainer.test(population, rows, verbose=False)
    assert population.member_test_acc is None


def test_json_writer_writes_null_and_why_for_non_finite_numbers(tmp_path):
    payload = {"test_acc": 0.75, "test_acc_std": math.nan, "rows": [{"score": 1.0}, {"score": -math.inf}],
               "counts": (1, 2)}  # fmt: skip
    write_json(tmp_path / "r.json", payload, reasons={"test_acc_std": "a std over one member"})
    read = strict_json((tmp_path / "r.json").read_text())
    assert read == {"test_acc": 0.75, "test_acc_std": None, "rows": [{"score": 1.0}, {"score": None}],
                    "counts": [1, 2], "undefined": {"test_acc_std": "a std over one member",
                                                    "rows[1].score": "-inf (not a finite number; no reason recorded)"}}
    finite = {"a": [1.5, 2], "b": {"c": "x"}}
    assert json_text(finite, indent=2) == json.dumps(finite, indent=2)  # finite files are written as before
    with pytest.raises(ValueError, match=r"NaN or ±inf at \['\[0\]'\]"):
        json_text([math.nan])  # no mapping to say why in: refused, never a bare NaN
