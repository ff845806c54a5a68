"""Callbacks that tests inject through configs (`--trainer.callbacks+=tests.support.helpers.X`), and checks
shared by tests."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from scipy import stats

from tests.support import ROOT

ENTRY_POINTS = {"evaluate.py": "evaluate", "train.py": "train"}


class InterruptChunk(pl.Callback):
    """Raise at the start of epoch ``epoch`` of the chunk whose folder ends with ``chunk``,
    while the environment variable RELEXP_TEST_INTERRUPT is set (a crash mid-run)."""

    def __init__(self, chunk: str = "chunk-001", epoch: int = 2) -> None:
        self.chunk, self.epoch = chunk, epoch

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if os.environ.get("RELEXP_TEST_INTERRUPT") and trainer.default_root_dir.endswith(self.chunk):
            if trainer.current_epoch == self.epoch:
                raise RuntimeError("simulated crash")


class RecordEpochs(pl.Callback):
    """Append '<chunk folder> <epoch>' for every epoch trained to the file named by RELEXP_TEST_RECORD."""

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        record = os.environ.get("RELEXP_TEST_RECORD")
        if record:
            with open(record, "a") as fh:
                fh.write(f"{Path(trainer.default_root_dir).name} {trainer.current_epoch}\n")


class PoisonMember(pl.Callback):
    """Set member ``member``'s first parameter to NaN before optimiser step ``step`` (counted from 0)
    of a population: a member that diverges while the others train on."""

    def __init__(self, member: int = 1, step: int = 3) -> None:
        self.member, self.step = member, step

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int) -> None:
        if trainer.global_step != self.step:
            return
        with torch.no_grad():
            if hasattr(pl_module, "nets"):  # a network per member (ImagePopulation, ModulePopulation)
                next(pl_module.nets[self.member].parameters()).fill_(float("nan"))
            else:  # stacked parameters (PopulationMLP): the member is dim 0
                next(pl_module.parameters())[self.member].fill_(float("nan"))


class Block(NamedTuple):
    """A ```bash block of a Markdown page: the line of its opening fence (from 1), its marker
    (``long``, ``fails`` or ""), the marker's reason (``<!-- long: trains for minutes -->``; ""
    where none) and its commands, each with its trailing ``#`` comment."""

    line: int
    marker: str
    reason: str
    commands: list[tuple[str, str]]


def command_blocks(page: Path) -> list[Block]:
    """Every ```bash block of ``page``, continuation lines joined. A block's marker is the HTML
    comment on the line just above its fence: ``<!-- long -->`` or ``<!-- long: <reason> -->``
    (not run: minutes or more, or needs what a test does not have), ``<!-- fails -->`` (every
    command ends as bad input ends: status 2, one line on standard error), none (every command
    must succeed). Used by tests/docs/test_readme_commands.py and tests/docs/test_docs_commands.py."""
    lines = page.read_text().splitlines()
    found = []
    for i, line in enumerate(lines):
        if line.strip() != "```bash":
            continue
        marker = re.fullmatch(r"<!--\s*(\w+)(?::\s*(.*?))?\s*-->", lines[i - 1].strip() if i else "")
        end = lines.index("```", i + 1)
        text = "\n".join(lines[i + 1 : end]).replace("\\\n", " ")
        split = (re.match(r"(.*?)(?:\s#\s?(.*))?$", t) for t in text.splitlines())
        commands = [(m.group(1).strip(), m.group(2) or "") for m in split if m.group(1).strip()]
        found.append(Block(i + 1, marker.group(1) if marker else "", (marker and marker.group(2)) or "", commands))
    return found


def run_block(block: Block, cwd: Path = ROOT, timeout: float = 300) -> None:
    """Run ``block``'s commands verbatim, as a reader of the page runs them: in a shell whose
    ``python`` is the project's environment, from the checkout. A ``fails`` block's commands
    must each end with status 2 and one line on standard error that starts with "error: " and
    holds what the command's comment shows of it (parts separated by "..."); any other block's
    must succeed."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("RELIABLE_EXPLANATIONS_DEBUG", None)
    for command, comment in block.commands:
        result = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                                timeout=timeout)  # fmt: skip
        if block.marker == "fails":
            lines = result.stderr.strip().splitlines()
            assert result.returncode == 2 and len(lines) == 1, (command, result.stderr)
            assert lines[0].startswith("error: "), (command, lines[0])
            for shown in comment.split("..."):  # what the page shows of the message is in it
                assert shown.strip(" ;:") in lines[0], (command, shown, lines[0])
        else:
            assert result.returncode == 0, (command, result.stderr[-2000:])


def assert_one_line_error(result, message: str, status: int = 2) -> None:
    """An entry point's bad-input ending (``foundation.errors.run_entry_point``): the exit
    status, one line on standard error that starts with "error: " and holds ``message``."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == status, result.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr[-3000:]


def run_in_process(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``python <entry point> args...`` (``evaluate.py``, ``train.py`` or ``-m <module>``) run in this
    process the way its ``__main__`` block runs it (``foundation.errors.run_entry_point``), with its
    exit status and printed text as a ``CompletedProcess``. The error paths each entry point takes are
    the same in and out of process; a test per entry point still runs it as a real subprocess
    (imports, ``sys.argv``, portable mode's variables), the rest save its ~6 s of imports."""
    from foundation.errors import run_entry_point

    if args[0] == "-m":
        module, argv, prog = args[1], list(args[2:]), f"python -m {args[1]}"
    else:
        module, argv, prog = ENTRY_POINTS[args[0]], list(args[1:]), args[0]
    main = importlib.import_module(module).main
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv[:]
    sys.argv[:] = [prog]
    try:
        with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            run_entry_point(main, argv)
    except SystemExit as end:
        code = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
    finally:
        sys.argv[:] = saved
    return subprocess.CompletedProcess([prog, *argv], code, out.getvalue(), err.getvalue())


def naive_single_saliency_sa(population, x, target, n_members: int = 4, k: int = 2) -> float:
    """The consistency protocol's ``single`` saliency SA at n = 1 with 2 sets of ``n_members``
    (seed 0), recomputed by hand: each set's first member's autograd gradient of the ``target``
    logit, sign agreement of the top ``k`` per input (tests.evaluators.protocols.test_consistency's reading)."""
    import torch

    from evaluators.protocols.population_sets import disjoint_sets
    from tests.evaluators.protocols.test_consistency import naive_sign_agreement

    maps = []
    for members in disjoint_sets(n_members, 2, 2, 0):
        xi = x.clone().requires_grad_(True)
        logits = population.member(members[0])(xi)
        maps.append(torch.autograd.grad(logits.gather(1, target.view(-1, 1)).sum(), xi)[0].numpy())
    return sum(naive_sign_agreement(maps[0][i], maps[1][i], k) for i in range(len(x))) / len(x)


def noisy_member_copies(run: Path, folder: Path, scale: float, k: int = 3) -> Path:
    """A folder of ``k`` image runs standing in for a seed population: ``seed0`` a copy of ``run``,
    ``seed1`` ... copies with seeded noise (``scale`` x each weight's std) on every weight but
    BatchNorm's running statistics."""
    import shutil

    import torch

    for i in range(k):
        shutil.copytree(run, folder / f"seed{i}")
        if i:
            path = folder / f"seed{i}" / "checkpoints" / "last.ckpt"
            ckpt = torch.load(path, weights_only=True)
            g = torch.Generator().manual_seed(i)
            for name, w in ckpt["state_dict"].items():
                if w.is_floating_point() and "running" not in name:
                    w.add_(scale * w.std().nan_to_num() * torch.randn(w.shape, generator=g))
            torch.save(ckpt, path)
    return folder


def tiny_image_run(root: Path, tmp_path: Path, epochs: int = 1) -> Path:
    """A ``train.py`` run (in process) of the ``small_cnn`` ImageClassifier on the image folder
    ``root`` (batches of 4, ``epochs`` epochs, no logger), under ``tmp_path/runs``; its folder."""
    import train

    train.main(["--data", "ImageFolderDataModule", "--data.root", str(root), "--data.cache_dir", str(tmp_path / "c"),
                "--data.batch_size", "4", "--model", "lightning_modules.ImageClassifier", "--model.arch", "small_cnn",
                "--log_to", "none", "--trainer.enable_progress_bar", "false", "--trainer.max_epochs", str(epochs),
                "--trainer.enable_model_summary", "false", "--output_dir", str(tmp_path / "runs"),
                "--run_name", "r"])  # fmt: skip
    (run,) = (tmp_path / "runs").glob("*/r")
    return run


def fashion_mnist_or_skip():
    """The built-in Fashion-MNIST datamodule (batch 64, seed 0), or the test skipped where its files are absent."""
    from datamodules.images import FashionMNISTDataModule

    data = FashionMNISTDataModule(batch_size=64, seed=0)
    try:
        data.describe()
    except Exception as err:  # the Debian package is installed by the Makefile
        pytest.skip(f"Fashion-MNIST not available: {err}")
    return data


def t_interval(values) -> tuple[float, float]:
    """Mean and half-width of the 95 % t-interval over the values (members), by numpy and scipy."""
    v = np.asarray(values, dtype=np.float64)
    return v.mean(), stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))


def truth_by_hand(maps: torch.Tensor, mask: torch.Tensor, attributions: torch.Tensor | None = None,
                  k: int = 3, signed: bool = False) -> dict[str, list[float]]:  # fmt: skip
    """Per input, the localisation metrics of |maps| (N, ...) (``signed``: of each map less its
    minimum, as the protocols read their rows) against ``mask`` (N, ...) by a loop over inputs (the
    ROC AUC by scikit-learn); ``ground_truth_agreement`` (top-k sets of the map and of
    |attributions|) where ``attributions`` are given: the references of the truth columns."""
    from sklearn.metrics import roc_auc_score

    out: dict[str, list[float]] = {"relevance_rank_accuracy": [], "relevance_mass_accuracy": [], "pointing_game": [],
                                   "localisation_auc": [], "ground_truth_agreement": []}  # fmt: skip
    for i, (m, s) in enumerate(zip(maps.double().flatten(1), mask.flatten(1).bool())):
        m = m - m.min() if signed else m.abs()
        size = int(s.sum())
        top = set(m.argsort(descending=True, stable=True)[:size].tolist())
        out["relevance_rank_accuracy"].append(len(top & set(s.nonzero()[:, 0].tolist())) / size)
        out["relevance_mass_accuracy"].append((m[s].sum() / m.sum()).item())
        out["pointing_game"].append(float(bool(s[m == m.max()].any())))
        out["localisation_auc"].append(float(roc_auc_score(s.numpy(), m.numpy())))
        if attributions is not None:
            truth_top = set(attributions[i].abs().argsort(descending=True, stable=True)[:k].tolist())
            out["ground_truth_agreement"].append(len(set(m.argsort(descending=True, stable=True)[:k].tolist())
                                                     & truth_top) / k)  # fmt: skip
    return out


def truth_of_inputs(run: Path, n: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The ground truth of a protocol's ``n`` inputs of a run, by hand: a planted-pattern run's
    masks of the images at index 0, k, 2k, … of its test split (k = size // n) and no
    attributions; a synthetic table's relevant-feature mask (its first six features) of the first
    ``n`` test rows and their true attributions of each row's default class."""
    from evaluators.inputs.runs import load_run
    from lightning_modules.interface import default_classes

    model, data, _ = load_run(run)
    data.setup("test")
    if hasattr(data, "masks"):
        masks = data.masks("test")
        return masks[:: len(masks) // n][:n], None
    x = data.test_tensors[0][:n]
    mask = torch.zeros(n, x.shape[1], dtype=torch.bool)
    mask[:, :6] = True
    return mask, data.true_attributions(x, default_classes(model, x))


def assert_same_columns(got: dict, expected: dict, metrics, spread: str) -> None:
    """Every row's ``metrics`` of two protocol summaries equal (mean and ``spread``) to 1e-6."""
    for row, values in expected["rows"].items():
        for metric in metrics:
            for key in ("mean", spread):
                assert got["rows"][row][metric][key] == pytest.approx(values[metric][key], abs=1e-6), (row, metric)


def assert_truth_columns(summary: dict, rows: dict[str, torch.Tensor], mask: torch.Tensor,
                         attributions: torch.Tensor | None, metrics, spread: str, z: float) -> None:  # fmt: skip
    """Each of ``rows``' ``metrics`` in a protocol summary: the mean of ``truth_by_hand`` (k = 3) of
    the row's maps over the inputs where it is defined (a blank map has no relevance mass), and
    ``spread`` = z · s / √n (aggregation's 95 % normal interval, z = 1.959964; optimised's
    standard error, z = 1)."""
    for row, maps in rows.items():
        expected = truth_by_hand(maps, mask, attributions, k=3, signed=True)
        for metric in metrics:
            v = torch.tensor(expected[metric], dtype=torch.float64)
            v = v[~v.isnan()]
            got = summary["rows"][row][metric]
            assert got["mean"] == pytest.approx(v.mean().item(), abs=1e-6), (row, metric)
            assert got[spread] == pytest.approx(z * v.std().item() / len(v) ** 0.5, abs=1e-6), (row, metric)


def run_protocol_config(command: str, tmp_path: Path, cfg: dict) -> tuple[dict, Path]:
    """``evaluate.py <command> --config <cfg written as a file in tmp_path>``: its summary and its
    one report folder under ``cfg["output_dir"]``."""
    import evaluate

    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / f"{command}.yaml").write_text(json.dumps(cfg))
    summary = evaluate.main([command, "--config", str(tmp_path / f"{command}.yaml")])
    (folder,) = Path(cfg["output_dir"]).iterdir()
    return summary, folder


def assert_member_interval(summary: dict, row: str, metric: str) -> None:
    """A population summary's ``row``/``metric``: the mean over members of their means and the 95 %
    t-interval of ``t_interval`` (scipy's quantile)."""
    values = [summary["member_rows"][name][row][metric]["mean"] for name in summary["members"]]
    mean, half = t_interval(values)
    got = summary["rows"][row][metric]
    assert got["mean"] == pytest.approx(mean, abs=1e-12) and got["ci95"] == pytest.approx(half, abs=1e-12)
