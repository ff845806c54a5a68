"""The perturbation explainers (evaluators/maps/perturbations.py): RISE against a naive float64
loop over masks redrawn in the documented order, whatever the chunking, and its masks (binary
grids, upsampled and shifted). Occlusion against Captum: test_image_explainers.py; the table
methods (feature ablation, LIME, KernelSHAP, Shapley value sampling): test_explainers.py and
test_explainer_seeds.py."""

from __future__ import annotations

import copy

import torch

from evaluators.maps import explain
from evaluators.maps.perturbations import rise_masks, upsample_masks
from tests.evaluators.maps.test_image_explainers import LABELS, TOL


def naive_rise(model, x, target, n_masks, s, p, seed):
    """Per image, per mask, in float64: the masks redrawn in the documented order."""
    g = torch.Generator().manual_seed(seed)
    h, w = x.shape[2:]
    cell_h, cell_w = -(-h // s), -(-w // s)
    grids = (torch.rand(n_masks, s, s, generator=g) < p).double()
    dy = torch.randint(0, cell_h, (n_masks,), generator=g)
    dx = torch.randint(0, cell_w, (n_masks,), generator=g)
    model64 = copy.deepcopy(model).double()
    out = torch.zeros(len(x), h, w, dtype=torch.float64)
    for i in range(n_masks):
        up = torch.nn.functional.interpolate(grids[i][None, None], size=((s + 1) * cell_h, (s + 1) * cell_w),
                                             mode="bilinear", align_corners=False)[0, 0]  # fmt: skip
        mask = up[dy[i] : dy[i] + h, dx[i] : dx[i] + w]
        for n in range(len(x)):
            prob = model64((x[n].double() * mask)[None]).softmax(-1)[0, target[n]]
            out[n] += prob * mask
    return out / (n_masks * p)


def test_rise_equals_a_naive_loop_over_masks(model, images):
    ours = explain(model, images, "rise", target=LABELS, n_masks=40, s=4, p=0.5, seed=7, max_batch=24)
    assert ours.shape == images.shape and torch.equal(ours[:, 0], ours[:, 2])
    naive = naive_rise(model, images, LABELS, 40, 4, 0.5, 7)
    torch.testing.assert_close(ours[:, 0].double(), naive, rtol=1e-5, atol=1e-6)
    for max_batch in (1, 7, 1000):  # chunking over images and masks changes nothing
        other = explain(model, images, "rise", target=LABELS, n_masks=40, s=4, p=0.5, seed=7,
                        max_batch=max_batch)  # fmt: skip
        torch.testing.assert_close(other, ours, **TOL)


def test_rise_masks_are_binary_grids_upsampled_and_shifted():
    grids, shifts = rise_masks(50, 3, 0.3, 10, 10, torch.Generator().manual_seed(0))
    assert set(grids.unique().tolist()) <= {0.0, 1.0} and shifts.max() < 4 and shifts.min() >= 0
    masks = upsample_masks(grids, shifts, 10, 10)
    assert masks.shape == (50, 1, 10, 10) and masks.min() >= 0 and masks.max() <= 1
    torch.manual_seed(0)
    a, b = rise_masks(5, 3, 0.3, 10, 10), rise_masks(5, 3, 0.3, 10, 10)  # the global generator moves on
    assert not torch.equal(a[0], b[0]) or not torch.equal(a[1], b[1])
