"""Decker et al.'s perturbations (evaluators/metrics/perturbations.py): uniform noise in the ball
(Kolmogorov-Smirnov against scipy's uniform), independent fitting and evaluation streams, scipy's
Gaussian filter with mirror padding, scikit-image's SLIC on the min-max scaled image, and subset
choices removing a uniform share of each input's groups."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import ndimage, stats
from skimage.segmentation import slic

from evaluators.metrics.perturbations import (gaussian_blur, sample_generator, subset_choices,
                                              superpixels, uniform_noise, unit_masks)  # fmt: skip
from tests.evaluators.metrics.test_infidelity import images


def test_uniform_noise_is_uniform_in_the_ball_and_seeded_per_input():
    x = images(3)
    noisy = uniform_noise(x, 40, radius=0.1, seed=5)
    noise = (noisy - x[:, None]).flatten()
    assert noisy.shape == (3, 40, 3, 12, 12) and noise.abs().max() <= 0.1
    assert stats.kstest(noise.numpy(), stats.uniform(loc=-0.1, scale=0.2).cdf).pvalue > 1e-3
    # an input's noise depends on (seed, stream, index) only: not on the batch, chunking or dtype path
    torch.testing.assert_close(uniform_noise(x[2:], 40, 0.1, seed=5, offset=2)[0], noisy[2], rtol=0, atol=0)
    assert not torch.equal(uniform_noise(x, 40, 0.1, seed=5, stream="fitting"), noisy)
    assert not torch.equal(uniform_noise(x, 40, 0.1, seed=6), noisy)
    torch.testing.assert_close(uniform_noise(x, 40, 0.1, seed=5), noisy, rtol=0, atol=0)


def test_fitting_and_evaluation_streams_are_independent_generators():
    draws = {stream: torch.rand(1000, generator=sample_generator(0, stream, "noise", 0))
             for stream in ("evaluation", "fitting")}  # fmt: skip
    assert abs(np.corrcoef(draws["evaluation"], draws["fitting"])[0, 1]) < 0.1
    assert not torch.equal(torch.rand(5, generator=sample_generator(0, "fitting", "noise", 0)),
                           torch.rand(5, generator=sample_generator(0, "fitting", "subsets", 0)))  # fmt: skip


@pytest.mark.parametrize("sigma", [1.0, 10.0])
def test_gaussian_blur_is_scipys_filter_with_mirror_padding(sigma):
    x = images(2, size=32)
    radius = min(int(4 * sigma + 0.5), 31)
    ours = gaussian_blur(x, sigma).numpy()
    for image, blurred in zip(x.numpy(), ours):
        for channel, out in zip(image, blurred):
            reference = ndimage.gaussian_filter(channel, sigma, mode="mirror", radius=radius)
            np.testing.assert_allclose(out, reference, rtol=0, atol=1e-12)


def test_superpixels_are_slic_on_the_min_max_scaled_image():
    x = images(2, size=16)
    x[1] = 0.1 * x[1] + 3.0 * (torch.arange(16) < 8).view(16, 1)  # top and bottom halves of very different colour
    labels = superpixels(x, n_segments=8, compactness=10.0)
    for image, ours in zip(x.numpy(), labels.numpy()):
        scaled = (image - image.min()) / (image.max() - image.min())
        reference = slic(scaled.transpose(1, 2, 0), n_segments=8, compactness=10.0, sigma=1, start_label=0)
        assert np.array_equal(ours, reference)  # same partition, labels 0 … K − 1
        assert set(np.unique(ours)) == set(range(ours.max() + 1))
    assert not np.intersect1d(labels[1, :6].unique().numpy(), labels[1, 10:].unique().numpy()).size
    gray = superpixels(images(1, channels=1, size=16), n_segments=4)
    assert gray.shape == (1, 16, 16) and gray.max() >= 1


def test_subset_choices_remove_a_uniform_share_of_each_inputs_groups():
    groups = torch.stack([torch.arange(10).repeat_interleave(3), torch.arange(30) % 5])  # K = 10 and K = 5
    chosen = subset_choices(groups, 2000, share=0.2, seed=3)
    assert chosen.shape == (2, 2000, 10)
    assert (chosen[0].sum(1) == 2).all() and (chosen[1].sum(1) == 1).all() and not chosen[1, :, 5:].any()
    for frequencies, k in ((chosen[0].double().mean(0), 10), (chosen[1, :, :5].double().mean(0), 5)):
        expected = int(0.2 * k) / k
        assert (frequencies - expected).abs().max() < 4 * (expected * (1 - expected) / 2000) ** 0.5
    assert (subset_choices(groups, 4, share=0.01).sum(-1) == 1).all()  # at least one group
    masks = unit_masks(groups[:1].expand(3, -1), chosen[0, :3])
    assert torch.equal(masks, chosen[0, :3].gather(1, groups[:1].expand(3, -1)))
