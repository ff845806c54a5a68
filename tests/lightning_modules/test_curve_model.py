"""lightning_modules/curve_model.py: the coefficients of w(t), end points kept exactly, w(t) against a
plain network loaded with the hand-mixed weights, BatchNorm recomputed per t, and a trained curve
beating the straight line on two moons."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
import torchvision
from torch import nn
from torch.nn import functional as F

from datamodules import TwoMoonsDataModule
from lightning_modules import MLPClassifier
from lightning_modules.curve_model import CurveModel, curve_coefficients


def test_coefficients_by_hand():
    torch.testing.assert_close(curve_coefficients("bezier", 0.25), torch.tensor([0.5625, 0.375, 0.0625]))
    torch.testing.assert_close(curve_coefficients("polychain", 0.25), torch.tensor([0.5, 0.5, 0.0]))
    torch.testing.assert_close(curve_coefficients("polychain", 0.75), torch.tensor([0.0, 0.5, 0.5]))
    torch.testing.assert_close(curve_coefficients("line", 0.25), torch.tensor([0.75, 0.0, 0.25]))
    for kind in ("bezier", "polychain", "line"):
        ts = torch.linspace(0, 1, 11)
        torch.testing.assert_close(curve_coefficients(kind, ts).sum(-1), torch.ones(11))


@pytest.mark.parametrize("kind", ["bezier", "polychain", "line"])
def test_fixed_curve_reproduces_end_points_exactly(kind):
    a, b = MLPClassifier(in_features=5, seed=1), MLPClassifier(in_features=5, seed=2)
    curve = CurveModel(a.net, b.net, kind=kind, mode="fixed")
    x = torch.randn(16, 5)
    for t, model in ((0.0, a), (1.0, b)):
        curve.set_t(t)
        assert torch.equal(curve(x), model(x))
    assert all(not p.requires_grad for n, p in curve.named_parameters() if n.endswith(("_0", "_2")))


def test_curve_at_any_t_equals_plain_model_built_from_w_t():
    a, b = MLPClassifier(in_features=5, seed=1), MLPClassifier(in_features=5, seed=2)
    curve = CurveModel(a.net, b.net, kind="bezier", mode="trained")
    with torch.no_grad():
        for p in curve.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(16, 5)
    for t in (0.0, 0.3, 0.5, 0.9):
        curve.set_t(t)
        c = curve_coefficients("bezier", t)
        plain = MLPClassifier(in_features=5)
        expected = {}
        for name in curve.point_state(0):
            expected[name] = sum(c[k] * curve.point_state(k)[name] for k in range(3))
        plain.net.load_state_dict(expected)
        torch.testing.assert_close(curve(x), plain(x), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(curve.model_at(t, a.net)(x), plain(x), rtol=1e-5, atol=1e-6)


def test_resnet_converts_without_rewriting_and_batchnorm_is_recomputed_per_t():
    torch.manual_seed(0)
    a = torchvision.models.resnet18(num_classes=3)
    b = torchvision.models.resnet18(num_classes=3)
    curve = CurveModel(a, b, mode="fixed")
    x = torch.randn(8, 3, 32, 32)
    loader = [(x, torch.zeros(8, dtype=torch.long))]
    curve.update_bn(loader, t=0.0)
    a.train()
    for m in a.modules():  # reference: a's own statistics from one cumulative pass
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None
    with torch.no_grad():
        a(x)
    a.eval()
    curve.eval()
    curve.set_t(0.0)
    torch.testing.assert_close(curve(x), a(x), rtol=1e-4, atol=1e-4)
    curve.update_bn(loader, t=0.5)
    mean_half = curve.net.bn1.running_mean.clone()
    curve.update_bn(loader, t=0.0)
    assert not torch.allclose(mean_half, curve.net.bn1.running_mean)


def test_trained_curve_midpoint_beats_straight_line_on_two_moons():
    pl.seed_everything(0)
    data = TwoMoonsDataModule(n_samples=1000, noise=0.1, batch_size=64)
    ends = []
    for seed in (0, 1):
        model = MLPClassifier(in_features=2, seed=seed, lr=1e-2)
        pl.Trainer(max_epochs=30, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False).fit(model, datamodule=data)  # fmt: skip
        ends.append(model)
    curve = CurveModel(ends[0].net, ends[1].net, kind="bezier", mode="fixed", lr=1e-2)
    pl.Trainer(max_epochs=30, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False).fit(curve, datamodule=data)  # fmt: skip
    x, y = data.train_tensors
    with torch.no_grad():
        curve.set_t(0.5)
        curve_loss = F.cross_entropy(curve(x), y).item()
        line = MLPClassifier(in_features=2)
        line.net.load_state_dict(
            {k: (v + ends[1].net.state_dict()[k]) / 2 for k, v in ends[0].net.state_dict().items()}
        )
        line_loss = F.cross_entropy(line(x), y).item()
        end_loss = max(F.cross_entropy(m(x), y).item() for m in ends)
    assert curve_loss < line_loss
    assert curve_loss < end_loss + 0.05
