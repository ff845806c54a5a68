"""Assemble a population file from K trained models of one network, on images or a table (docs/your_model.md).

    python -m evaluators.inputs.assemble --out pop.pt run-a run-b run-c     # train.py Classifier runs
    python -m evaluators.inputs.assemble --out pop.pt --data_config my.yaml \\
        --model_class torchvision.models.resnet18 --model_args '{num_classes: 10}' a.pt b.pt c.pt   # state dicts

Each member is read as ``evaluate.py`` reads a model (``evaluators.inputs.runs.load_run``: a
train.py run folder or checkpoint of a ``Classifier``, or a state dict with ``--model_class``),
on the data of ``--data_config`` (by default the run's own config). The members must share
one network config (class path and options); TorchScript and ``torch.export`` files hold
no class path and cannot be members. The file (``lightning_modules.population_io``, class
``ModulePopulation``) holds the members' weights, their test accuracy on the data's test
split, the datamodule and ``max_epochs`` (the data config's ``trainer.max_epochs``, the
epochs the consistency protocol trains curves for unless ``curve_epochs`` says), what the
members take (the data's ``inputs``: images, or a table's rows) and its classes, and is
read by ``evaluate.py consistency --population <file>``. An existing ``--out`` is never
overwritten. The members take the inputs as the data serves them (the preprocessing is printed
in one line; ``evaluators.inputs.model_inputs``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytorch_lightning as pl
import yaml

from evaluators.inputs.runs import load_run
from foundation.errors import InputError, OneLineParser, run_entry_point
from foundation.files import json_text, read_yaml
from lightning_modules.image_ensembles import network
from lightning_modules.module_population import ModulePopulation
from lightning_modules.population_io import save_population


def config_file(path: Path, data_config: str | None) -> Path:
    """The YAML file naming a member's data: ``data_config``, else its run's config.yaml."""
    if data_config is not None:
        return Path(data_config)
    run = path if path.is_dir() else path.parent.parent
    return run / "config.yaml"


def network_config(path: Path, model, model_class: str | None, model_args: dict | None) -> dict:
    """A member's network config ``{class_path, init_args}``."""
    if model_class is not None:
        return {"class_path": model_class, "init_args": dict(model_args or {})}
    net = model.hparams.get("net") if hasattr(model, "hparams") else None
    if not isinstance(net, dict):
        raise InputError(f"{path}: holds no class path of its network (a TorchScript or torch.export file, or a "
                         "model other than a train.py Classifier); expected a Classifier run or checkpoint, or a "
                         "state dict with --model_class")  # fmt: skip
    return {"class_path": net["class_path"], "init_args": dict(net.get("init_args") or {})}


def assemble(members: list[Path], out: Path, data_config: str | None = None, model_class: str | None = None,
             model_args: dict | None = None, data_dir: str | None = None) -> dict:  # fmt: skip
    """Write the population file ``out`` (see the module's docstring); its summary back."""
    if out.exists():
        raise InputError(f"--out {out}: already exists; choose a new file name")
    if len(members) < 2:
        raise InputError(f"{len(members)} member(s); expected at least 2 models")
    loaded, configs = [], []
    for path in members:
        model, data, _ = load_run(path, data_location=data_dir, kinds=("image", "tabular"), where=str(path),
                                  model_class=model_class, model_args=model_args, data_config=data_config,
                                  announce=path == members[0])  # fmt: skip
        configs.append(network_config(path, model, model_class, model_args))
        if configs[-1] != configs[0]:
            raise InputError(f"{path}: network {json.dumps(configs[-1])} differs from {members[0]}'s "
                             f"{json.dumps(configs[0])}; expected one architecture")  # fmt: skip
        loaded.append(model)
    population = ModulePopulation(configs[0], seeds=list(range(len(members))), num_classes=data.num_classes,
                                  inputs=data.inputs)  # fmt: skip
    for net, model in zip(population.nets, loaded):
        net.load_state_dict(network(model).state_dict())
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    trainer.test(population.eval(), datamodule=data, verbose=False)
    settings = read_yaml(config_file(members[0], data_config)) or {}
    metadata = {"dataset": data.describe(), "datamodule": settings["data"], "members": [str(p) for p in members],
                "max_epochs": (settings.get("trainer") or {}).get("max_epochs")}  # fmt: skip
    accuracy = population.member_test_acc.tolist()
    out.parent.mkdir(parents=True, exist_ok=True)
    save_population(out, population, accuracy, metadata)
    return {"population": str(out), "members": len(members), "member_test_acc": accuracy}


def main(argv: list[str] | None = None) -> dict:
    parser = OneLineParser(prog="python -m evaluators.inputs.assemble", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("members", nargs="+", type=Path, help="train.py run folders, checkpoints or state dicts")
    parser.add_argument("--out", type=Path, required=True, help="the population file to write (never overwritten)")
    parser.add_argument("--data_config", default=None, help="a YAML file whose data: section is the members' data")
    parser.add_argument("--data_dir", default=None, help="where the data lies now, if it moved")
    parser.add_argument("--model_class", default=None, help="the state dicts' network (class path)")
    parser.add_argument("--model_args", default=None, type=yaml.safe_load, metavar="YAML",
                        help="its init arguments, a YAML mapping, e.g. '{num_classes: 10}'")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.model_args is not None and not isinstance(args.model_args, dict):
        raise InputError(f"--model_args {args.model_args!r}: expected a YAML mapping, e.g. '{{num_classes: 10}}'")
    summary = assemble(args.members, args.out, args.data_config, args.model_class, args.model_args, args.data_dir)
    print(json_text(summary))
    return summary


if __name__ == "__main__":
    run_entry_point(main)
