"""Relative stability (Agarwal et al. 2022; evaluators.metrics.relative_stability) against a
direct float64 implementation of its formulas (one input, one sample at a time, with NumPy),
against Quantus 0.6.0's relative stabilities on the same noise, and hand-computed answers;
flips and inputs without samples; seeding; the Metric. (Split from test_fidelity_metrics.py,
whose helpers it shares.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from evaluators.metrics.perturbations import uniform_noise
from evaluators.metrics.relative_stability import (
    RelativeStability,
    elementwise_change,
    norm_change,
    relative_stability,
)
from tests.evaluators.metrics.test_fidelity_metrics import LinearScore, data, tiny_cnn
from tests.support.tiny_models import tiny_mlp


def saliency(model, x: torch.Tensor, target) -> torch.Tensor:
    """∂ f / ∂ x summed over channels (per pixel), f the target logit (tabular: the explained output)."""
    x = x.detach().clone().requires_grad_(True)
    if target is None:
        out = model.explained_output(x).sum()
    else:
        out = model(x).gather(1, target.view(-1, 1)).sum()
    grad = torch.autograd.grad(out, x)[0]
    return grad if x.dim() == 2 else grad.sum(1)


def reference_stability(model, x, maps, samples, target, p, eps, change, hidden, h_fn) -> dict[str, np.ndarray]:
    """Per input and sample, in numpy: skip a flipped prediction, the three ratios, the max."""
    def rel(a, b):
        a, b = a.ravel(), b.ravel()
        if change == "norm":
            return np.linalg.norm(a - b, p) / max(np.linalg.norm(a, p), eps)
        return np.linalg.norm((a - b) / np.where(a == 0, eps, a), p)

    out = {k: np.full(len(x), np.nan) for k in ("ris", "rrs", "ros")}
    for i in range(len(x)):
        xi = x[i : i + 1]
        t = None if target is None else torch.tensor([target[i]])
        e = maps[i].numpy()
        label = model(xi).argmax(-1).item()
        for xs in samples[i, :, None]:
            if model(xs).argmax(-1).item() != label:
                continue
            es = saliency(model, xs, t)[0].numpy()
            num = rel(e, es)
            ratios = {
                "ris": num / max(rel(xi.numpy(), xs.numpy()), eps),
                "rrs": num / max(rel(hidden(xi), hidden(xs)), eps),
                "ros": num / max(np.linalg.norm((h_fn(xi) - h_fn(xs)).ravel(), p), eps),
            }
            for k, v in ratios.items():
                out[k][i] = v if np.isnan(out[k][i]) else max(out[k][i], v)
    return out


@pytest.mark.parametrize("p, change, layer, ros_output, max_batch", [
    (2.0, "elementwise", None, "logit", 256), (1.0, "norm", "2", "probability", 4),
    (math.inf, "elementwise", "3", "logit", 1),
])  # fmt: skip
def test_relative_stability_images_equal_a_direct_loop(p, change, layer, ros_output, max_batch):
    model = tiny_cnn()
    x, _ = data((3, 2, 5, 6), 20)
    target = model(x).argmax(-1)
    maps = saliency(model, x, target)
    scores = relative_stability(model, x, maps, lambda v, t: saliency(model, v, t), n_samples=6, radius=0.3, p=p,
                                change=change, layer=layer, ros_output=ros_output, seed=5,
                                max_batch=max_batch)  # fmt: skip
    layers = dict(model.named_modules())

    def hidden(v):  # the named module's input, by running the layers before it
        if layer is None:
            return model(v).detach().numpy()
        return nn.Sequential(*list(model)[: list(layers).index(layer) - 1])(v).detach().numpy()

    def h_fn(v):
        logits = model(v)
        return (logits.softmax(-1) if ros_output == "probability" else logits).detach().numpy()

    samples = uniform_noise(x, 6, 0.3, seed=5)  # the documented draws (checked in the perturbations' tests)
    expected = reference_stability(model, x, maps, samples, target.tolist(), p, 1e-6, change, hidden, h_fn)
    for k in ("ris", "rrs", "ros"):
        np.testing.assert_allclose(scores[k].numpy(), expected[k], rtol=1e-9)
    assert scores["kept"].min() >= 1


def test_relative_stability_skips_flips_and_leaves_inputs_without_samples_unscored():
    model = LinearScore(torch.ones(3, 3, dtype=torch.float64))  # predicts 1 where Σ x > 0, else 0
    x = torch.tensor([0.1, 0.2, -0.1], dtype=torch.float64).view(3, 1, 1, 1).expand(3, 1, 3, 3).clone()
    maps = torch.rand(3, 3, 3, generator=torch.Generator().manual_seed(21), dtype=torch.float64) + 0.1
    shifts = torch.tensor([0.05, -0.2, 0.15], dtype=torch.float64).view(3, 1, 1, 1, 1)
    perturbed = (x[None] + shifts).transpose(0, 1)  # sample 1 flips inputs 0 and 1 (Σ x' <= 0), 2 flips input 2
    calls = []

    def explain_fn(v, t):  # e' = 1.5 e
        calls.append(t.tolist())
        return 1.5 * maps[: len(v) // 3].repeat_interleave(3, 0)

    scores = relative_stability(model, x, maps, explain_fn, perturbed=perturbed)
    assert scores["kept"].tolist() == [2, 2, 2]
    assert calls == [[1, 1, 1, 1, 1, 1, 0, 0, 0]]  # each input's predicted class, its 3 samples, one call
    # by hand: ‖(e − e')/e‖_2 = 0.5 √9 = 1.5; ‖(x − x')/x‖_2 = 3 |shift| / |x|; the max over kept samples
    kept_shifts = {0.1: (0.05, 0.15), 0.2: (0.05, 0.15), -0.1: (0.05, 0.2)}
    ris = [max(1.5 / (3 * s / abs(v)) for s in kept) for v, kept in kept_shifts.items()]
    np.testing.assert_allclose(scores["ris"].numpy(), ris, rtol=1e-12)
    flipped = perturbed[:2, 1:2]
    all_flipped = relative_stability(model, x[:2], maps[:2], lambda v, t: 1.5 * maps[:2], perturbed=flipped)
    assert all_flipped["kept"].tolist() == [0, 0] and all_flipped["ris"].isnan().all()
    metric = RelativeStability()
    metric.update(model, x[:2], maps[:2], explain_fn=lambda v, t: 1.5 * maps[:2].repeat_interleave(len(v) // 2, 0))
    assert metric.left_out.item() == 0 and metric.count.item() == 2


def test_relative_changes_and_the_eps_min_floor_by_hand():
    a, a_new = torch.tensor([[0.0, 2.0]], dtype=torch.float64), torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    # a zero value is replaced by eps_min: (0 − 1) / 1e-6 and (2 − 1) / 2
    assert elementwise_change(a, a_new, 2.0, 1e-6).item() == pytest.approx(math.hypot(1e6, 0.5), rel=1e-15)
    assert elementwise_change(a, a_new, 1.0, 1e-3).item() == pytest.approx(1e3 + 0.5, rel=1e-15)
    assert norm_change(a, a_new, 2.0, 1e-6).item() == pytest.approx(math.sqrt(2) / 2, rel=1e-15)
    assert norm_change(a * 0, a_new, 2.0, 1e-6).item() == pytest.approx(math.sqrt(2) / 1e-6, rel=1e-15)
    # x' = x: the input changes by 0, so RIS divides by eps_min
    model = LinearScore(torch.ones(2, 2, dtype=torch.float64))
    x = torch.ones(1, 1, 2, 2, dtype=torch.float64)
    maps = torch.ones(1, 2, 2, dtype=torch.float64)
    scores = relative_stability(model, x, maps, lambda v, t: 3 * maps, perturbed=x[None], eps_min=1e-4)
    assert scores["ris"].item() == pytest.approx(4.0 / 1e-4, rel=1e-12)  # ‖(1 − 3) / 1‖_2 over 4 pixels = 4


def test_relative_stability_tabular_rows():
    model = tiny_mlp()
    x, _ = data((4, 6), 22)
    maps = saliency(model, x, None)
    seen = []

    def explain_fn(v, t):
        seen.append(t)
        return saliency(model, v, None)

    scores = relative_stability(model, x, maps, explain_fn, n_samples=5, radius=0.2, seed=1)
    samples = uniform_noise(x, 5, 0.2, seed=1)
    expected = reference_stability(model, x, maps, samples, None, 2.0, 1e-6, "elementwise",
                                   lambda v: model(v).detach().numpy(),
                                   lambda v: model(v).detach().numpy())  # fmt: skip
    for k in ("ris", "rrs", "ros"):
        np.testing.assert_allclose(scores[k].numpy(), expected[k], rtol=1e-9)
    assert seen and all(torch.equal(t, torch.ones(len(t), dtype=torch.long)) for t in seen)  # the positive class


def test_relative_stability_is_seeded_and_the_metric_is_the_mean():
    model = tiny_cnn()
    x, _ = data((5, 2, 5, 6), 23)
    maps = saliency(model, x, model(x).argmax(-1))

    def explain_fn(v, t):
        return saliency(model, v, t)

    options = {"n_samples": 4, "radius": 0.2, "seed": 7}
    a = relative_stability(model, x, maps, explain_fn, max_batch=256, **options)
    b = relative_stability(model, x, maps, explain_fn, max_batch=3, **options)
    for k in ("ris", "rrs", "ros"):
        np.testing.assert_allclose(a[k].numpy(), b[k].numpy(), rtol=1e-12)
    metric = RelativeStability(**options)
    metric.update(model, x[:2], maps[:2], explain_fn=explain_fn)
    metric.update(model, x[2:], maps[2:], explain_fn=explain_fn)
    parts = [relative_stability(model, x[s], maps[s], explain_fn, **options) for s in (slice(0, 2), slice(2, 5))]
    result = metric.compute()
    for k in ("ris", "rrs", "ros"):
        assert result[k].item() == pytest.approx(torch.cat([part[k] for part in parts]).mean().item(), rel=1e-12)
    assert metric.left_out.item() == 0 and not list(metric.parameters())


def test_quantus_relative_stabilities_equal_ours_on_the_same_noise():
    """Quantus 0.6.0's RelativeInput/Output/RepresentationStability with symmetric uniform
    noise (lower_bound=r, upper_bound=None: its default is U[0.02, 0.2]), replayed from
    numpy's generator and passed as ``perturbed``; no prediction flips (its max over
    samples turns one flip into NaN). Its RRS reads a layer's output: layer "1" (the
    Softplus), whose output is the input of our layer "2" (Flatten). float32."""
    quantus = pytest.importorskip("quantus", reason="quantus is not installed (pip install quantus==0.6.0)")
    model = tiny_cnn(channels=1, classes=3, h=8, w=8).float()
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(24))
    target = model(x).argmax(-1)
    maps = saliency(model, x, target)

    def explain(model, inputs, targets, **kwargs):
        return saliency(model, torch.as_tensor(inputs), torch.as_tensor(targets))[:, None].numpy()

    n, r = 10, 0.05
    theirs = {}
    for name, cls, extra in (("ris", quantus.RelativeInputStability, {}),
                             ("ros", quantus.RelativeOutputStability, {}),
                             ("rrs", quantus.RelativeRepresentationStability, {"layer_names": ["1"]})):  # fmt: skip
        np.random.seed(1)
        metric = cls(nr_samples=n, perturb_func_kwargs={"lower_bound": r, "upper_bound": None}, disable_warnings=True,
                     **extra)  # fmt: skip
        theirs[name] = np.asarray(metric(model=model, x_batch=x.numpy(), y_batch=target.numpy(),
                                         a_batch=maps[:, None].numpy(), explain_func=explain, channel_first=True,
                                         device="cpu"))  # fmt: skip
    np.random.seed(1)
    noise = np.stack([np.random.uniform(-r, r, size=(4, 64)) for _ in range(n)]).reshape(n, 4, 1, 8, 8)
    perturbed = (x[None].double() + torch.from_numpy(noise)).float().transpose(0, 1)
    ours = relative_stability(model, x, maps, lambda v, t: saliency(model, v, t), perturbed=perturbed, layer="2")
    assert ours["kept"].tolist() == [n] * 4
    np.testing.assert_allclose(ours["ris"].numpy(), theirs["ris"], rtol=1e-5)
    np.testing.assert_allclose(ours["rrs"].numpy(), theirs["rrs"], rtol=1e-5)
    np.testing.assert_allclose(ours["ros"].numpy(), theirs["ros"], rtol=1e-3)  # float32 logit differences
