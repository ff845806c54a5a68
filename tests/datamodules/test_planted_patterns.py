"""Images with planted patterns (``datamodules.planted_patterns``): masks where the class's
pattern is, classes balanced, seeds, the subset, blanking, bad options."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datamodules import PlantedPatternDataModule
from foundation.errors import InputError


def test_each_mask_covers_its_class_pattern_and_nothing_else_tells_the_classes_apart():
    data = PlantedPatternDataModule(num_patterns=3, size=16, pattern=4, n_train=30, n_test=12)
    images, labels = data._uint8_split("test")
    masks = data.masks("test")
    assert images.shape == (12, 1, 16, 16) and masks.shape == (12, 16, 16) and masks.dtype == torch.bool
    assert torch.bincount(labels).tolist() == [4, 4, 4]
    for image, label, mask in zip(images, labels, masks):
        assert int(mask.sum()) == 16
        rows, cols = mask.nonzero(as_tuple=True)
        square = image[0, rows.min():rows.max() + 1, cols.min():cols.max() + 1]
        assert torch.equal(square, torch.from_numpy(data.patterns[label].astype(np.uint8) * 255))
    assert len({p.tobytes() for p in data.patterns}) == 3 and all(p.sum() == 8 for p in data.patterns)
    blank = data.blank_patterns(images, masks)
    assert torch.equal(blank[:, :, ~masks.any(0)], images[:, :, ~masks.any(0)])  # outside every mask: unchanged
    assert all(not torch.equal(b[0][m], i[0][m]) for b, i, m in zip(blank, images, masks))


def test_seeded_and_the_subset_keeps_masks_aligned():
    a = PlantedPatternDataModule(size=16, pattern=4, n_train=20, n_test=10)
    b = PlantedPatternDataModule(size=16, pattern=4, n_train=20, n_test=10)
    assert torch.equal(a._uint8_split("train")[0], b._uint8_split("train")[0])
    c = PlantedPatternDataModule(size=16, pattern=4, n_train=20, n_test=10, data_seed=1)
    assert not torch.equal(a._uint8_split("train")[0], c._uint8_split("train")[0])
    some = PlantedPatternDataModule(size=16, pattern=4, n_train=20, n_test=10, subset={"test": 4})
    chosen = some.subset_indices("test")
    assert torch.equal(some.masks("test"), a.masks("test")[chosen]) and len(chosen) == 4


@pytest.mark.parametrize("options, message", [({"num_patterns": 1}, "option num_patterns=1"),
                                              ({"size": 16, "pattern": 9}, "option pattern=9"),
                                              ({"channels": 2}, "option channels=2"),
                                              ({"noise": 1.5}, "option noise=1.5")])
def test_bad_options(options, message):
    with pytest.raises(InputError, match=message):
        PlantedPatternDataModule(**options)
    with pytest.raises(InputError, match="no 'val' split"):
        PlantedPatternDataModule(size=16, pattern=4, n_train=8, n_test=8).masks("val")


def test_the_truth_of_probed_images_is_their_masks():
    data = PlantedPatternDataModule(size=16, pattern=4, n_train=20, n_test=13)
    data.setup("test")
    x, y = data.probe(4, "test")
    truth = data.probe_truth(4)
    images, labels = data.split_images("test")
    served = data.as_model_inputs(images, labels)[0]
    index = [next(i for i in range(13) if torch.equal(served[i], image)) for image in x]
    assert torch.equal(truth["mask"], data.masks("test")[index]) and truth["attributions"] is None
    assert torch.equal(data.probe_truth(4, part=slice(1, 3))["mask"], data.masks("test")[index[1:3]])
