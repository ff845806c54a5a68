"""foundation.modality: each modality's behaviour against hand computations, the declarations
of datamodules, models and populations, and a toy third modality (sequences (N, L, E)) that
plugs in where the registries, metrics and aggregators ask."""

from __future__ import annotations

import math
import pickle

import pytest
import torch
from torch import nn

from foundation.errors import InputError
from foundation.modality import IMAGES, MODALITIES, ROWS, Modality, modality_of, register
from foundation.registry import Registry


def test_inputs_are_recognised_by_their_dims_and_by_names_and_kinds():
    assert modality_of(torch.zeros(4, 3)) is ROWS and modality_of(torch.zeros(4, 3, 5, 6)) is IMAGES
    assert modality_of("rows") is ROWS and modality_of("tabular") is ROWS
    assert modality_of("images") is IMAGES and modality_of("image") is IMAGES and modality_of(IMAGES) is IMAGES
    with pytest.raises(InputError, match=r"inputs of shape \(4, 3, 5\); expected rows \(N, d\) or images"):
        modality_of(torch.zeros(4, 3, 5))
    with pytest.raises(InputError, match="modality 'sounds'"):
        modality_of("sounds")
    with pytest.raises(InputError, match="object declares no modality"):
        modality_of(object())


def test_declared_and_older_attributes_are_read():
    class Declared:
        modality = IMAGES

    class Old:  # a class of an older file: INPUTS, or a datamodule's kind
        INPUTS = "rows"

    class OldData:
        kind = "image"

    class Curve:  # a kind that is not a data kind is no declaration
        kind = "bezier"

    assert modality_of(Declared) is IMAGES and modality_of(Declared()) is IMAGES
    assert modality_of(Old()) is ROWS and modality_of(OldData) is IMAGES
    with pytest.raises(InputError, match="declares no modality"):
        modality_of(Curve())


def test_the_project_declares_its_datamodules_models_and_populations():
    from datamodules.images import FashionMNISTDataModule
    from datamodules.tabular import TwoMoonsDataModule
    from lightning_modules.image_population import ImagePopulation
    from lightning_modules.module_population import ModulePopulation
    from lightning_modules.population import PopulationMLP
    from lightning_modules.population_io import IMAGE_KINDS

    assert modality_of(TwoMoonsDataModule) is ROWS and TwoMoonsDataModule.inputs == "rows"
    assert modality_of(FashionMNISTDataModule) is IMAGES and FashionMNISTDataModule.inputs == "images"
    assert modality_of(PopulationMLP) is ROWS and modality_of(ImagePopulation) is IMAGES
    net = {"class_path": "torch.nn.Linear", "init_args": {"in_features": 3, "out_features": 2}}
    rows = ModulePopulation(net, size=2, num_classes=2, inputs="rows")
    assert modality_of(rows) is ROWS and rows.explained_class is not None
    assert modality_of(ModulePopulation(net, size=2, inputs="images")) is IMAGES
    assert IMAGE_KINDS == ("ImagePopulation", "ModulePopulation")


def test_reduce_against_hand_sums_over_channels():
    maps = torch.randn(2, 3, 4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for how, per_pixel in (("sum", lambda v: sum(v)), ("abs_sum", lambda v: sum(abs(a) for a in v)),
                           ("max_abs", lambda v: max(abs(a) for a in v))):  # fmt: skip
        expected = torch.tensor([[[per_pixel([maps[n, c, h, w].item() for c in range(3)]) for w in range(5)]
                                  for h in range(4)] for n in range(2)], dtype=torch.float64)  # fmt: skip
        torch.testing.assert_close(IMAGES.reduce(maps, how), expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(IMAGES.reduce(maps), IMAGES.reduce(maps, "abs_sum"), rtol=0, atol=0)  # the default
    rows = torch.randn(3, 7)
    assert ROWS.reduce(rows, "abs_sum") is rows  # a row's map is scored as it is
    with pytest.raises(InputError, match="option how='mean'"):
        IMAGES.reduce(maps, "mean")
    with pytest.raises(InputError, match=r"maps of shape \(3, 7\); expected \(N, C, H, W\)"):
        IMAGES.reduce(rows)


def test_statistics_against_float64_hand_computation():
    g = torch.Generator().manual_seed(1)
    rows, images = torch.randn(6, 3, dtype=torch.float64, generator=g), torch.rand(4, 2, 3, 3, generator=g).double()

    def mean_std(values):
        mean = sum(values) / len(values)
        return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))

    mean, std = ROWS.statistics(rows)
    for j in range(3):
        m, s = mean_std(rows[:, j].tolist())
        assert mean[j].item() == pytest.approx(m, abs=1e-12) and std[j].item() == pytest.approx(s, abs=1e-12)
    mean, std = IMAGES.statistics(images)
    for c in range(2):
        m, s = mean_std(images[:, c].flatten().tolist())
        assert mean[c].item() == pytest.approx(m, abs=1e-12) and std[c].item() == pytest.approx(s, abs=1e-12)
    assert ROWS.stat_unit == "feature" and IMAGES.stat_unit == "channel"
    assert IMAGES.own_statistics and not ROWS.own_statistics  # the normal baseline: each image's own statistics


def test_shapes_steps_masks_and_defaults():
    x, rows = torch.zeros(2, 3, 28, 28), torch.zeros(2, 20)
    assert (IMAGES.map_dims, ROWS.map_dims) == (2, 1)
    assert IMAGES.unit_shape(x) == (28, 28) and IMAGES.scored_shape(x) == (2, 28, 28)
    assert ROWS.unit_shape(rows) == (20,) and ROWS.scored_shape(rows) == (2, 20)
    assert IMAGES.default_steps(28 * 28) == math.ceil(784 / 50) == 16 and ROWS.default_steps(20) == 20
    mask = torch.zeros(2, 28, 28, dtype=torch.bool)
    mask[0, 3, 4] = True
    moved = torch.where(IMAGES.unit_mask(mask), torch.ones_like(x), x)
    assert moved[0, :, 3, 4].tolist() == [1.0, 1.0, 1.0] and moved.sum() == 3  # every channel of the pixel
    assert ROWS.unit_mask(mask[:, 0]) is not None and ROWS.unit_mask(mask[:, 0]).shape == (2, 28)
    assert (ROWS.figure, IMAGES.figure) == (None, "heatmap") and ROWS.fixed_class and not IMAGES.fixed_class
    assert ROWS.whole_splits and not IMAGES.whole_splits and IMAGES.spatial and not ROWS.spatial
    assert set(IMAGES.default_explainers) == {"saliency", "smoothgrad", "integrated_gradients", "gradcam"}


def test_a_modality_is_one_object_also_after_pickling():
    assert pickle.loads(pickle.dumps(IMAGES)) is IMAGES and pickle.loads(pickle.dumps([ROWS]))[0] is ROWS
    with pytest.raises(ValueError, match="clashes"):
        register(Modality(**{**ROWS.__dict__, "kind": "other"}))


def test_applicable_names_come_from_the_registry_trait():
    registry = Registry("thing")
    registry.add("any", object())
    registry.add("pixels_only", object(), modalities=("images",))
    assert ROWS.applicable(registry) == ["any"] and IMAGES.applicable(registry) == ["any", "pixels_only"]


# --- a toy third modality ------------------------------------------------------------------------
@pytest.fixture
def sequences():
    """Sequences (N, L, E): one value per position, reduced over the embedding E."""
    modality = register(Modality(
        name="sequences", kind="sequence", noun="sequences", shape="(N, L, E)", input_dims=3, reduced_dim=2,
        unit="position", stat_unit="embedding dimension", stat_dims=(0, 1), own_statistics=False, fixed_class=False,
        spatial=False, whole_splits=True, reduction="abs_sum", units_per_step=2, figure=None,
    ))  # fmt: skip
    yield modality
    del MODALITIES[modality.name]


def test_a_third_modality_plugs_into_the_registries_and_modality_of(sequences):
    x = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(2))
    assert modality_of(x) is sequences and modality_of("sequence") is sequences and sequences.map_dims == 1
    registry = Registry("thing")
    registry.add("for_sequences", object(), modalities=("sequences",))
    assert sequences.applicable(registry) == ["for_sequences"] and ROWS.applicable(registry) == []
    torch.testing.assert_close(sequences.reduce(x), x.abs().sum(2), rtol=0, atol=0)
    mean, std = sequences.statistics(x)
    torch.testing.assert_close(mean, x.reshape(-1, 4).mean(0))
    torch.testing.assert_close(std, x.reshape(-1, 4).std(0, unbiased=False))


def test_a_third_modality_is_scored_by_the_metrics_and_aggregators(sequences):
    from evaluators.aggregators.optimised_aggregators import postprocess
    from evaluators.aggregators.pixel_aggregators import aggregate_all
    from evaluators.metrics.insertion_deletion import insertion_deletion_curves
    from evaluators.metrics.model_scores import check_inputs_and_maps

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5 * 4, 3)).double().eval()
    x = torch.randn(2, 5, 4, dtype=torch.float64)
    maps = torch.tensor([[5.0, 4, 3, 2, 1], [1, 2, 3, 4, 5]], dtype=torch.float64)  # distinct: no ties
    assert check_inputs_and_maps(model, x, maps) == (sequences, (5,))
    fractions, curves = insertion_deletion_curves(model, x, maps, "insertion", baseline="zero")
    assert fractions.tolist() == [0.0, 0.2, 0.6, 1.0]  # S = ⌈5 / 2⌉ = 3 steps: k_s = ⌊5 s / 3⌋ = 0, 1, 3, 5
    target = model(x).argmax(1)
    for n in range(2):
        order = maps[n].argsort(descending=True)
        for s, k in enumerate((0, 1, 3, 5)):
            inserted = torch.zeros_like(x[n])
            inserted[order[:k]] = x[n, order[:k]]  # every embedding value of an inserted position
            expected = model(inserted[None]).softmax(1)[0, target[n]]
            assert curves[n, s].item() == pytest.approx(expected.item(), abs=1e-12)
    aggregated = aggregate_all({"a": maps, "b": maps.flip(1)}, "z", {"mean": {}}, sequences.map_dims)
    assert aggregated["mean"].shape == (2, 5)
    low, high = maps.amin(1, keepdim=True), maps.amax(1, keepdim=True)
    torch.testing.assert_close(postprocess(maps, sequences, normalisation="linear"), (maps - low) / (high - low))
    with pytest.raises(InputError, match="sequence position maps have no neighbourhood"):
        postprocess(maps, sequences, smoothing=1.0)
