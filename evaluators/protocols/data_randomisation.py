"""The data randomisation test of Adebayo et al. (2018, §3.2): ``evaluate.py data_randomisation``.

Two trained models (or populations) of one architecture on one dataset: ``true``, trained on
the true labels (option ``true_labels``), and ``permuted``, trained on permuted training labels
(option ``permuted_labels``) (``train.py
--data.permute_labels <seed>``, ``datamodules.label_permutation``). A map that explains the
model must change when what the model learnt is noise; a map that stays similar is about the
input (or the architecture) rather than the model.

Each side is a ``train.py`` run folder (one model), a population file or a run folder holding
one (tabular or image), or a folder of image runs; member k of one side is paired with member
k of the other (the first ``members`` pairs; single models: one pair). Inputs: the first
``n_inputs`` test rows, or ``n_inputs`` test images evenly spaced through the test split, of
the true side's datamodule; the permuted side's must serve the same inputs (the labels of the
test split are never permuted). Every input is explained for its test label, by both models,
with each explainer of ``explainers`` (``evaluators.maps.EXPLAINERS``; options per explainer
in ``explainer_options``); image maps are summed over channels to (N, H, W). Similarity of
the paired maps, input by input, by each measure of ``measures``
(``evaluators.metrics.similarity``; rows take the Spearman measures only).

Report (per explainer × measure): the mean of s[k, n] over members k and inputs n, its 95 %
interval over inputs (mean ± 1.96 s/√N of the per-input means over members) and, for two
members or more, over members (of the per-member means over inputs), and the NaN count
(constant maps; excluded from the means; a map with NaN or ±inf is refused, naming the side, the
member, the explainer and the input); an interval of fewer than 2 values is null. Each
side's training accuracy (on its own training split as served, permuted labels for the
permuted side) and test accuracy, per member and their mean. Written:
``data_randomisation.json``, ``data_randomisation.csv``, ``similarity.png`` (bars with
intervals) and, for images, ``maps.png`` (``n_grid_images`` test images; per explainer the
true-label model's and the permuted-label model's map of member 0: the absolute value of the
channel-summed map), and a W&B run (``log_to``; ``evaluators.reports.wandb_log``).
"""

from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from evaluators.inputs.counts import counted
from evaluators.protocols.registry import PROTOCOLS
from foundation.finite import check_finite
from evaluators.inputs.image_members import load_image_members
from evaluators.inputs.runs import load_run
from evaluators.maps import EXPLAINERS, explain
from evaluators.metrics.similarity import checked_measures, similarity
from evaluators.reports.map_grid import plot_map_grid
from evaluators.reports.wandb_log import ReportLogging, log_report, table_scalars
from foundation.devices import resolve_device
from foundation.errors import InputError
from foundation.modality import IMAGES, modality_of
from foundation.files import atomic_open, pyplot, save_figure, write_json
from lightning_modules.population_io import IMAGE_KINDS, load_population, population_datamodule, read_population_file

Z95 = 1.959963984540054
N_INPUTS = 64


@dataclass
class DataRandomisationConfig(ReportLogging):
    """The options of ``evaluate.py data_randomisation`` (the module's docstring)."""

    true_labels: str  # the side trained on the true labels ("true" itself reads as a boolean in YAML)
    permuted_labels: str
    explainers: list[str] = field(default_factory=lambda: ["saliency", "integrated_gradients", "smoothgrad",
                                                           "guided_backprop", "gradcam", "deeplift",
                                                           "input_x_gradient"])  # fmt: skip
    measures: list[str] | None = None  # null: every measure the inputs take
    explainer_options: dict = field(default_factory=dict)  # explainer -> options, e.g. {smoothgrad: {nt_samples: 20}}
    n_inputs: int = N_INPUTS
    members: int | None = None  # null: every pair
    n_grid_images: int = 4
    seed: int = 0
    device: str = "auto"
    data_dir: str | None = None
    output_dir: str = "runs/data_randomisation"

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = [e for e in self.explainers if e not in EXPLAINERS]
        if unknown or not self.explainers:
            raise InputError(f"option explainers={self.explainers}: unknown {unknown}; expected some of "
                             f"{sorted(EXPLAINERS)}")  # fmt: skip
        if self.measures:
            checked_measures(self.measures)
        extra = sorted(set(self.explainer_options) - set(self.explainers))
        if extra or not all(isinstance(v, dict) for v in self.explainer_options.values()):
            raise InputError(f"option explainer_options: expected a mapping of explainers of option explainers to "
                             f"their options; got {self.explainer_options} (not listed: {extra})")  # fmt: skip
        for option in ("n_inputs", "n_grid_images") + (("members",) if self.members is not None else ()):
            if getattr(self, option) < 1:
                raise InputError(f"option {option}={getattr(self, option)}; expected a positive integer")
        resolve_device(self.device)
        for option in ("true_labels", "permuted_labels"):
            if not Path(getattr(self, option)).exists():
                raise InputError(f"option {option}={getattr(self, option)!r}: no such file or folder; expected a "
                                 "train.py run folder, a population file or a folder of image runs")  # fmt: skip

    def report_name(self) -> str:
        return "data_randomisation"


def load_side(source: str, device: torch.device, data_dir: str | None) -> tuple[list[torch.nn.Module], object]:
    """The models (eval mode, on ``device``) and datamodule of one side: a population file (or a
    run folder holding ``population.pt``), a ``train.py`` run folder of one model, or a folder of
    image runs."""
    path = Path(source)
    if path.is_dir() and (path / "population.pt").is_file():
        path = path / "population.pt"
    if path.is_file():
        if read_population_file(path, mmap=True)["class"] in IMAGE_KINDS:
            members, _, data = load_image_members(path, device, data_dir)
            return members.members, data
        population, payload = load_population(path, kind="PopulationMLP")
        data = population_datamodule(payload, data_dir)
        return [population.member(i).to(device).eval() for i in range(population.size)], data
    if (path / "config.yaml").is_file():
        model, data, _ = load_run(path, data_location=data_dir, where=f"{source}")
        return [model.to(device).eval()], data
    members, _, data = load_image_members(path, device, data_dir)
    return members.members, data


@torch.no_grad()
def accuracy(model: torch.nn.Module, loader, device: torch.device) -> float:
    """The share of ``loader``'s inputs whose largest logit is their label."""
    correct = total = 0
    for x, y in loader:
        correct += (model(x.to(device)).argmax(dim=-1) == y.to(device)).sum().item()
        total += len(y)
    return correct / total


def test_inputs(data, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``n`` test rows, or ``n`` test images evenly spaced through the test split, and their labels."""
    data.setup("test")
    return data.probe(n, "test")


def interval(values: torch.Tensor) -> float | None:
    """Half-width of the 95 % interval of the mean of ``values`` (normal approximation); None for fewer than 2."""
    return Z95 * values.std().item() / math.sqrt(len(values)) if len(values) > 1 else None


def summarise(scores: torch.Tensor) -> dict:
    """Mean of s (K, N) over its finite values, the 95 % interval over inputs and over members, NaN count."""
    finite = scores.isfinite()
    weights = finite.double()
    zeroed = torch.where(finite, scores, 0.0)
    per_input = zeroed.sum(0) / weights.sum(0)
    per_member = zeroed.sum(1) / weights.sum(1)
    per_input, per_member = per_input[per_input.isfinite()], per_member[per_member.isfinite()]
    return {"mean": (zeroed.sum() / weights.sum()).item(), "ci95_inputs": interval(per_input),
            "ci95_members": interval(per_member), "nan": int((~finite).sum()), "pairs": int(scores.numel())}


def evaluate_data_randomisation(cfg: DataRandomisationConfig, run_dir: Path | None = None) -> dict:
    device = resolve_device(cfg.device)
    started = time.perf_counter()
    sides = {name: load_side(getattr(cfg, f"{name}_labels"), device, cfg.data_dir) for name in ("true", "permuted")}
    data = sides["true"][1]
    modality = modality_of(data)
    x, y = test_inputs(data, cfg.n_inputs)
    counted("n_inputs", cfg.n_inputs, len(x), "test split", modality.noun, N_INPUTS)
    x_other, y_other = test_inputs(sides["permuted"][1], cfg.n_inputs)
    if x_other.shape != x.shape or not torch.equal(x_other, x) or not torch.equal(y_other, y):
        raise InputError(f"options true_labels={cfg.true_labels!r} and permuted_labels={cfg.permuted_labels!r} serve "
                         "different test inputs; expected two runs of the same data (the same test split and "
                         "preprocessing) that differ in data.permute_labels")  # fmt: skip
    measures = checked_measures(cfg.measures or None, modality)
    for explainer in cfg.explainers:
        if not EXPLAINERS[explainer].applies_to(modality.name):
            takes = " or ".join(EXPLAINERS[explainer].modalities)
            raise InputError(f"explainer {explainer!r} takes {takes}; the data serves {modality.noun}")
    pairs = min(len(sides["true"][0]), len(sides["permuted"][0]), cfg.members or 2**62)
    x, y = x.to(device), y.to(device)
    accuracies = {}
    for name, (models, side_data) in sides.items():
        side_data.setup("fit")
        accuracies[name] = {
            "permute_labels": getattr(side_data, "permute_labels", None),
            "train_acc": [accuracy(m, side_data.eval_dataloader("train"), device) for m in models[:pairs]],
            "test_acc": [accuracy(m, side_data.eval_dataloader("test"), device) for m in models[:pairs]],
        }
        for key in ("train_acc", "test_acc"):
            accuracies[name][f"{key}_mean"] = sum(accuracies[name][key]) / pairs
    maps, scores, seconds = {}, {}, {}
    for explainer in cfg.explainers:
        start = time.perf_counter()
        options = cfg.explainer_options.get(explainer, {})
        per_side = {}
        for name, (models, _) in sides.items():
            side = [explain(m, x, explainer, target=y, seed=cfg.seed, **options).detach() for m in models[:pairs]]
            for k, member_maps in enumerate(side):
                check_finite(member_maps, f"{name} labels' member {k}: explainer {explainer!r}", "map")
            per_side[name] = [modality.reduce(m, "sum") for m in side]  # images: summed over channels (N, H, W)
        maps[explainer] = {name: side[0] for name, side in per_side.items()}
        for measure in measures:
            s = torch.stack([similarity(a, b, measure, (f"{explainer} (true labels)", f"{explainer} (permuted)"))
                             for a, b in zip(per_side["true"], per_side["permuted"])])  # fmt: skip
            scores[(explainer, measure)] = s.cpu()
        seconds[explainer] = round(time.perf_counter() - start, 2)
    rows = [{"explainer": e, "measure": m, **summarise(s)} for (e, m), s in scores.items()]
    return {"config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}, "images": modality is IMAGES,
            "pairs": pairs,
            "n_inputs": len(x), "measures": measures, "accuracy": accuracies, "rows": rows, "seconds": seconds,
            "total_seconds": round(time.perf_counter() - started, 1), "_x": x.cpu(), "_y": y.cpu(),
            "_maps": maps, "_normalization": getattr(data, "normalization", None),
            "_classes": getattr(data, "classes", None)}  # fmt: skip


def write_data_randomisation_report(summary: dict, run_dir: Path) -> None:
    """``data_randomisation.json`` and ``.csv``, ``similarity.png`` and, for images, ``maps.png``;
    the W&B run (the rows, figures and scalars, in the true-label population's group)."""
    public = {k: v for k, v in summary.items() if not k.startswith("_")}
    write_json(run_dir / "data_randomisation.json", public)
    with atomic_open(run_dir / "data_randomisation.csv", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(summary["rows"][0]))
        writer.writeheader()
        writer.writerows(summary["rows"])
    pngs = [plot_similarity(summary, run_dir / "similarity.png")]
    if summary["images"]:
        n = min(summary["config"]["n_grid_images"], len(summary["_x"]))
        grid = {f"{e}\n{side} labels": m[side][:n].abs().cpu() for e, m in summary["_maps"].items() for side in m}
        titles = [summary["_classes"][int(c)] for c in summary["_y"][:n]] if summary["_classes"] else None
        pngs.append(plot_map_grid(summary["_x"][:n], grid, summary["_normalization"], run_dir / "maps.png", titles,
                                  cell=1.2))  # fmt: skip
    config = summary["config"]
    columns = list(summary["rows"][0])
    table = [[r[c] for c in columns] for r in summary["rows"]]
    log_report(config["log_to"], run_dir, "data_randomisation", config, {"data_randomisation": (columns, table)},
               {p.stem: p for p in pngs}, table_scalars("data_randomisation", columns, table, 2),
               [config["true_labels"], config["permuted_labels"]])  # fmt: skip
    print(format_table(summary))


def plot_similarity(summary: dict, path: Path) -> Path:
    """Bars: per explainer, each measure's mean similarity with its 95 % interval over inputs."""
    plt = pyplot()

    explainers = list(dict.fromkeys(r["explainer"] for r in summary["rows"]))
    measures = summary["measures"]
    width = 0.8 / len(measures)
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(explainers), 3.6), dpi=110)
    for j, measure in enumerate(measures):
        rows = [next(r for r in summary["rows"] if r["explainer"] == e and r["measure"] == measure)
                for e in explainers]  # fmt: skip
        ax.bar([i + j * width for i in range(len(explainers))], [r["mean"] for r in rows], width,
               yerr=[r["ci95_inputs"] or 0 for r in rows], label=measure)  # fmt: skip
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(explainers))], explainers, rotation=30, ha="right",
                  fontsize=8)  # fmt: skip
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set(ylabel="similarity: true vs permuted labels", title="data randomisation (Adebayo et al. §3.2)")
    ax.legend(fontsize=7)
    save_figure(fig, path)
    return path


def format_table(summary: dict) -> str:
    """The rows as text, and both sides' accuracies."""
    lines = []
    for name, acc in summary["accuracy"].items():
        lines.append(f"{name} labels (permute_labels={acc['permute_labels']}): training accuracy "
                     f"{100 * acc['train_acc_mean']:.1f} %, test accuracy {100 * acc['test_acc_mean']:.1f} % "
                     f"({summary['pairs']} model(s))")  # fmt: skip
    lines.append(f"{'explainer':<22}{'measure':<14}{'mean':>8}{'±inputs':>9}{'±members':>10}{'NaN':>5}")
    for r in summary["rows"]:
        ci = {k: "-" if r[k] is None else f"{r[k]:.3f}" for k in ("ci95_inputs", "ci95_members")}
        lines.append(f"{r['explainer']:<22}{r['measure']:<14}{r['mean']:>8.3f}{ci['ci95_inputs']:>9}"
                     f"{ci['ci95_members']:>10}{r['nan']:>5}")  # fmt: skip
    return "\n".join(lines)


PROTOCOLS.add("data_randomisation", evaluate_data_randomisation,
              help="data randomisation: maps of models trained on true vs permuted labels (Adebayo et al. §3.2)",
              config=DataRandomisationConfig, write=write_data_randomisation_report,
              report="data_randomisation.json", source="pair", choices={"explainers": (EXPLAINERS, {})})  # fmt: skip
