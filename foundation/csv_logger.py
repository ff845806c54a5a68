"""Lightning's ``CSVLogger`` with both of its files written atomically (``foundation.files``).

Lightning appends to ``metrics.csv`` and, when a metric appears that its header lacks, rewrites
the file in place: a process killed during that rewrite leaves a truncated table, its earlier
rows lost. ``hparams.yaml`` is written in place too. Here each save writes the whole table (the
rows on disk, then the new ones, under the header of every key seen) to a temporary file that
then replaces the old one, so the file on disk is always a complete table, from the header on.
train.py's ``--log_to csv`` names :class:`CSVLogger`; run folders of before name Lightning's
class, and still load and resume.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from lightning_fabric.loggers.logger import rank_zero_experiment
from pytorch_lightning.core.saving import save_hparams_to_yaml
from pytorch_lightning.loggers import CSVLogger as LightningCSVLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter

from foundation.files import atomic_open, atomic_write


class AtomicExperimentWriter(ExperimentWriter):
    """Lightning's writer of ``metrics.csv`` and ``hparams.yaml``, each file replaced whole."""

    def save(self) -> None:
        """The recorded rows appended to ``metrics.csv``: the whole table written anew."""
        if not self.metrics:
            return
        path = Path(self.metrics_file_path)
        kept: list[dict[str, str]] = []
        if path.is_file():
            with open(path, newline="") as file:
                kept = list(csv.DictReader(file))  # written by this writer (Lightning's removes an older file)
        self._record_new_keys()  # every key seen, sorted: the header
        with atomic_open(path, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=self.metrics_keys)
            writer.writeheader()
            writer.writerows(kept)
            writer.writerows(self.metrics)
        self.metrics = []

    def log_hparams(self, params: dict[str, Any]) -> None:
        """``params`` added to the hyperparameters, ``hparams.yaml`` replaced whole."""
        self.hparams.update(params)
        atomic_write(Path(self.log_dir) / self.NAME_HPARAMS_FILE, lambda tmp: save_hparams_to_yaml(tmp, self.hparams))


class CSVLogger(LightningCSVLogger):
    """``pytorch_lightning.loggers.CSVLogger`` (the same options and folders) writing through
    :class:`AtomicExperimentWriter`."""

    @property
    @rank_zero_experiment
    def experiment(self) -> AtomicExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = AtomicExperimentWriter(log_dir=self.log_dir)
        return self._experiment


__all__ = ["AtomicExperimentWriter", "CSVLogger"]
