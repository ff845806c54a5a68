"""Image explainers: every method against Captum called directly with the same target (the
sampling methods image by image, with each image's seed), chunking, targets, reduce_map, errors.
RISE against a naive per-mask loop: test_perturbations.py; GradCAM's layer and DeepLift and guided
backprop on the project's ResNets: test_gradients.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from captum import attr
from torch import nn

from evaluators.maps import EXPLAINERS, explain
from evaluators.maps.gradients import last_conv_block
from foundation.modality import reduce_map
from foundation.errors import InputError
from foundation.seeds import input_seeds
from lightning_modules.image_classifier import create_image_model

TOL = {"rtol": 1e-5, "atol": 1e-6}


LABELS = torch.tensor([0, 3, 1, 4])


def captum(model, x, method, target, background):
    zero = torch.zeros_like(x[:1])
    calls = {
        "saliency": lambda: attr.Saliency(model).attribute(x, target=target, abs=False),
        "integrated_gradients": lambda: attr.IntegratedGradients(model).attribute(x, zero, target=target, n_steps=50),
        "guided_backprop": lambda: attr.GuidedBackprop(model).attribute(x, target=target),
        "deeplift": lambda: attr.DeepLift(model).attribute(x, zero, target=target),
        "input_x_gradient": lambda: attr.InputXGradient(model).attribute(x, target=target),
        "occlusion": lambda: attr.Occlusion(model).attribute(x, sliding_window_shapes=(3, 8, 8), strides=(3, 4, 4),
                                                             target=target),
        "gradcam": lambda: attr.LayerAttribution.interpolate(
            attr.LayerGradCam(model, model.block).attribute(x, target=target, relu_attributions=True), (16, 16),
            "bilinear").expand(-1, 3, -1, -1),
    }  # fmt: skip
    return calls[method]()


DETERMINISTIC = ["saliency", "integrated_gradients", "guided_backprop", "deeplift", "input_x_gradient", "occlusion",
                 "gradcam"]  # fmt: skip


@pytest.mark.parametrize("method", DETERMINISTIC)
@pytest.mark.parametrize("labels", [False, True])
def test_deterministic_methods_match_captum(model, images, method, labels):
    target = LABELS if labels else model(images).argmax(-1)
    ours = explain(model, images, method, target=LABELS if labels else None)
    assert ours.shape == images.shape
    torch.testing.assert_close(ours, captum(model, images, method, target, None), **TOL)


@pytest.mark.parametrize("method", DETERMINISTIC)
def test_chunked_equals_unchunked(model, images, method):
    whole = explain(model, images, method, target=LABELS, max_batch=1000)
    torch.testing.assert_close(explain(model, images, method, target=LABELS, max_batch=3), whole, **TOL)


@pytest.mark.parametrize("method", ["integrated_gradients", "deeplift"])
def test_one_baseline_per_image_goes_chunk_by_chunk_with_its_image(model, images, method):
    torch.manual_seed(2)
    baselines = torch.randn_like(images)  # e.g. each image blurred
    cls = {"integrated_gradients": attr.IntegratedGradients, "deeplift": attr.DeepLift}[method]
    reference = cls(model).attribute(images, baselines, target=LABELS)
    ours = explain(model, images, method, target=LABELS, baselines=baselines, max_batch=4)  # 1 or 2 per chunk
    torch.testing.assert_close(ours, reference, **TOL)


def test_target_none_is_the_predicted_class(model, images):
    predicted = model(images).argmax(-1)
    assert not torch.equal(predicted, LABELS)
    torch.testing.assert_close(explain(model, images, "saliency"),
                               explain(model, images, "saliency", target=predicted))  # fmt: skip
    one = explain(model, images, "saliency", target=2)
    torch.testing.assert_close(one, explain(model, images, "saliency", target=torch.full((4,), 2)))


def per_image_captum(x, seeds, call):
    """Captum image by image, its global generators (torch's and NumPy's) seeded with the image's seed."""
    out = []
    for i, s in enumerate(seeds):
        torch.manual_seed(s)
        np.random.seed(s)
        out.append(call(x[i : i + 1], LABELS[i : i + 1]))
    return torch.cat(out)


@pytest.mark.parametrize("nt_type", ["smoothgrad", "smoothgrad_sq", "vargrad"])
@pytest.mark.parametrize("base", ["saliency", "integrated_gradients"])
def test_noise_tunnels_match_captum_image_by_image_with_its_seed(model, images, nt_type, base):
    base_options = {"n_steps": 8} if base == "integrated_gradients" else {}
    ours = explain(model, images, nt_type, target=LABELS, base=base, nt_samples=6, stdevs=0.2, seed=5,
                   max_batch=1000, **base_options)  # fmt: skip
    method = attr.Saliency(model) if base == "saliency" else attr.IntegratedGradients(model)
    if base == "saliency":
        base_options["abs"] = False
    seeds = input_seeds(5, None, 4)
    assert seeds == [int(np.random.SeedSequence([5, i]).generate_state(1)[0]) for i in range(4)]
    theirs = per_image_captum(images, seeds, lambda x, t: attr.NoiseTunnel(method).attribute(
        x, nt_type=nt_type, nt_samples=6, stdevs=0.2, target=t, **base_options))
    torch.testing.assert_close(ours, theirs, **TOL)


def test_noise_tunnel_in_chunks_equals_captum_image_by_image(model, images):
    # max_batch=4 with 6 samples: one image per chunk, its samples explained in calls of 4 and 2 rows
    ours = explain(model, images, "smoothgrad", target=LABELS, nt_samples=6, max_batch=4, seed=2)
    theirs = per_image_captum(images, input_seeds(2, None, 4), lambda x, t: attr.NoiseTunnel(attr.Saliency(model))
                              .attribute(x, nt_samples=6, stdevs=0.15, target=t, abs=False))  # fmt: skip
    torch.testing.assert_close(ours, theirs, **TOL)


def test_expected_gradients_match_captum_gradient_shap_image_by_image(model, images):
    torch.manual_seed(3)
    background = torch.randn(7, 3, 16, 16)
    ours = explain(model, images, "gradient_shap", target=LABELS, baselines=background, n_samples=5, seed=4)
    theirs = per_image_captum(images, input_seeds(4, None, 4), lambda x, t: attr.GradientShap(model).attribute(
        x, background, n_samples=5, stdevs=0.0, target=t))
    torch.testing.assert_close(ours, theirs, **TOL)
    noisy = explain(model, images, "gradient_shap", target=LABELS, baselines=background, n_samples=5, seed=4,
                    stdevs=0.3, max_batch=2)  # fmt: skip
    theirs = per_image_captum(images, input_seeds(4, None, 4), lambda x, t: attr.GradientShap(model).attribute(
        x, background, n_samples=5, stdevs=0.3, target=t))
    torch.testing.assert_close(noisy, theirs, **TOL)


def test_gradient_shap_needs_baselines(model, images):
    with pytest.raises(InputError, match="'gradient_shap' needs option baselines"):
        explain(model, images, "gradient_shap")


def test_unknown_method_and_bad_options_are_named(model, images):
    with pytest.raises(InputError, match="unknown explainer 'shap'"):
        explain(model, images, "shap")
    with pytest.raises(InputError, match="option base='lime'"):
        explain(model, images, "smoothgrad", base="lime")
    with pytest.raises(InputError, match="option target="):
        explain(model, images, "saliency", target=torch.tensor([0.5, 1.0, 0.0, 2.0]))
    with pytest.raises(InputError, match="option max_batch=0"):
        explain(model, images, "saliency", max_batch=0)


def test_explain_passes_at_most_the_default_rows_at_a_time(model):
    x = torch.randn(20, 3, 128, 128, generator=torch.Generator().manual_seed(0))  # 2^18 / 128^2 = 16 rows
    seen = []
    hook = model.register_forward_hook(lambda module, inputs, output: seen.append(len(inputs[0])))
    try:
        default = explain(model, x, "integrated_gradients", target=0, n_steps=5)
    finally:
        hook.remove()
    assert max(seen) == 15 and sum(seen) == 20 * 5  # 3 images x 5 steps a pass (16 // 5 = 3)
    torch.testing.assert_close(default, explain(model, x, "integrated_gradients", target=0, n_steps=5,
                                                max_batch=1000), **TOL)  # fmt: skip


def test_reduce_map_against_numpy():
    maps = torch.randn(2, 3, 5, 4)
    m = maps.numpy()
    np.testing.assert_allclose(reduce_map(maps, "sum").numpy(), m.sum(1), rtol=1e-6)
    np.testing.assert_allclose(reduce_map(maps, "abs_sum").numpy(), np.abs(m).sum(1), rtol=1e-6)
    np.testing.assert_allclose(reduce_map(maps, "max_abs").numpy(), np.abs(m).max(1), rtol=1e-6)
    with pytest.raises(InputError, match="option how='mean'"):
        reduce_map(maps, "mean")


def test_eval_mode_is_used_and_restored(images):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Dropout(0.9), nn.Flatten(), nn.Linear(4 * 14 * 14, 3)).train()
    first = explain(net, images, "saliency", target=0)
    assert net.training
    torch.testing.assert_close(explain(net, images, "saliency", target=0), first)  # no dropout noise


@pytest.mark.parametrize("method", sorted(EXPLAINERS.names(modality="images")))
def test_every_method_runs_on_small_cnn(method):
    torch.manual_seed(0)
    net = create_image_model("small_cnn", num_classes=3, in_channels=1)
    x = torch.randn(2, 1, 8, 8)
    opts = {"gradient_shap": {"baselines": torch.randn(3, 1, 8, 8), "n_samples": 4},
            "rise": {"n_masks": 16, "s": 2, "seed": 0}, "integrated_gradients": {"n_steps": 4}}.get(method, {})
    if method in ("smoothgrad", "smoothgrad_sq", "vargrad"):
        opts = {"nt_samples": 4}
    out = explain(net, x, method, **opts)
    assert out.shape == x.shape and torch.isfinite(out).all()


def test_an_image_classifier_module_is_explained_through_its_network():
    from lightning_modules.image_classifier import ImageClassifier

    module = ImageClassifier(arch="resnet8", num_classes=3, in_channels=1)
    assert last_conv_block(module) is module.net.layers
    x = torch.randn(2, 1, 16, 16)
    torch.testing.assert_close(explain(module, x, "gradcam"), explain(module.net, x, "gradcam"))
    assert module.training  # its mode is restored


@pytest.mark.parametrize("base", ["input_x_gradient", "guided_backprop", "deeplift"])
def test_noise_tunnel_over_other_bases_matches_captum(model, images, base):
    ours = explain(model, images, "smoothgrad_sq", target=LABELS, base=base, nt_samples=3, seed=6)
    method = {"input_x_gradient": attr.InputXGradient, "guided_backprop": attr.GuidedBackprop,
              "deeplift": attr.DeepLift}[base](model)  # fmt: skip
    theirs = per_image_captum(images, input_seeds(6, None, 4), lambda x, t: attr.NoiseTunnel(method).attribute(
        x, nt_type="smoothgrad_sq", nt_samples=3, stdevs=0.15, target=t))
    torch.testing.assert_close(ours, theirs, **TOL)
