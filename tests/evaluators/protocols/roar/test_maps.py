"""evaluators/protocols/roar/maps.py: a split's maps equal estimator_maps of its model inputs, are
cached under a key that misses on other options or weights, and a cached file holding NaN or an
unreadable one is recomputed; the digests against hashlib by hand."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from datamodules.roar import model_inputs
from evaluators.protocols.roar import maps as roar_maps
from evaluators.protocols.roar.estimators import estimator_maps
from foundation.errors import InputError
from lightning_modules.image_classifier import create_image_model
from tests.datamodules.test_roar import TinyImages
from tests.support.user_nets import TinyCNN


def fail(*args, **kwargs):
    raise AssertionError("recomputed although cached")


def test_dataset_maps_cache_hit_and_miss(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model, dm = create_image_model("small_cnn", 3, 3), TinyImages()
    maps = roar_maps.dataset_maps(model, dm, "saliency", "test", tmp_path, chunk=10, progress=False)
    x, _ = model_inputs(dm, "test")
    np.testing.assert_allclose(maps, estimator_maps(model, x, "saliency"), atol=1e-7)
    assert maps.dtype == torch.float32 and len(list(tmp_path.glob("test-saliency-*.pt"))) == 1

    monkeypatch.setattr(roar_maps, "estimator_maps", fail)
    assert torch.equal(roar_maps.dataset_maps(model, dm, "saliency", "test", tmp_path, chunk=10, progress=False), maps)
    with pytest.raises(AssertionError, match="recomputed"):  # another option, another key
        roar_maps.dataset_maps(model, dm, "saliency", "test", tmp_path, chunk=10, progress=False, abs=True)
    with pytest.raises(AssertionError, match="recomputed"):  # other weights
        with torch.no_grad():
            next(model.parameters()).add_(1.0)
        roar_maps.dataset_maps(model, dm, "saliency", "test", tmp_path, chunk=10, progress=False)


def test_the_roar_cache_digests_a_network_with_batchnorm():
    count = torch.tensor(7)  # BatchNorm's num_batches_tracked: a 0-dim int64 buffer
    by_hand = hashlib.sha256(b"torch.int64|()|" + (7).to_bytes(8, "little")).hexdigest()
    assert roar_maps._tensor_digest(count) == by_hand
    net = TinyCNN(num_classes=3)
    before = roar_maps.model_digest(net)
    net.features[1].num_batches_tracked += 1
    assert roar_maps.model_digest(net) != before


@pytest.mark.parametrize("spoil", ["nan", "unreadable"])
def test_a_cached_file_with_nan_or_unreadable_is_recomputed(tmp_path, spoil):
    torch.manual_seed(0)
    model, dm = create_image_model("small_cnn", 3, 3), TinyImages()
    maps = roar_maps.dataset_maps(model, dm, "saliency", "test", tmp_path, chunk=10, progress=False)
    (path,) = tmp_path.glob("test-saliency-*.pt")
    if spoil == "nan":
        torch.save({"maps": torch.full_like(maps, float("nan")), "key": torch.load(path)["key"]}, path)
    else:
        path.write_bytes(b"not a torch file")
    again = roar_maps.dataset_maps(model, dm, "saliency", "test", tmp_path, chunk=10, progress=False)
    assert torch.equal(again, maps) and torch.equal(torch.load(path)["maps"], maps)


def test_the_cache_key_digests_options_and_refuses_what_it_cannot_hold():
    model, x = TinyCNN(num_classes=3), torch.zeros(2, 3, 8, 8)
    key = roar_maps.cache_key(model, x, "saliency", "test", 0, 10, {"w": torch.ones(2)})
    assert key == roar_maps.cache_key(model, x.clone(), "saliency", "test", 0, 10, {"w": torch.ones(2)})
    for other in [{"w": torch.ones(2) * 2}, {"w": torch.ones(3)}, {"w": torch.ones(2, dtype=torch.float64)}]:
        assert roar_maps.cache_key(model, x, "saliency", "test", 0, 10, other) != key
    assert roar_maps.cache_key(model, x, "saliency", "test", 1, 10, {"w": torch.ones(2)}) != key  # the seed
    with pytest.raises(InputError, match="estimator option value .* of type object"):
        roar_maps.cache_key(model, x, "saliency", "test", 0, 10, {"w": object()})
