"""The members of a population as the single models they equal (evaluators/inputs/members.py):
which sources name a population, each member's logits against the stacked population's own
(``PopulationMLP.forward``, member m's slice), and what is refused."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from evaluators.inputs.members import load_members, model_options, population_name, population_path
from evaluators.inputs.model_source import FILE_OPTIONS
from foundation.errors import InputError
from lightning_modules.population_io import load_population


def test_which_sources_name_a_population(small_population, tmp_path):
    path = Path(small_population)
    assert population_path(path) == path  # a population file
    assert population_path(path.parent) == path.parent / "population.pt"  # its train.py run folder
    other = tmp_path / "model.pt"
    torch.save({"state_dict": {}}, other)
    assert population_path(other) is None and population_path(tmp_path / "none") is None  # a single model
    assert population_path(tmp_path) is None  # a folder without runs
    assert population_name(path) == "german"


def test_every_member_gives_its_slice_of_the_populations_logits(small_population):
    members = load_members(Path(small_population), torch.device("cpu"))
    population, _ = load_population(small_population)
    assert members.names == [f"seed{s}" for s in population.seeds] and len(members.models) == 8
    x = members.data.test_tensors[0][:16]
    with torch.no_grad():
        stacked = population(x)
        for m, model in enumerate(members.models):
            assert not model.training
            torch.testing.assert_close(model(x), stacked[m], rtol=1e-5, atol=1e-6)


def test_what_a_population_is_refused_with(small_population, tmp_path):
    path = Path(small_population)
    with pytest.raises(InputError, match=r"option\(s\) \['model_class'\] with option run="):
        load_members(path, torch.device("cpu"), file_options={"model_class": "my.Net", "model_args": None})
    with pytest.raises(InputError, match="not found; expected the population's population.pt"):
        load_members(tmp_path / "population.pt", torch.device("cpu"))
    with pytest.raises(InputError, match="holds a tabular population; expected an image population"):
        load_members(path, torch.device("cpu"), kind="image")


def test_model_options_are_the_file_options_of_a_config():
    cfg = SimpleNamespace(**{name: f"value of {name}" for name in FILE_OPTIONS}, other=1)
    assert model_options(cfg) == {name: f"value of {name}" for name in FILE_OPTIONS}
