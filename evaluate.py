"""Evaluate trained models.

    python evaluate.py run runs/german/<run>                 # re-test a run from its checkpoint
    python evaluate.py explain runs/cifar10-jpeg/<run>       # a grid of test images x explainers (PNG)
    python evaluate.py landscape --config configs/landscape/german.yaml --data_dir ../shared/data
    python evaluate.py sigma --config configs/sigma/german.yaml
    python evaluate.py consistency --config configs/consistency/heloc.yaml   # Ley et al.'s Table 1
    python evaluate.py consistency --config configs/consistency/heloc.yaml --set n_points_smoothgrad=100
    python evaluate.py consistency --population runs/my/pop-20/population.pt  # a table: configs/consistency/table.yaml
    python evaluate.py consistency --resume runs/consistency/heloc-<stamp>   # continue an interrupted run
    python evaluate.py consistency --config configs/consistency/fashion_mnist.yaml  # an image population
    python evaluate.py aggregation --config configs/aggregation/cifar10.yaml  # Mahlau & Nolde's Table 1
    python evaluate.py optimised --config configs/optimised/cifar10.yaml      # Decker et al.'s Tables 5-6
    python evaluate.py roar --config configs/roar/heloc.yaml [--shard i/k]    # Hooker et al.'s ROAR grid
    python evaluate.py roar --config configs/roar/image_folder.yaml --rankings_only [--shard i/k]  # its map pass
    python evaluate.py sanity --config configs/sanity/fashion_mnist.yaml   # Adebayo et al.'s model randomisation
    python evaluate.py data_randomisation --config configs/data_randomisation/fashion_mnist.yaml  # Adebayo §3.2
    python evaluate.py report --population runs/my/pop-10/population.pt   # can I trust them? docs/trust.md
    python evaluate.py report --population runs/my/pop-10/population.pt --set permute_labels=1  # and its twin
    python evaluate.py --portable consistency ...   # the same bits on any x86-64 CPU (portable.py)

``run`` rebuilds the datamodule from the run's ``config.yaml`` and the model from
``checkpoints/last.ckpt`` (loaded with ``weights_only=True``) and tests it (``--data_dir``:
where the run's data lies now, if it moved; for an image run its folder or archive); ``explain``
draws an image model's explanations of ``--n_images`` test images evenly spaced through the
test split it serves (``evaluators/protocols/explanation_grid.py``; ``--data_dir`` as for ``run``).
Every other command is a protocol of ``evaluators/protocols/`` (``sigma``: ``sigma_ablation.py``,
``optimised``: ``optimised_aggregation.py``, ``data_randomisation``: ``data_randomisation.py``,
``roar``: ``roar/protocol.py``, ``report``: ``evaluators/reports/reliability/``, whose folder is named
by its config, so a re-run or a ``--shard`` process continues the same grid). Each makes a new
folder ``<output_dir>/<dataset>-<stamp>`` (``data_randomisation``, which compares two runs:
``<output_dir>/data_randomisation-<stamp>``) holding its ``config.yaml`` at the start and JSON,
CSV and a PNG at the end; an interrupted run of a resumable protocol (``consistency``, ``aggregation``,
``optimised``, ``sanity``, ``report``: a protocol entry's ``resumable``) continues with ``--resume <folder>``.
``report`` with ``permute_labels`` first trains the population's permuted-label twin with
train.py (``train_twin``).

Every command that evaluates a model names it with the same options (``add_model_source``):
``--run``, ``--population``, ``--checkpoint``, and a model file's ``--model_class``,
``--model_args``, ``--data_config``, ``--model_inputs``, ``--model_mean``, ``--model_std``
(docs/your_model.md); ``source_options`` maps them onto the command's config
(``evaluators.inputs.model_source.ModelSource``, or a population protocol's ``population``)
and refuses, in one line, a combination that makes no sense.
"""

from __future__ import annotations

import sys

import portable

portable.enable_if_asked(sys.argv)  # before torch is imported: the mode's variables are read at import

import dataclasses
import datetime
import shutil
from argparse import ArgumentTypeError, RawDescriptionHelpFormatter
from pathlib import Path

import pytorch_lightning as pl
import yaml

import lightning_modules  # noqa: F401  (the only model classes a checkpoint may name)
import train
from evaluators.inputs.config import load_config, population_kind
from evaluators.inputs.members import population_path
from evaluators.inputs.model_inputs import MODEL_INPUTS
from evaluators.inputs.model_source import FILE_OPTIONS
from evaluators.inputs.runs import load_run
from evaluators.inputs.sources import MEMBER_FOLDER, POPULATION_FILE, not_found, RUN_FOLDER
from evaluators.maps import EXPLAINERS
from evaluators.protocols.explanation_grid import explanation_grid
from evaluators.protocols.registry import PROTOCOLS
from evaluators.reports.reliability.twin import twin_arguments, twin_population
from evaluators.reports.wandb_log import LOG_TO
from foundation.registry import Entry
from foundation.errors import InputError, OneLineParser, run_entry_point
from foundation.files import json_text, write_text
from foundation.run_folders import LOCK, hold, new_folder, release

if portable.is_active():
    portable.configure_torch()


def evaluate_run(
    run_dir: Path, data_dir: str | None = None, checkpoint: str = "last.ckpt", accelerator: str = "auto",
    **model_options,
) -> dict:
    """Test accuracy and loss of ``run_dir``'s checkpoint on its test split, on ``accelerator``
    (Lightning's name: ``auto`` takes a GPU where there is one). ``data_dir``: where the
    run's data lies now (a tabular or Fashion-MNIST folder, an image folder or archive).
    ``run_dir`` may be a model file, read with ``model_options`` (``load_run``'s ``model_class``,
    ``model_args``, ``data_config``)."""
    model, data, ckpt_path = load_run(run_dir, checkpoint, data_location=data_dir, **model_options)
    trainer = pl.Trainer(
        logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator=accelerator, devices=1
    )
    (tested,) = trainer.test(model, datamodule=data, verbose=False)
    return {"run_dir": str(run_dir), "checkpoint": str(ckpt_path), "test_acc": tested["test/acc"],
            "test_loss": tested["test/loss"], "data": data.describe()}  # fmt: skip


def new_report_dir(cfg) -> Path:
    """``<output_dir>/<dataset>-<stamp>``, made now, never an existing folder and held by this
    process (``foundation.run_folders.new_folder``), holding the run's ``config.yaml``."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = new_folder(Path(cfg.output_dir) / f"{cfg.report_name()}-{stamp}")
    try:
        write_text(run_dir / "config.yaml", yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
    except BaseException:  # e.g. a full disk: no folder without its config stays
        shutil.rmtree(run_dir)
        release(run_dir)
        raise
    return run_dir


def missing_folders(folder: Path) -> list[Path]:
    """``folder`` and those of its parents that do not exist yet, innermost first."""
    return [p for p in (folder, *folder.parents) if not p.exists()]


def holds_config_only(run_dir: Path) -> bool:
    return [p.name for p in run_dir.iterdir() if p.name != LOCK] == ["config.yaml"]


def resumed_config(run_dir: Path, spec: Entry, overrides: dict):
    """The config an interrupted run folder was started with; only ``data_dir`` may change
    (where the raw data lies on this machine): any other option would change its numbers."""
    if not (run_dir / "config.yaml").is_file():
        raise InputError(f"--resume {run_dir}: no config.yaml there; expected a folder started by evaluate.py")
    if (run_dir / spec.report).exists():
        raise InputError(f"--resume {run_dir}: {spec.report} is there, the run is finished")
    changed = sorted(k for k, v in overrides.items() if v is not None and k != "data_dir")
    if changed:
        raise InputError(f"--resume {run_dir}: options {changed} cannot change in a resumed run; "
                         "start a new run to change them")  # fmt: skip
    return load_config(run_dir / "config.yaml", spec.config, overrides)


def default_config(command: str, spec: Entry, population: str | None) -> Path:
    """The config a protocol takes without ``--config``: its default for the kind of ``--population``."""
    defaults = ", ".join(sorted({Path(c).relative_to(train.ROOT).as_posix() for c in spec.default_configs.values()}))
    if population is None:
        raise InputError(f"{command}: none of --config, --resume, --population given; expected --config <file>, "
                         f"--resume <folder>, or --population <a table's population file> (default config: {defaults})")
    if not Path(population).exists():
        raise not_found(population, f"{POPULATION_FILE}, or {MEMBER_FOLDER}")
    kind = population_kind(population)
    if kind not in spec.default_configs:
        raise InputError(f"--population {population}: holds {'an' if kind[0] in 'aeiou' else 'a'} {kind}, which has "
                         f"no default config for {command}; expected --config <file> (defaults exist for a "
                         f"{' and a '.join(sorted(spec.default_configs))})")  # fmt: skip
    return Path(spec.default_configs[kind])


SOURCE_OPTIONS = ("run", "population", "checkpoint", *FILE_OPTIONS)  # the model options of every command
SINGLE = {"run": "re-tests one model", "explain": "draws one image model's maps"}


def add_model_source(parser, positional: bool = False) -> None:
    """The one set of options naming the model a sub-command evaluates (``SOURCE_OPTIONS``,
    mapped onto its config by ``source_options``; ``evaluators.inputs.model_source``).
    ``positional``: the run folder or model file may also be given as the first argument."""
    if positional:
        parser.add_argument("run_dir", type=Path, nargs="?", default=None,
                            help="a folder written by train.py, or a model file (docs/your_model.md); or --run")
    parser.add_argument("--run", default=None, help="a train.py run folder or a model file (docs/your_model.md); "
                        "aggregation, optimised, sanity: also a population, each member evaluated")
    parser.add_argument("--population", default=None,
                        help="a population file or folder of image runs (consistency, landscape, sigma; aggregation, "
                             "optimised, sanity: as --run)")  # fmt: skip
    parser.add_argument("--checkpoint", default=None, help="file name under <run>/checkpoints (default last.ckpt)")
    parser.add_argument("--model_class", default=None,
                        help="a state dict's network (class path, e.g. torchvision.models.resnet18)")
    parser.add_argument("--model_args", default=None, type=yaml.safe_load, metavar="YAML",
                        help="its init arguments, a YAML mapping, e.g. '{num_classes: 10}'")
    parser.add_argument("--data_config", default=None,
                        help="a YAML file whose data: section is the model file's data (a train.py config)")
    parser.add_argument("--model_inputs", default=None, choices=MODEL_INPUTS,
                        help="data (default): the inputs as the datamodule serves them (standardised); raw: "
                             "before its standardisation (a table's encoded rows, pixel values in [0, 1])")
    for name, of in (("mean", "subtracts"), ("std", "divides by")):
        parser.add_argument(f"--model_{name}", default=None, type=yaml.safe_load, metavar="YAML",
                            help=f"the {name} the model {of} from the raw inputs: a list, one per feature or "
                                 "channel, or one number (with --model_mean and --model_std)")  # fmt: skip


def flags(names) -> str:
    return ", ".join(f"--{name}" for name in names)


def source_options(command: str, args) -> dict:
    """The model options given to ``command`` (``add_model_source``) under its config's keys:
    ``population`` for a population protocol, else ``run``, ``checkpoint`` and a model file's
    options; those not given are None. A combination that makes no sense is refused in one line."""
    given = {name: getattr(args, name, None) for name in SOURCE_OPTIONS}
    positional = getattr(args, "run_dir", None)
    if positional is not None:
        if given["run"] is not None and Path(given["run"]) != positional:
            raise InputError(f"{command} {positional} --run {given['run']}: two models; expected one of them")
        given["run"] = str(positional)
    if given["model_args"] is not None and not isinstance(given["model_args"], dict):
        raise InputError(f"--model_args {given['model_args']!r}: expected a YAML mapping, e.g. '{{num_classes: 10}}'")
    if given["run"] is not None and given["population"] is not None:
        raise InputError(f"--run {given['run']} with --population {given['population']}: {command} evaluates one of "
                         "them; expected one")  # fmt: skip
    source = PROTOCOLS[command].source if command in PROTOCOLS else "model"
    if source == "population":
        named = [name for name in ("checkpoint", *FILE_OPTIONS) if given[name] is not None]
        if named:
            raise InputError(f"{flags(named)} with {command}: it evaluates a population, whose file names its own "
                             "models; expected them unset (they read one run's checkpoint or a model file)")
        run = given["run"]
        if run is not None and Path(run).exists():
            population = population_path(run)
            if population is None:
                raise InputError(f"--run {run}: one model; {command} evaluates a population; expected --population "
                                 "<a population file> or --run <a population's run folder>")  # fmt: skip
            run = str(population)
        return {"population": given["population"] if run is None else run}
    if given["population"] is not None:
        if source == "model":
            what = SINGLE.get(command, "evaluates one model")
            raise InputError(f"--population {given['population']} with {command}: it {what}; expected --run <a "
                             "train.py run folder or a model file>")  # fmt: skip
        if Path(given["population"]).exists() and population_path(given["population"]) is None:
            raise InputError(f"--population {given['population']}: one model, not a population; expected --run "
                             f"{given['population']}")  # fmt: skip
        given["run"] = given["population"]
    return {name: value for name, value in given.items() if name != "population"}


def registered_names(registry, traits: dict) -> list[str]:
    """The names of ``registry`` with ``traits`` (a plain dict of names: all of them)."""
    return registry.names(**traits) if traits else list(registry)


def names_option(option: str, registry, traits: dict | None = None):
    """An argparse ``type``: comma-separated names, each one of ``registered_names(registry, traits)``
    (asked when the option is read, so a name registered by then is one)."""

    def parse(text: str) -> list[str]:
        known = registered_names(registry, traits or {})
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in known]
        if unknown or not names:
            raise ArgumentTypeError(f"{unknown or text!r}: expected comma-separated names, some of {known}")
        return names

    parse.__name__ = option  # argparse names the option's type in its error
    return parse


def choice_value(config: type, option: str, names: list[str]) -> list[str] | dict[str, dict]:
    """``names`` as the config's ``option`` takes them: a list, or for an option that maps names to
    their options (a dict by default) each name with its default options, ``{}``."""
    field = next(f for f in dataclasses.fields(config) if f.name == option)
    default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
    return {name: {} for name in names} if isinstance(default, dict) else names


LOG_TO_HELP = "wandb (online when the environment says so), wandb_offline, wandb_online or none"


def build_parser() -> OneLineParser:
    """evaluate.py's sub-commands: ``run``, ``explain`` and every protocol of ``PROTOCOLS``; each
    that evaluates a model takes the model options of ``add_model_source``."""
    parser = OneLineParser(prog="evaluate.py", description=__doc__, formatter_class=RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="re-test a training run")
    add_model_source(run, positional=True)
    run.add_argument("--data_dir", default=None,
                     help="where the run's data lies now: its data_dir, or an image run's folder or .tar.gz root")
    run.add_argument("--accelerator", default="auto", help="Lightning accelerator: auto, cpu or gpu")
    run.add_argument("--out", type=Path, default=None, help="also write the metrics here (never overwritten)")
    grid = commands.add_parser("explain", help="a PNG grid of test images x explainers of an image model's run")
    add_model_source(grid, positional=True)
    grid.add_argument("--methods", default="saliency,integrated_gradients,smoothgrad,guided_backprop,gradcam,rise",
                      type=names_option("methods", EXPLAINERS),
                      help=f"comma-separated explainers, some of {list(EXPLAINERS)}")  # fmt: skip
    grid.add_argument("--n_images", type=int, default=8,
                      help="test images, evenly spaced through the run's test split (default 8)")
    grid.add_argument("--data_dir", default=None, help="where the run's images lie now: its folder or .tar.gz root")
    grid.add_argument("--log_to", default="wandb", choices=LOG_TO, help=LOG_TO_HELP)
    for name, spec in PROTOCOLS.items():
        sub = commands.add_parser(name, help=spec.help)
        start = sub.add_mutually_exclusive_group(required=spec.default_configs is None)
        start.add_argument("--config", type=Path, help="the protocol's options (YAML)" + (
            "; without it, a --population of a table takes the default (default_configs)" if spec.default_configs
            else ""))  # fmt: skip
        if spec.resumable:
            start.add_argument("--resume", type=Path, help="an interrupted run folder to continue")
        if spec.source != "pair":  # data_randomisation names its two runs in its config only
            add_model_source(sub)
        sub.add_argument("--data_dir", default=None, help="folder holding the raw dataset")
        sub.add_argument("--output_dir", default=None)
        sub.add_argument("--log_to", default=None, choices=LOG_TO, help=LOG_TO_HELP + " (the config's log_to)")
        if spec.has_sets:
            sub.add_argument("--n_sets", type=int, default=None)
        for option, keywords in (spec.options or {}).items():
            sub.add_argument(f"--{option}", **keywords)
        for option, (registry, traits) in (spec.choices or {}).items():
            sub.add_argument(f"--{option}", default=None, type=names_option(option, registry, traits), metavar="A,B",
                             help=f"the config's {option}, comma-separated (each with its default options), some "
                                  f"of {registered_names(registry, traits)}")  # fmt: skip
        sub.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                         help="override any option of the config; VALUE is read as YAML; KEY may be a dotted "
                              "path into a mapping option, e.g. trainer.max_epochs=1")  # fmt: skip
    return parser


def parse(argv: list[str]) -> tuple:
    """``argv`` parsed, running nothing: the arguments and, for a protocol, the overrides of its
    config (the model options under its config's keys, ``--data_dir``, ``--n_sets``,
    ``--output_dir``, ``--log_to``, then each ``--set``); for ``run`` and ``explain`` their model options."""
    args = build_parser().parse_args(argv)
    if args.command not in PROTOCOLS:
        return args, source_options(args.command, args)
    spec = PROTOCOLS[args.command]
    overrides = source_options(args.command, args) if spec.source != "pair" else {}
    overrides.update({k: getattr(args, k, None) for k in ("data_dir", "n_sets", "output_dir", "log_to")})
    for option in spec.choices or {}:
        if getattr(args, option) is not None:
            overrides[option] = choice_value(spec.config, option, getattr(args, option))
    for setting in args.settings:
        key, sep, value = setting.partition("=")
        if not sep or not key:
            raise InputError(f"--set {setting!r}: expected KEY=VALUE, e.g. --set n_background=10")
        overrides[key] = yaml.safe_load(value)
    return args, overrides


def single_model(command: str, options: dict) -> tuple[Path, str, dict]:
    """``run``'s and ``explain``'s model: its path, its checkpoint and a model file's options."""
    if options["run"] is None:
        raise InputError(f"{command}: no model given; expected a run folder or model file (the first argument, "
                         "or --run)")  # fmt: skip
    return Path(options["run"]), options["checkpoint"] or "last.ckpt", {n: options[n] for n in FILE_OPTIONS}


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    portable.enable_if_asked(argv)  # in-process callers: an error unless the process started in the mode
    args, overrides = parse(argv)
    if args.command == "run":
        if args.out is not None and args.out.exists():
            raise InputError(f"--out {args.out}: already exists; choose a new file name")
        run_dir, checkpoint, options = single_model("run", overrides)
        metrics = evaluate_run(run_dir, args.data_dir, checkpoint, args.accelerator, **options)
        text = json_text(metrics, indent=2)
        if args.out is not None:
            write_text(args.out, text)
        print(text)
        return metrics
    if args.command == "explain":
        methods = args.methods
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir, checkpoint, options = single_model("explain", overrides)
        if not run_dir.exists():  # before its grid's folder is made there
            raise not_found(run_dir, f"{RUN_FOLDER}, or a model file (docs/your_model.md)", noun="path")
        beside = run_dir.is_file()  # a model file: the grid's folder beside it
        where = run_dir.parent if beside else run_dir
        out_dir = new_folder(where / f"{run_dir.stem + '-' if beside else ''}explanations-{stamp}")
        try:
            report = explanation_grid(run_dir, out_dir, methods, args.n_images, checkpoint=checkpoint,
                                      log_to=args.log_to, data_location=args.data_dir, **options)
        except BaseException:
            if [p.name for p in out_dir.iterdir()] == [LOCK]:  # failed before writing: no empty folder stays
                shutil.rmtree(out_dir)
            raise
        finally:
            release(out_dir)
        print(f"grid: {report['png']}")
        return report
    spec = PROTOCOLS[args.command]
    resume = getattr(args, "resume", None)
    made: list[Path] = []  # the output folders this run makes, removed again if it fails before writing anything
    if resume is not None:
        if resume.is_dir() and spec.report_dir is None:  # a folder of its own: this process's alone
            hold(resume)
        try:
            cfg, run_dir = resumed_config(resume, spec, overrides), resume
        except BaseException:
            release(resume)
            raise
    else:
        config = args.config or default_config(args.command, spec, overrides.get("population"))
        cfg = load_config(config, spec.config, overrides)
        made = missing_folders(Path(cfg.output_dir))
        run_dir = (spec.report_dir or new_report_dir)(cfg)  # ROAR's grid folder is shared by its shards: not held
    try:
        return run_protocol(args, spec, cfg, run_dir, resume, made)
    finally:
        release(run_dir)


def train_twin(cfg, run_dir: Path) -> None:
    """``report``'s ``permute_labels``: the population's permuted-label twin trained by train.py
    with its own recipe into the report's folder, or its interrupted training continued, before
    the report reads it (``evaluators.reports.reliability.twin``); a twin trained already is kept."""
    if cfg.permute_labels is None:
        return
    trained = twin_population(run_dir)
    if trained is not None:
        print(f"permuted labels: the twin {trained} is trained; not trained again", flush=True)
        return
    arguments = twin_arguments(cfg, run_dir)
    print(f"permuted labels: training the twin: python train.py {' '.join(arguments)} (interrupted, it continues "
          f"with python evaluate.py report --resume {run_dir})", flush=True)  # fmt: skip
    if train.main(arguments) is None:  # stopped before its last epoch
        raise KeyboardInterrupt


BEFORE = {"report": train_twin}  # a protocol's step that needs train.py, above the protocols' layer


def run_protocol(args, spec: Entry, cfg, run_dir: Path, resume: Path | None, made: list[Path]) -> dict:
    """Evaluate protocol ``spec`` into ``run_dir`` (after its ``BEFORE`` step) and write its report;
    a failure before anything was written removes the new folder (and the output folders ``made``
    for it)."""
    options = {option: getattr(args, option) for option in spec.options or {}}
    try:
        if args.command in BEFORE:
            BEFORE[args.command](cfg, run_dir)
        summary = spec.obj(cfg, run_dir, **options) if spec.resumable else spec.obj(cfg)
        if summary is None:  # nothing to report yet, e.g. a ROAR grid's cells left to other shards
            return {}
    except BaseException as err:
        if spec.resumable and isinstance(err, KeyboardInterrupt) and not holds_config_only(run_dir):
            print(f"interrupted; continue with: python evaluate.py {args.command} --resume {run_dir}", file=sys.stderr)
            raise SystemExit(130) from None
        if resume is None and holds_config_only(run_dir):  # bad input found on the way: no empty run folder stays
            shutil.rmtree(run_dir)
            for folder in made:  # nor the output folders made for it
                try:
                    folder.rmdir()  # only while empty: one that another process has written to stays
                except OSError:
                    break
        raise
    spec.write(summary, run_dir)
    print(f"report: {run_dir}")
    return summary


if __name__ == "__main__":
    run_entry_point(main)
