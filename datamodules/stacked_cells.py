"""Several modified copies of one tabular training set served to one ``PopulationMLP``, each
member reading its own copy: the K retrainings of C ROAR cells trained as one population.

Member m (of M = C·K) reads copy ``member_copy[m]``. A batch is the rows ``idx`` of every copy
at once, x of shape (M, B, d), and the labels y (B,) that the copies share (removing features
leaves the labels alone); ``PopulationMLP`` takes (M, B, d) inputs as they are, so member m's
step is the step ``MLPClassifier`` takes alone on copy m's batch. The batch order is the
wrapped ``TabularDataModule``'s (``shuffle``, ``data_order_seed``, ``batch_size``), the same for
every member, so each member equals the model trained alone on its copy through
``RemoveAndRetrainDataModule``.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from torch.utils.data import Dataset, RandomSampler, SequentialSampler

from datamodules.tabular import batch_loader


class StackedRows(Dataset):
    """Row ``i`` of every copy: ``__getitems__(idx)`` -> (x (M, B, d), y (B,))."""

    def __init__(self, copies: torch.Tensor, y: torch.Tensor, member_copy: torch.Tensor) -> None:
        self.copies, self.y, self.member_copy = copies, y, member_copy

    def __len__(self) -> int:
        return len(self.y)

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.as_tensor(indices)
        return self.copies[:, index][self.member_copy], self.y[index]


class StackedCellsDataModule(pl.LightningDataModule):
    """``copies`` (C, N, d): C modified versions of ``datamodule``'s training rows with its labels;
    each copy read by ``repeats`` consecutive members (members c·K .. c·K + K - 1 read copy c)."""

    def __init__(self, datamodule, copies: torch.Tensor, repeats: int) -> None:
        super().__init__()
        self.batch_size, self.shuffle = datamodule.batch_size, datamodule.shuffle
        self.data_order_seed = datamodule.data_order_seed
        y = datamodule.train_tensors[1]
        self.dataset = StackedRows(copies, y, torch.arange(len(copies)).repeat_interleave(repeats))

    @property
    def train_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The copies (C, N, d) and the shared labels (N,)."""
        return self.dataset.copies, self.dataset.y

    def train_dataloader(self):
        # the sampler of TabularDataModule.train_dataloader: epoch e's order is its e-th randperm
        sampler = (RandomSampler(self.dataset, generator=torch.Generator().manual_seed(self.data_order_seed))
                   if self.shuffle else SequentialSampler(self.dataset))  # fmt: skip
        return batch_loader(self.dataset, sampler, self.batch_size)
