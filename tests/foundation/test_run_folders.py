"""Run folders held by one process (foundation/run_folders.py), in one process: ``flock`` treats
each ``open`` of the lock file as its own holder, so a second claim here is refused as another
process's would be. A new name moves on to ``-2``, ``-3``; a chosen name in use is named with the
holder's pid; a released folder is free again. Two processes, killed holders and full disks:
tests/faults/test_run_folders.py."""

from __future__ import annotations

import os

import pytest

from foundation import run_folders
from foundation.errors import InputError


@pytest.fixture
def held():
    folders = []
    yield folders
    for folder in folders:
        run_folders.release(folder)


def test_new_folders_move_on_and_a_chosen_name_in_use_is_named(tmp_path, held):
    first = run_folders.new_folder(tmp_path / "runs" / "r")
    second = run_folders.new_folder(tmp_path / "runs" / "r")
    held += [first, second]
    assert (first.name, second.name) == ("r", "r-2") and not list((tmp_path / "runs").glob(".*"))
    assert (first / ".lock").read_text().split() == [str(os.getpid())]
    with pytest.raises(InputError, match=rf"r: in use by process {os.getpid()}, which holds .*r/.lock; wait for it"):
        run_folders.new_folder(tmp_path / "runs" / "r", stop_if_in_use=True)
    assert not run_folders._free(first)
    run_folders.release(first)
    assert run_folders._free(first)
    held.append(run_folders.new_folder(tmp_path / "runs" / "r"))  # r is taken (it exists): r-3
    assert held[-1].name == "r-3"


def test_claiming_for_a_resume_holds_the_folder_itself(tmp_path, held):
    folder, made = run_folders.claim_run_folder(tmp_path / "a" / "b" / "run", resume=False, named=True)
    held.append(folder)
    assert folder == tmp_path / "a" / "b" / "run" and made == [folder, tmp_path / "a" / "b", tmp_path / "a"]
    run_folders.release(folder)
    assert run_folders.claim_run_folder(folder, resume=True, named=True) == (folder, [])
    assert run_folders.hold(folder) == folder  # already held by this process: a no-op
    assert run_folders.launched_rank() == (0, 1) and run_folders.launching_process()
