"""The CSV logger whose files are replaced whole (``foundation.csv_logger``): the same table as
Lightning's own ``CSVLogger`` writes, and a save that fails half-way (a kill, a full disk) leaves
the complete table of before."""

from __future__ import annotations

import csv

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger as LightningCSVLogger

from foundation.csv_logger import CSVLogger


class Logged(pl.LightningModule):
    """A linear classifier logging its loss, and a new metric at every epoch's end, so the
    header grows (where Lightning rewrites the file)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch, _):
        loss = torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
        self.log("loss", loss)
        return loss

    def on_train_epoch_end(self) -> None:
        self.log(f"epoch_metric_{self.current_epoch}", float(self.current_epoch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(tmp_path, logger_class) -> str:
    torch.manual_seed(0)
    x, y = torch.randn(64, 4), torch.randint(0, 2, (64,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    logger = logger_class(tmp_path / logger_class.__module__, name="csv", version="")
    trainer = pl.Trainer(max_epochs=3, logger=logger, log_every_n_steps=2, enable_progress_bar=False,
                         enable_checkpointing=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(Logged(), loader)
    return (tmp_path / logger_class.__module__ / "csv" / "metrics.csv").read_text()


def test_the_table_is_lightnings_own(tmp_path):
    ours, theirs = fit(tmp_path, CSVLogger), fit(tmp_path, LightningCSVLogger)
    assert ours == theirs
    header = next(csv.reader(ours.splitlines()))
    assert {"epoch_metric_0", "epoch_metric_2"} <= set(header)


def test_a_save_that_fails_half_way_leaves_the_table_of_before(tmp_path, monkeypatch):
    logger = CSVLogger(tmp_path, name="csv", version="")
    logger.log_metrics({"a": 1.0}, step=0)
    logger.save()
    path = tmp_path / "csv" / "metrics.csv"
    before = path.read_text()
    logger.log_metrics({"b": 2.0}, step=1)  # a new key: Lightning would rewrite the file in place

    def fail(self, rows):
        self.writerow(next(iter(rows)))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(csv.DictWriter, "writerows", fail)
    with pytest.raises(OSError):
        logger.save()
    monkeypatch.undo()
    assert path.read_text() == before and sorted(p.name for p in path.parent.iterdir()) == ["metrics.csv"]
    logger.save()  # the rows kept in memory are written by the next save
    assert list(csv.DictReader(path.read_text().splitlines())) == [{"a": "1.0", "b": "", "step": "0"},
                                                                   {"a": "", "b": "2.0", "step": "1"}]  # fmt: skip


def test_hyperparameters_are_written_whole(tmp_path):
    logger = CSVLogger(tmp_path, name="csv", version="")
    logger.log_hyperparams({"lr": 0.1, "width": 8})
    assert (tmp_path / "csv" / "hparams.yaml").read_text() == "lr: 0.1\nwidth: 8\n"
