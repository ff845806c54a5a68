"""Training labels permuted at random (datamodules/label_permutation.py): label i is label π(i) for
π = ``torch.randperm`` drawn from the seed, the class counts and the rows kept, the test labels
untouched, in the tabular and the image datamodules."""

from __future__ import annotations

import pytest
import torch

from datamodules import ImageFolderDataModule, TwoMoonsDataModule
from datamodules.label_permutation import check_permute_labels, permuted_labels
from foundation.errors import InputError
from tests.datamodules.test_images import make_folder


def test_permuted_labels_by_hand():
    labels = torch.tensor([0, 0, 1, 2, 2, 2, 1])
    order = torch.randperm(7, generator=torch.Generator().manual_seed(9))
    got = permuted_labels(labels, 9)
    assert torch.equal(got, torch.tensor([labels[int(i)] for i in order]))
    assert torch.equal(torch.bincount(got), torch.bincount(labels)) and not torch.equal(got, labels)
    assert permuted_labels(labels, None) is labels


def test_the_option_is_null_or_a_non_negative_integer():
    assert check_permute_labels(None) is None and check_permute_labels(0) == 0 and check_permute_labels(7) == 7
    for bad in (-1, 1.0, True, "3"):
        with pytest.raises(InputError, match="option permute_labels="):
            check_permute_labels(bad)


def test_permuted_training_labels_are_a_seeded_permutation_and_test_labels_stay():
    true = TwoMoonsDataModule(n_samples=200)
    a, b, other = (TwoMoonsDataModule(n_samples=200, permute_labels=s) for s in (3, 3, 4))
    x, y = true.train_tensors
    xa, ya = a.train_tensors
    assert torch.equal(xa, x)  # the rows stay where they are
    assert torch.equal(ya.sort().values, y.sort().values)  # the same labels, in another order
    assert (ya != y).float().mean() > 0.3  # two-class labels at random: about half differ
    assert torch.equal(ya, b.train_tensors[1]) and not torch.equal(ya, other.train_tensors[1])
    for split in ("test",):
        assert all(torch.equal(s, t) for s, t in zip(a.stored_split(split), true.stored_split(split)))
    loader_y = torch.cat([yb for _, yb in a.eval_dataloader("train")])
    assert torch.equal(loader_y, ya) and a.describe()["permuted_train_labels"] == 3
    assert "permuted_train_labels" not in true.describe()
    with pytest.raises(InputError, match="permute_labels"):
        TwoMoonsDataModule(permute_labels=-1)


@pytest.mark.parametrize("in_memory", [True, False])
def test_image_training_labels_are_permuted_in_memory_and_from_files(tmp_path, in_memory):
    make_folder(tmp_path / "data", classes=("a", "b", "c", "d"), n=6)
    options = dict(root=str(tmp_path / "data"), cache_dir=str(tmp_path / "cache"), in_memory=in_memory)
    true, permuted = ImageFolderDataModule(**options), ImageFolderDataModule(**options, permute_labels=0)

    def labels(data, split):
        loader = data._loader(split, train=False)
        return torch.cat([torch.as_tensor(y) for _, y in loader])

    y, y_permuted = labels(true, "train"), labels(permuted, "train")
    assert torch.equal(y_permuted.sort().values, y.sort().values) and not torch.equal(y_permuted, y)
    assert torch.equal(labels(permuted, "test"), labels(true, "test"))
    if in_memory:  # the images served with them are the true ones, in their order
        assert torch.equal(permuted.split_images("train")[0], true.split_images("train")[0])
