"""``evaluators.inputs.runs.cached``: kept results carry their explainers' definitions; a file of
an earlier definition of a stochastic method (before issue 42: none written) is computed again
with a warning naming it, one of a deterministic method is read."""

from __future__ import annotations

import warnings

import pytest
import torch

from evaluators.inputs.runs import cached


def never() -> dict:
    raise AssertionError("computed, where the kept file should have been read")


def test_an_old_smoothgrad_file_is_computed_again_a_saliency_one_read(tmp_path):
    old = {"maps": torch.ones(2, 3)}  # a cache file as written before definitions were
    for name in ("smoothgrad.pt", "saliency.pt"):
        torch.save(old, tmp_path / name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(cached(tmp_path / "saliency.pt", never, ["saliency"])["maps"], old["maps"])
    why = "computing again what it keeps of smoothgrad: made under definition 1 of the method, today's is 2"
    with pytest.warns(UserWarning, match=f"{tmp_path / 'smoothgrad.pt'}: {why}"):
        got = cached(tmp_path / "smoothgrad.pt", lambda: {"maps": torch.zeros(2, 3)}, ["smoothgrad"])
    assert got.keys() == {"maps"} and torch.equal(got["maps"], torch.zeros(2, 3))
    saved = torch.load(tmp_path / "smoothgrad.pt", weights_only=True)
    assert saved["definitions"] == {"smoothgrad": 2} and torch.equal(saved["maps"], torch.zeros(2, 3))
    with warnings.catch_warnings():  # now of today's definition: read, without the definitions key
        warnings.simplefilter("error")
        again = cached(tmp_path / "smoothgrad.pt", never, ["smoothgrad"])
    assert again.keys() == {"maps"} and torch.equal(again["maps"], torch.zeros(2, 3))


def test_without_methods_a_file_is_read_as_it_was(tmp_path):
    torch.save({"maps": torch.ones(1)}, tmp_path / "f.pt")
    assert cached(tmp_path / "f.pt", never) == {"maps": torch.ones(1)}
