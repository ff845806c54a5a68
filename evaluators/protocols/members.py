"""A one-model protocol (aggregation, optimised) run on every member of a population, and
its seed-level report (docs/seed_robustness.md).

Each member is evaluated as the protocol evaluates one model, into ``members/<name>/`` of
the report folder (the protocol's own caches there), and its table of means over inputs is
saved as ``members/<name>/member.json`` when it is finished: a resumed run reads a finished
member from that file and never evaluates it again. Every member sees the same inputs and
the same seeds, so the members differ only by their training seed.

The report: per member and row, each metric's mean and its interval over inputs
(``members.csv``); per row the seed-level mean with its 95 % t-interval over members beside
the members' mean interval over inputs (``seed_table.csv``); per table (a group of rows ×
one metric) the ranking stability (``robustness.csv``: ``evaluators.metrics.seed_robustness``);
per finding of the protocol the share of members where it holds; all of it in ``table.md``.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch

from evaluators.inputs.members import Members, load_members, model_options, population_path
from evaluators.inputs.runs import load_run
from evaluators.metrics.seed_robustness import finding_survival, member_interval, ranking_stability
from evaluators.reports.wandb_log import log_report, table_scalars
from foundation.devices import resolve_device
from foundation.errors import InputError
from foundation.files import write_json, atomic_open, write_text

MEMBER_FILE = "member.json"


def evaluate_members(run_dir: Path, members: Members, evaluate_one: Callable[[object, object, Path], dict]) -> dict:
    """``{name: evaluate_one(model, data, run_dir/members/<name>)}`` in member order; a member
    whose ``member.json`` exists is read from it (a finished member is not evaluated again). An
    ``InputError`` of one member's evaluation (maps with NaN or ±inf, …) names the member."""
    out = {}
    for k, (name, model) in enumerate(zip(members.names, members.models)):
        folder = run_dir / "members" / name
        file = folder / MEMBER_FILE
        print(f"member {k + 1}/{len(members.names)}: {name}", flush=True)
        if file.is_file():
            out[name] = json.loads(file.read_text())
            continue
        try:
            summary = evaluate_one(model, members.data, folder)
        except InputError as err:
            raise InputError(f"population member {k} ({name}): {err}") from err
        folder.mkdir(parents=True, exist_ok=True)
        write_json(file, summary)
        out[name] = summary
    return out


def evaluate_run(cfg, run_dir: Path, evaluate_model: Callable[[object, object, object, Path], dict],
                 keys: tuple[str, ...], summarise: Callable[[dict[str, dict]], dict]) -> dict:  # fmt: skip
    """The report of a one-model protocol on ``cfg.run``: ``evaluate_model(cfg, model, data, run_dir)``
    of the one model (on ``cfg.device``, in eval mode), or, for a population, ``summarise`` of every
    member's summary (``evaluate_model``'s ``keys``, in ``members/<name>/``: ``evaluate_members``)."""
    device = resolve_device(cfg.device)
    population = population_path(cfg.run)
    if population is not None:
        members = load_members(population, device, cfg.data_dir, cfg.kind, model_options(cfg))
        return summarise(evaluate_members(run_dir, members, lambda model, data, folder: {
            key: value for key, value in evaluate_model(cfg, model, data, folder).items() if key in keys}))
    model, data, _ = load_run(Path(cfg.run), cfg.checkpoint, data_location=cfg.data_dir, kind=cfg.kind,
                              where=f"option run={cfg.run!r}", **model_options(cfg))
    return evaluate_model(cfg, model.to(device).eval(), data, run_dir)


def seed_rows(member_rows: dict[str, dict], metrics: list[str], spread: str) -> dict:
    """Per row and metric: the seed-level mean and its 95 % t-interval over members
    (``ci95``), and the members' mean ``spread`` over inputs (``inputs_<spread>``)."""
    names = list(member_rows)
    first = member_rows[names[0]]
    out = {}
    for row in first:
        out[row] = {}
        for metric in metrics:
            entries = [member_rows[n][row][metric] for n in names]
            seed = member_interval(torch.tensor([e["mean"] for e in entries], dtype=torch.float64),
                                   f"row {row}, metric {metric} (members {names})")  # fmt: skip
            spreads = torch.tensor([e[spread] for e in entries], dtype=torch.float64)
            out[row][metric] = {"mean": seed["mean"], "ci95": seed["ci95"], f"inputs_{spread}": spreads.mean().item()}
    return out


def robustness(member_rows: dict[str, dict], groups: dict[str, list[str]], metrics: dict[str, bool]) -> list[dict]:
    """Per table (``groups``: name -> its rows, at least 2) and metric (name -> higher is
    better): ``ranking_stability`` of the members' means, and the most frequent best row
    with the share of members naming it."""
    names = list(member_rows)
    out = []
    for group, rows in groups.items():
        if len(rows) < 2:
            continue
        for metric, higher in metrics.items():
            scores = torch.tensor([[member_rows[n][r][metric]["mean"] for r in rows] for n in names],
                                  dtype=torch.float64)  # fmt: skip
            stability = ranking_stability(scores, higher, f"table {group}, metric {metric}")
            best = [", ".join(rows[i] for i in b) for b in stability.pop("best")]
            mode, count = Counter(best).most_common(1)[0]
            out.append({"table": group, "metric": metric, **stability, "best": mode, "best_share": count / len(names),
                        "n_members": len(names), "best_per_member": dict(zip(names, best))})  # fmt: skip
    return out


def population_summary(config: dict, member_summaries: dict[str, dict], metrics: dict[str, bool], spread: str,
                       groups: dict[str, list[str]], findings: Callable[[dict], dict]) -> dict:  # fmt: skip
    """The report of a population run: the members' tables, the seed-level table, the
    ranking stability of ``groups`` and the survival of each member's ``findings(summary)``."""
    member_rows = {name: s["rows"] for name, s in member_summaries.items()}
    return {"config": config, "members": list(member_summaries), "spread": spread,
            "n_inputs": next(iter(member_summaries.values()))["n_inputs"], "member_rows": member_rows,
            "rows": seed_rows(member_rows, list(metrics), spread),
            "robustness": robustness(member_rows, groups, metrics),
            "findings": finding_survival([findings(s) for s in member_summaries.values()]),
            "member_findings": {name: s["findings"] for name, s in member_summaries.items()}}  # fmt: skip


def _number(value: float) -> str:
    return f"{value:.4f}"


def markdown(summary: dict, labels: dict[str, str]) -> str:
    """The seed-level table (``labels``: metric -> column title), the ranking stability and the findings' survival."""
    spread = summary["spread"]
    k = len(summary["members"])
    lines = [f"Seed-level mean ± 95 % t-interval over {k} members; in brackets the members' mean {spread} over "
             f"{summary['n_inputs']} inputs.", "", f"| row | {' | '.join(labels.values())} |",
             "|---" * (1 + len(labels)) + "|"]  # fmt: skip
    for row, values in summary["rows"].items():
        cells = [f"{_number(v['mean'])} ± {_number(v['ci95'])} ({_number(v[f'inputs_{spread}'])})"
                 for v in (values[m] for m in labels)]  # fmt: skip
        lines.append(f"| {row} | {' | '.join(cells)} |")
    lines += ["", "Ranking stability: Kendall's τ_b between two members' rankings of a table's rows (mean and "
              "smallest over member pairs), the share of member pairs with the same best row, and the most "
              "frequent best row (share of members).", "",
              "| table | metric | τ mean | τ min | pairs agreeing on the best | most frequent best (members) |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for r in summary["robustness"]:
        lines.append(f"| {r['table']} | {labels.get(r['metric'], r['metric'])} | {r['kendall_tau']:.3f} | "
                     f"{r['kendall_tau_min']:.3f} | {r['best_agreement']:.2f} of {r['n_pairs']} | {r['best']} "
                     f"({r['best_share']:.2f}) |")  # fmt: skip
    lines += ["", "The protocol's findings on each member: the share of members where a claim holds; for a named "
              "row, the most frequent one and its share.", "", "| finding | share of members | most frequent |",
              "|---|---|---|"]  # fmt: skip
    for key, f in summary["findings"].items():
        lines.append(f"| {key} | {f['share']:.2f} | {f.get('mode', '—')} |")
    return "\n".join(lines) + "\n"


def write_population_report(summary: dict, out_dir: Path, name: str, labels: dict[str, str]) -> None:
    """``members.csv``, ``seed_table.csv``, ``robustness.csv``, ``table.md``, W&B, and last
    ``<name>.json`` (its presence marks a finished run)."""
    spread = summary["spread"]
    metrics = list(labels)
    with atomic_open(out_dir / "members.csv", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["member", "row", *[f"{m}{s}" for m in metrics for s in ("", f"_{spread}")]])
        for member, rows in summary["member_rows"].items():
            for row, v in rows.items():
                writer.writerow([member, row, *[v[m][k] for m in metrics for k in ("mean", spread)]])
    seed_columns = ["row", *[f"{m}{s}" for m in metrics for s in ("", "_ci95_members", f"_inputs_{spread}")]]
    seed_data = [[row, *[v[m][k] for m in metrics for k in ("mean", "ci95", f"inputs_{spread}")]]
                 for row, v in summary["rows"].items()]  # fmt: skip
    with atomic_open(out_dir / "seed_table.csv", newline="") as f:
        csv.writer(f).writerows([seed_columns, *seed_data])
    columns = ["table", "metric", "kendall_tau", "kendall_tau_min", "best_agreement", "n_pairs", "best", "best_share",
               "n_members"]  # fmt: skip
    data = [[r[c] for c in columns] for r in summary["robustness"]]
    with atomic_open(out_dir / "robustness.csv", newline="") as f:
        csv.writer(f).writerows([columns, *data])
    text = markdown(summary, labels)
    write_text(out_dir / "table.md", text)
    log_report(summary["config"]["log_to"], out_dir, name, summary["config"],
               {"seed_table": (seed_columns, seed_data), "robustness": (columns, data)},
               scalars={**table_scalars("seed_table", seed_columns, seed_data, 1),
                        **table_scalars("robustness", columns, data, 2)},
               population=summary["config"]["run"])  # fmt: skip
    write_json(out_dir / f"{name}.json", summary)
    print(text)
