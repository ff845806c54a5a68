"""One population file format for every kind, and the reader of the two formats written before
it (tabular ``population-v2``, ``image-population-v1``): each loads as the population it holds,
its members equal to the saved ones, and the evaluators tell an image file from a tabular one."""

from __future__ import annotations

import pytest
import torch

from foundation.errors import InputError
from lightning_modules import ImagePopulation, PopulationMLP, load_member, load_population, save_population


def old_file(path, population, file_format: str) -> None:
    """A file as the code before the one format wrote it: the kind named by its format alone."""
    torch.save({"format": file_format, "hparams": population.init_kwargs(), "seeds": list(population.seeds),
                "state_dict": {k: v.detach().clone() for k, v in population.state_dict().items()},
                "member_test_acc": [0.5] * population.size, "metadata": {"note": "old"}}, path)  # fmt: skip


def populations():
    tabular = PopulationMLP(in_features=4, seeds=[3, 1], hidden=(6,))
    image = ImagePopulation(arch="resnet8", num_classes=3, seeds=[2, 5], member_lrs=[0.1, 0.2], stacking="loop")
    with torch.no_grad():  # running statistics that are not the initial ones
        image.train()(torch.randn(4, 3, 8, 8))
    return {"reliable-explanations/population-v2": (tabular, torch.randn(5, 4)),
            "reliable-explanations/image-population-v1": (image.eval(), torch.randn(5, 3, 8, 8))}  # fmt: skip


@pytest.mark.parametrize("old_format", ["reliable-explanations/population-v2",
                                        "reliable-explanations/image-population-v1"])  # fmt: skip
def test_files_of_both_old_formats_and_the_new_one_load_as_their_population(tmp_path, old_format):
    from evaluators.inputs.image_members import source_modality
    from foundation.modality import IMAGES

    population, x = populations()[old_format]
    old_file(tmp_path / "old.pt", population, old_format)
    save_population(tmp_path / "new.pt", population, [0.5] * population.size, {"note": "new"})
    for name in ("old.pt", "new.pt"):
        loaded, payload = load_population(tmp_path / name)
        assert type(loaded) is type(population) and payload["class"] == type(population).__name__
        assert loaded.seeds == population.seeds and loaded.init_kwargs() == population.init_kwargs()
        torch.testing.assert_close(loaded.eval()(x), population(x), rtol=0, atol=0)
        assert (source_modality(tmp_path / name) is IMAGES) == isinstance(population, ImagePopulation)
        member = load_member(tmp_path / name, 1)
        torch.testing.assert_close(member.eval()(x), population.member(1).eval()(x), rtol=0, atol=0)
    assert torch.load(tmp_path / "new.pt", weights_only=True)["format"] == "reliable-explanations/population-v3"


def test_the_kind_asked_for_is_checked_and_a_foreign_file_named(tmp_path):
    population, _ = populations()["reliable-explanations/image-population-v1"]
    old_file(tmp_path / "image.pt", population, "reliable-explanations/image-population-v1")
    with pytest.raises(InputError, match="image.pt: holds a ImagePopulation; expected a PopulationMLP"):
        load_population(tmp_path / "image.pt", kind="PopulationMLP")
    torch.save({"format": "reliable-explanations/population-v3", "class": "Other"}, tmp_path / "other.pt")
    with pytest.raises(InputError, match="other.pt: not a population file"):
        load_population(tmp_path / "other.pt")
