"""evaluators/inputs/image_members.py: a folder of train.py image runs read as members (found at any
depth, ordered by folder for one seed, each the run's own model), its dataset's name, and what a source's
members take."""

from __future__ import annotations

import shutil

import pytest
import torch

from evaluators.inputs.image_members import image_source_name, load_image_members, member_runs, source_modality
from evaluators.inputs.runs import load_run
from foundation.errors import InputError
from foundation.modality import IMAGES, ROWS
from tests.datamodules.test_images import make_folder
from tests.support.helpers import tiny_image_run


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """One small_cnn run on 8 x 8 images copied twice under a folder, one copy two levels deeper; its
    copies' weights moved apart so the members differ."""
    tmp = tmp_path_factory.mktemp("image_members")
    make_folder(tmp / "tiny")
    run = tiny_image_run(tmp / "tiny", tmp)
    folder = tmp / "members"
    shutil.copytree(run, folder / "b")
    shutil.copytree(run, folder / "a" / "deep")
    checkpoint = folder / "b" / "checkpoints" / "last.ckpt"
    state = torch.load(checkpoint, weights_only=False)
    state["state_dict"] = {k: v + 1 if v.is_floating_point() else v for k, v in state["state_dict"].items()}
    torch.save(state, checkpoint)
    return folder


def test_a_folder_of_runs_of_one_seed_is_read_in_folder_order(run_folder):
    runs = [run_folder / "a" / "deep", run_folder / "b"]  # one seed: ordered by folder
    assert member_runs(run_folder) == runs
    members, payload, data = load_image_members(run_folder, torch.device("cpu"))
    assert members.folders == runs and members.size == 2 and members.device == torch.device("cpu")
    assert payload == {"metadata": {"dataset": {"dataset": "tiny"}, "max_epochs": 1}} and data.name == "tiny"
    x, _ = data.probe(4, "test")
    with torch.no_grad():
        for member, net, run in zip(members.members, members.nets, runs):
            own = load_run(run)[0].eval()
            assert not member.training
            torch.testing.assert_close(member(x), own(x), rtol=0, atol=0)
            torch.testing.assert_close(net(x), own(x), rtol=0, atol=0)
        assert not torch.equal(members.members[0](x), members.members[1](x))
    assert image_source_name(run_folder) == "tiny"


def test_a_folder_of_fewer_than_two_runs_is_refused(run_folder):
    with pytest.raises(InputError, match=r"option population='.*b': 1 train.py run\(s\) with checkpoints/last.ckpt"):
        member_runs(run_folder / "b")


def test_what_a_source_takes(run_folder, tmp_path):
    assert source_modality(run_folder) is IMAGES
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")  # not a population file: the table loader names it
    assert source_modality(tmp_path / "table.csv") is ROWS
