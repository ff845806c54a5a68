"""One option vocabulary (issue 42, item 4): every sub-command of evaluate.py that takes a model
accepts the same model options (``evaluate.add_model_source``: --run, --population, --checkpoint,
--model_class, --model_args, --data_config, --model_inputs, --model_mean, --model_std), and each
lands in the command's config (``evaluators.inputs.model_source.ModelSource`` or
``PopulationSource``) or is refused in one line naming it, without running a protocol; the
sub-commands are read from evaluate.py's parser, so a new one is covered. Then one real, tiny
run of the generic sanity config (configs/sanity/table.yaml) on a tiny table's MLP. Every protocol
takes ``--log_to`` alike."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest
import yaml

import evaluate
import train
from foundation.errors import InputError
from evaluators.inputs.config import PopulationSource, load_config
from evaluators.inputs.model_source import ModelSource
from evaluators.protocols.registry import PROTOCOLS
from tests.entry_points.test_own_table import data_args, write_table
from tests.support import ROOT
from tests.support.wandb_runs import assert_logged

SINGLE = ("run", "explain")  # not protocols: they take the model as their first argument, too
# flag -> (its command-line values, the config's values)
FLAGS = {
    "run": (["some/run"], {"run": "some/run"}),
    "checkpoint": (["best.ckpt"], {"checkpoint": "best.ckpt"}),
    "model_class": (["torchvision.models.resnet18"], {"model_class": "torchvision.models.resnet18"}),
    "model_args": (["{num_classes: 3}"], {"model_args": {"num_classes": 3}}),
    "data_config": (["my_table.yaml"], {"data_config": "my_table.yaml"}),
    "model_inputs": (["raw"], {"model_inputs": "raw"}),
    "model_mean": (["[0.5, 0.4]", "--model_std", "[0.2, 0.3]"], {"model_mean": [0.5, 0.4], "model_std": [0.2, 0.3]}),
}


def sub_commands() -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in evaluate.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def source(command: str) -> str:
    return PROTOCOLS[command].source if command in PROTOCOLS else "model"


MODEL_COMMANDS = [c for c in sub_commands() if source(c) != "pair"]


def generic_config(command: str) -> Path:
    """The command's generic table config, else its first one."""
    table = ROOT / "configs" / command / "table.yaml"
    return table if table.is_file() else sorted((ROOT / "configs" / command).glob("*.yaml"))[0]


def parsed(command: str, *argv: str) -> dict:
    config = ["--config", str(generic_config(command))] if command in PROTOCOLS else []
    _, overrides = evaluate.parse([command, *config, *argv])
    return overrides


def test_every_sub_command_is_classified_and_takes_every_model_option():
    commands = sub_commands()
    assert set(commands) == {*SINGLE, *PROTOCOLS}
    assert {source(c) for c in commands} <= {"model", "run", "population", "pair"}
    assert set(MODEL_COMMANDS) >= {"run", "explain", "aggregation", "optimised", "sanity", "roar", "consistency",
                                   "landscape", "sigma"}  # fmt: skip
    for command in MODEL_COMMANDS:
        options = {o for a in commands[command]._actions for o in a.option_strings}
        assert {f"--{name}" for name in evaluate.SOURCE_OPTIONS} <= options, command
    for command in [c for c in commands if source(c) == "run"]:  # its config's run may name a population
        assert issubclass(PROTOCOLS[command].config, ModelSource)
    for command in [c for c in commands if c in PROTOCOLS and source(c) == "model"]:
        assert issubclass(PROTOCOLS[command].config, ModelSource)
    for command in [c for c in commands if source(c) == "population"]:
        assert issubclass(PROTOCOLS[command].config, PopulationSource)


@pytest.mark.parametrize("command", sorted(PROTOCOLS))
def test_every_protocol_takes_log_to_on_the_command_line(command):
    """``--log_to`` of every protocol sub-command (as train.py's and explain's) lands in the config's
    one ``log_to`` (``ReportLogging``); unset, the config's own stands; a bad value is refused in
    one line naming the choices."""
    assert parsed(command, "--log_to", "none")["log_to"] == "none"
    assert parsed(command)["log_to"] is None
    with pytest.raises(InputError, match=r"--log_to: invalid choice: 'paper' \(choose from 'wandb', "):
        parsed(command, "--log_to", "paper")


@pytest.mark.parametrize("command", [c for c in MODEL_COMMANDS if source(c) in ("model", "run")])
@pytest.mark.parametrize("flag", list(FLAGS))
def test_a_model_option_lands_in_a_one_model_config(command, flag):
    values, expected = FLAGS[flag]
    overrides = parsed(command, f"--{flag}", *values)
    assert {k: overrides[k] for k in expected} == expected
    if command in PROTOCOLS:  # the config made from it (a generic config, its run given)
        given = {"run": "some/run", **{k: v for k, v in overrides.items() if v is not None}}
        cfg = load_config(generic_config(command), PROTOCOLS[command].config, given)
        assert {k: getattr(cfg, k) for k in expected} == expected


@pytest.mark.parametrize("command", [c for c in MODEL_COMMANDS if source(c) == "run"])
def test_population_names_the_run_of_a_protocol_that_takes_populations(command, tmp_path):
    assert parsed(command, "--population", str(tmp_path / "population.pt"))["run"] == str(tmp_path / "population.pt")


@pytest.mark.parametrize("command", [c for c in MODEL_COMMANDS if source(c) == "model"])
def test_population_is_refused_by_a_one_model_command(command):
    with pytest.raises(InputError, match=f"--population pop.pt with {command}: .*expected --run"):
        parsed(command, "--population", "pop.pt")


@pytest.mark.parametrize("command", [c for c in MODEL_COMMANDS if source(c) == "population"])
def test_a_population_protocol_takes_population_or_run_and_refuses_model_file_options(command, tmp_path):
    missing = str(tmp_path / "nowhere" / "population.pt")
    for flag in ("population", "run"):
        overrides = parsed(command, f"--{flag}", missing)
        assert overrides["population"] == missing and "run" not in overrides
        with pytest.raises(InputError, match="nowhere"):  # the config names the missing file, not the option
            load_config(generic_config(command), PROTOCOLS[command].config, overrides)
    for flag, (values, _) in FLAGS.items():
        if flag != "run":
            with pytest.raises(InputError, match=f"--{flag}.* with {command}: it evaluates a population"):
                parsed(command, f"--{flag}", *values)


@pytest.mark.parametrize("command", ["run", "explain"])
def test_run_and_explain_take_the_model_as_argument_or_run(command, tmp_path):
    assert parsed(command, "some/run")["run"] == parsed(command, "--run", "some/run")["run"] == "some/run"
    with pytest.raises(InputError, match=f"{command} a --run b: two models"):
        parsed(command, "a", "--run", "b")
    missing = tmp_path / "no_run"
    with pytest.raises(InputError, match="no_run: (path|folder) not found"):  # every option accepted; the folder named
        evaluate.main([command, "--run", str(missing), "--model_args", "{num_classes: 3}", "--checkpoint", "a.ckpt",
                       "--model_inputs", "raw"])  # fmt: skip


@pytest.mark.parametrize("argv, message", [
    (["aggregation", "--run", "a", "--population", "b"], "--run a with --population b: aggregation evaluates one"),
    (["sanity", "--run", "a", "--model_args", "[1, 2]"], "--model_args \\[1, 2\\]: expected a YAML mapping"),
    (["consistency", "--population", "p.pt", "--model_class", "m.M", "--checkpoint", "c.ckpt"],
     "--checkpoint, --model_class with consistency"),
])  # fmt: skip
def test_combinations_that_make_no_sense_are_refused_in_one_line(argv, message):
    with pytest.raises(InputError, match=message):
        parsed(*argv)


def test_one_of_model_mean_and_std_is_refused_when_the_config_is_made():
    with pytest.raises(InputError, match="options model_mean and model_std: give both"):
        ModelSource(run="r", model_mean=[0.5])


def test_the_config_sections_keep_their_field_names():
    """Old configs load: the one-model protocols' header is ModelSource's, as it was in each."""
    header = ["run", "checkpoint", "model_class", "model_args", "data_config", "model_inputs", "model_mean",
              "model_std", "data_dir", "device", "kind"]  # fmt: skip
    assert [f.name for f in dataclasses.fields(ModelSource)] == header
    for command in [c for c in MODEL_COMMANDS if c in PROTOCOLS and source(c) != "population"]:
        assert [f.name for f in dataclasses.fields(PROTOCOLS[command].config)][:len(header)] == header


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_every_protocol_has_generic_configs_for_a_table_and_an_image_folder(protocol, tmp_path):
    """configs/<protocol>/table.yaml, its models named on the command line; image_folder.yaml where
    the protocol takes image models (landscape and sigma take MLP populations only); each loads
    once its models are named (a population protocol's: below, on a real population)."""
    images = "image population" in getattr(PROTOCOLS[protocol].config, "KINDS", ("image population",))
    for name in ("table", "image_folder") if images else ("table",):
        path = ROOT / "configs" / protocol / f"{name}.yaml"
        cfg = yaml.safe_load(path.read_text())
        if name == "table":
            assert all(cfg.get(k) is None for k in ("run", "population", "true_labels", "permuted_labels"))
        named = {"pair": {"true_labels": str(tmp_path), "permuted_labels": str(tmp_path)},
                 "population": None}.get(PROTOCOLS[protocol].source, {"run": "some/run"})  # fmt: skip
        if named is not None:
            load_config(path, PROTOCOLS[protocol].config, named)
    assert (ROOT / "configs" / protocol / "image_folder.yaml").is_file() == images


def test_the_generic_sanity_config_on_a_tiny_table_run(tmp_path):
    """configs/sanity/table.yaml on a 3-class CSV's MLP (2 epochs), the run named by --run and its
    checkpoint by --checkpoint, at tiny sizes: both modes, every explainer, the Spearman measures."""
    path = write_table(tmp_path / "tiny.csv", 3)
    run = train.main([*data_args(path), "--model.hidden", "[8]", "--trainer.max_epochs", "2", "--log_to", "none",
                      "--trainer.enable_progress_bar", "false", "--output_dir", str(tmp_path / "runs"),
                      "--run_name", "mlp"])["run_dir"]  # fmt: skip
    with pytest.raises(InputError, match=r"options \['data_config', 'model_class'\] with option run=.*a train.py run "
                       "folder; expected them unset"):  # a run's checkpoint names its model and data
        evaluate.main(["sanity", "--config", "configs/sanity/table.yaml", "--run", run, "--model_class", "m.M",
                       "--data_config", "d.yaml", "--output_dir", str(tmp_path / "refused"), "--set", "device=cpu"])
    summary = evaluate.main(["sanity", "--config", "configs/sanity/table.yaml", "--run", run, "--checkpoint",
                             "last.ckpt", "--output_dir", str(tmp_path / "sanity"), "--set", "n_inputs=6",
                             "--set", "n_baselines=10", "--set", "device=cpu"])  # fmt: skip
    explainers = set(yaml.safe_load((ROOT / "configs/sanity/table.yaml").read_text())["explainers"])
    assert summary["measures"] == ["spearman_abs", "spearman"]
    for mode in ("cascading", "independent"):
        assert set(summary["similarity"][mode]) == explainers
        assert summary["stages"][mode][0] == "original"
    assert summary["random_logit"]["saliency"]["spearman"]["n"] == 6
    (folder,) = (tmp_path / "sanity").iterdir()
    assert (folder / "sanity.json").is_file()


def test_the_generic_population_configs_take_a_population_by_run_or_population(tmp_path):
    """configs/sigma/table.yaml with --run <a population's run folder>, configs/landscape/table.yaml
    with --population <its file>, on a population of 4 MLPs of a tiny table, at tiny sizes."""
    path = write_table(tmp_path / "tiny.csv", 2)
    population = train.main(["--config", "configs/population.yaml", *data_args(path), "--model.size", "4",
                             "--model.hidden", "[8]", "--trainer.max_epochs", "2", "--log_to", "none",
                             "--trainer.enable_progress_bar", "false",
                             "--output_dir", str(tmp_path / "runs")])["population"]  # fmt: skip
    sigma = evaluate.main(["sigma", "--config", "configs/sigma/table.yaml", "--run", str(Path(population).parent),
                           "--output_dir", str(tmp_path / "sigma"), "--set", "n_models=2", "--set", "n_perturb=2",
                           "--set", "sigmas=[0.0, 0.1]", "--set", "layers=[0]", "--set", "device=cpu"])  # fmt: skip
    assert sigma["config"]["population"] == population
    row = sigma["rows"][-1]  # logged by default (offline in the tests)
    assert_logged(next((tmp_path / "sigma").iterdir()), "sigma", population, {"sigma_ablation/0/0.1/sa": row["sa"]},
                  ["sigma_ablation"], ["figure"])  # fmt: skip
    landscape = evaluate.main(["landscape", "--config", "configs/landscape/table.yaml", "--population", population,
                               "--output_dir", str(tmp_path / "landscape"), "--n_sets", "2", "--set", "n_models=2",
                               "--set", "n_perturb=2", "--set", "n_t=2", "--set", "device=cpu",
                               "--set", "ts_diagnostics=[0.0, 1.0]"])  # fmt: skip
    assert landscape["config"]["population"] == population


def test_the_generic_data_randomisation_config_on_two_tiny_table_runs(tmp_path):
    path = write_table(tmp_path / "tiny.csv", 2)
    runs = [train.main([*data_args(path), "--model.hidden", "[8]", "--trainer.max_epochs", "2", "--log_to", "none",
                        "--trainer.enable_progress_bar", "false", "--output_dir", str(tmp_path / "runs"),
                        "--run_name", name, *permute])["run_dir"]
            for name, permute in (("mlp-true", []), ("mlp-permuted", ["--data.permute_labels", "0"]))]  # fmt: skip
    summary = evaluate.main(["data_randomisation", "--config", "configs/data_randomisation/table.yaml",
                             "--set", f"true_labels={runs[0]}", "--set", f"permuted_labels={runs[1]}",
                             "--set", "n_inputs=6", "--set", "device=cpu", "--output_dir", str(tmp_path / "out")])
    assert summary
