"""evaluators/inputs/assemble.py: a population file from state dicts of a user's table network, its
members' outputs and test accuracies against each network's own (accuracy by hand), the metadata from
the data config, and the refusals before anything is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from datamodules import FinancialDataModule
from evaluators.inputs.assemble import assemble, config_file, main, network_config
from foundation.errors import InputError
from lightning_modules.population_io import load_population
from tests.support.user_nets import TableNet

DATA = {"class_path": "datamodules.FinancialDataModule", "init_args": {"dataset": "german"}}


def test_the_config_file_is_the_given_one_else_the_runs_own(tmp_path):
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    assert config_file(tmp_path / "run", "my.yaml") == Path("my.yaml")
    assert config_file(tmp_path / "run", None) == tmp_path / "run" / "config.yaml"
    assert config_file(tmp_path / "run" / "checkpoints" / "last.ckpt", None) == tmp_path / "run" / "config.yaml"


def test_the_network_config_is_the_class_given_else_the_classifiers_own():
    given = network_config(Path("m.pt"), None, "tests.support.user_nets.TableNet", {"hidden": 4})
    assert given == {"class_path": "tests.support.user_nets.TableNet", "init_args": {"hidden": 4}}
    classifier = type("C", (), {"hparams": {"net": {"class_path": "a.B", "init_args": None}}})()
    assert network_config(Path("run"), classifier, None, None) == {"class_path": "a.B", "init_args": {}}
    with pytest.raises(InputError, match=r"script\.pt: holds no class path of its network"):
        network_config(Path("script.pt"), torch.nn.Linear(2, 2), None, None)


def test_three_table_state_dicts_become_a_population_of_their_outputs_and_accuracies(tmp_path):
    config = tmp_path / "data.yaml"
    config.write_text(yaml.safe_dump({"data": DATA, "trainer": {"max_epochs": 7}}))
    nets, files = [], []
    for k in range(3):
        torch.manual_seed(k)
        nets.append(TableNet(in_features=61, hidden=4).eval())
        files.append(tmp_path / f"member-{k}.pt")
        torch.save(nets[-1].state_dict(), files[-1])
    out = tmp_path / "pop" / "pop.pt"
    summary = main(["--out", str(out), "--data_config", str(config), "--model_class",
                    "tests.support.user_nets.TableNet",
                    "--model_args", "{in_features: 61, hidden: 4}", *map(str, files)])  # fmt: skip
    population, payload = load_population(out)
    x, y = FinancialDataModule(dataset="german").test_tensors
    with torch.no_grad():
        for i, net in enumerate(nets):
            torch.testing.assert_close(population.nets[i](x), net(x), rtol=0, atol=0)
        by_hand = [(net(x).argmax(-1) == y).double().mean().item() for net in nets]
    assert summary == {"population": str(out), "members": 3, "member_test_acc": pytest.approx(by_hand, abs=1e-6)}
    assert payload["member_test_acc"] == pytest.approx(by_hand, abs=1e-6)
    assert payload["metadata"]["datamodule"] == DATA and payload["metadata"]["max_epochs"] == 7
    assert payload["metadata"]["members"] == [str(f) for f in files] and payload["hparams"]["inputs"] == "rows"
    with pytest.raises(InputError, match="already exists"):  # never overwritten
        assemble(files, out)


def test_too_few_members_and_model_args_not_a_mapping_are_refused(tmp_path):
    with pytest.raises(InputError, match=r"1 member\(s\); expected at least 2 models"):
        assemble([tmp_path / "a.pt"], tmp_path / "pop.pt")
    with pytest.raises(InputError, match=r"--model_args \[1, 2\]: expected a YAML mapping"):
        main(["--out", str(tmp_path / "pop.pt"), "--model_args", "[1, 2]", "a.pt", "b.pt"])
    assert not (tmp_path / "pop.pt").exists()
