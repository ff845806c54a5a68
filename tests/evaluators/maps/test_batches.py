"""How the explainers split inputs into passes and draw samples (evaluators/maps/batches.py):
chunks by hand, per-input baselines going with their inputs, the one-pass gradient against
Captum's ``Saliency(abs=False)``, the noise as Captum's NoiseTunnel draws it, and ``sampled``'s
SmoothGrad, SmoothGrad² and VarGrad against a float64 loop over each input's own draws, whatever
``max_batch``."""

from __future__ import annotations

import math

import pytest
import torch
from captum import attr
from torch import nn

from evaluators.maps.batches import (activation_floats, check_sampling, chunked, chunks, gradient, inputs_per_chunk,
                                     normal, per_input_chunk, per_input_options, sampled)  # fmt: skip
from foundation.errors import InputError


def test_chunks_and_inputs_per_chunk():
    assert [(s.start, s.stop) for s in chunks(7, 3)] == [(0, 3), (3, 6), (6, 7)] and list(chunks(0, 3)) == []
    assert inputs_per_chunk(100, 30) == 3 and inputs_per_chunk(10, 30) == 1 and inputs_per_chunk(10, 0) == 10
    assert activation_floats(torch.device("cpu")) == 2**22 and activation_floats(torch.device("cpu"), True) == 2**25
    assert activation_floats(torch.device("meta")) == 2**28


def test_per_input_baselines_go_with_their_inputs():
    x, target = torch.arange(5.0)[:, None], torch.arange(5)
    baselines = 10 * torch.arange(5.0)[:, None]
    whole, per_input = per_input_options({"baselines": baselines, "n_steps": 3}, x)
    assert whole == {"n_steps": 3} and torch.equal(per_input["baselines"], baselines)
    assert per_input_options({"baselines": baselines[:1]}, x)[1] == {}  # one shared reference goes whole
    calls = []

    def run(xs, ts, baselines, n_steps):
        calls.append(len(xs))
        return xs + baselines + n_steps

    out = chunked(run, x, target, 2, {"baselines": baselines, "n_steps": 3})
    assert calls == [2, 2, 1] and torch.equal(out, x + baselines + 3)
    assert torch.equal(per_input_chunk(lambda xs, ts: ts[:, None] * 2.0, x, target, 4), target[:, None] * 2.0)


def test_the_gradient_is_captums_saliency():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3)).double()
    x, target = torch.randn(6, 4, dtype=torch.float64), torch.tensor([0, 1, 2, 2, 1, 0])
    torch.testing.assert_close(gradient(model, x, target), attr.Saliency(model).attribute(x, target=target, abs=False))


def test_noise_is_drawn_as_captum_draws_it_and_options_checked():
    generator = torch.Generator().manual_seed(5)
    expected = torch.normal(0, torch.tensor(0.3).repeat((4, 2)), generator=generator)
    assert torch.equal(normal((4, 2), 0.3, 5, torch.device("cpu")), expected)
    assert check_sampling("nt_samples", 3, 0) == 0.0
    for samples, stdevs, message in ((0, 1.0, "option nt_samples=0"), (True, 1.0, "option nt_samples=True"),
                                     (2, -1.0, "option stdevs=-1.0"), (2, math.inf, "option stdevs=inf"),
                                     (2, math.nan, "option stdevs=nan")):  # fmt: skip
        with pytest.raises(InputError, match=message):
            check_sampling("nt_samples", samples, stdevs)


@pytest.mark.parametrize("nt_type", ["smoothgrad", "smoothgrad_sq", "vargrad"])
@pytest.mark.parametrize("max_batch", [1, 5, 100])
def test_sampled_is_each_inputs_own_draws_reduced(nt_type, max_batch):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    x, target, seeds, n = torch.randn(4, 3, dtype=torch.float64), torch.tensor([0, 1, 1, 0]), [7, 8, 7, 9], 3

    def draw(seed):
        return (normal((n, 3), 0.5, seed, torch.device("cpu")).double(),)

    got = sampled(x, target, max_batch, seeds, n, draw, lambda rows, t: gradient(model, rows, t), nt_type, {})
    for i in range(4):
        noises = draw(seeds[i])[0]
        grads = torch.stack([gradient(model, (x[i] + noise)[None], target[i : i + 1])[0] for noise in noises])
        mean, mean_sq = grads.mean(0), grads.pow(2).mean(0)
        expected = {"smoothgrad": mean, "smoothgrad_sq": mean_sq, "vargrad": mean_sq - mean**2}[nt_type]
        torch.testing.assert_close(got[i], expected)
