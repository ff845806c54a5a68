"""The model-randomisation sanity check (``evaluators.protocols.sanity``) run on every member
of a population, and its seed-level report (docs/sanity_checks.md, "Over a population").

Each member is evaluated as one run is, into ``members/<name>/`` of the report folder
(``evaluators.protocols.members.evaluate_members``: a finished member is read from its
``member.json`` and never evaluated again; an unfinished one resumes from its own
``similarities/`` caches). Every member sees the same inputs and seeds.

The report, per mode × stage × explainer × measure (and per explainer × measure of the
random-logit test): the seed-level mean of the members' means over inputs with its 95 %
t-interval over members (``evaluators.metrics.seed_robustness.member_interval``), beside the
members' mean 95 % half-width over inputs (``inputs_ci95``). A member whose mean is undefined
(no input with a defined similarity) is left out of that entry and counted (``n_members``);
with fewer than 2 defined members the interval is null. The stability of the conclusion
"which explainers stay similar", per mode and measure at the last stage (every layer
randomised in cascading mode): ``evaluators.protocols.members.robustness`` of the members'
rankings of the explainers by similarity (the "best" explainer is the most similar one):
mean and smallest Kendall τ_b over member pairs, the share of member pairs that agree on the
most similar explainer, and the most frequent one with the share of members naming it; a
measure where some member's mean is undefined is not ranked (listed under ``unranked``).
"""

from __future__ import annotations

import csv
from dataclasses import asdict
from pathlib import Path

import torch

from evaluators.inputs.members import Members
from evaluators.metrics.seed_robustness import member_interval
from evaluators.protocols.members import evaluate_members, robustness
from evaluators.reports.sanity_figures import plot_similarity_curves, stage_labels
from evaluators.reports.wandb_log import log_report, table_scalars
from foundation.errors import InputError
from foundation.files import atomic_open, write_json, write_text

# in member.json
KEPT = ("n_inputs", "measures", "stages", "layer_types", "similarity", "random_logit", "efficient_mprt", "seconds")


def evaluate_population(cfg, members: Members, run_dir: Path, evaluate_model) -> dict:
    """Every member's report (``evaluate_model(cfg, model, data, folder)``, its ``KEPT`` keys)
    and their seed-level report."""
    summaries = evaluate_members(run_dir, members, lambda model, data, folder: {
        key: value for key, value in evaluate_model(cfg, model, data, folder).items() if key in KEPT})  # fmt: skip
    return population_summary(asdict(cfg), summaries)


def seed_entry(entries: list[dict], what: str) -> dict:
    """Members' entries (``mean``, ``ci95`` over inputs; ``mean`` None where undefined) ->
    the seed-level ``mean``, ``ci95`` (t-interval over the defined members), ``n_members``
    and ``inputs_ci95`` (the members' mean half-width over inputs; None if none has one)."""
    means = [e["mean"] for e in entries if e["mean"] is not None]
    spreads = [e["ci95"] for e in entries if e["ci95"] is not None]
    if len(means) >= 2:
        seed = member_interval(torch.tensor(means, dtype=torch.float64), what)
        mean, ci95 = seed["mean"], seed["ci95"]
    else:
        mean, ci95 = (means[0] if means else None), None
    inputs = torch.tensor(spreads, dtype=torch.float64).mean().item() if spreads else None
    return {"mean": mean, "ci95": ci95, "n_members": len(means), "inputs_ci95": inputs}


def check_members(summaries: dict[str, dict], where: str) -> None:
    """Every member has the first one's stages (layers) and measures, and saw as many inputs."""
    names = list(summaries)
    first = summaries[names[0]]
    for name in names[1:]:
        for key in ("stages", "measures", "n_inputs"):
            if summaries[name][key] != first[key]:
                raise InputError(f"{where}: member {name!r} has {key} {summaries[name][key]}, member {names[0]!r} "
                                 f"{first[key]}; expected members of one architecture on the same inputs")


def population_summary(config: dict, summaries: dict[str, dict]) -> dict:
    """The seed-level report of the members' ``summaries`` (the module's docstring)."""
    check_members(summaries, f"option run={config['run']!r}")
    names = list(summaries)
    first = summaries[names[0]]
    measures, stages = first["measures"], first["stages"]
    explainers = list(config["explainers"])
    similarity = {mode: {e: {m: [{"stage": stage, **seed_entry(
        [summaries[n]["similarity"][mode][e][m][s] for n in names], f"{mode}, stage {stage}, {e}, {m}")}
        for s, stage in enumerate(stages[mode])] for m in measures} for e in explainers}
        for mode in stages}  # fmt: skip
    logit = {e: {m: seed_entry([summaries[n]["random_logit"][e][m] for n in names], f"random logit, {e}, {m}")
                 for m in measures} for e in first["random_logit"]}  # fmt: skip
    efficient = {e: {key: seed_entry([summaries[n]["efficient_mprt"][e][key] for n in names],
                                     f"efficient MPRT, {e}, {key}") for key in first["efficient_mprt"][e]}
                 for e in first.get("efficient_mprt", {})}  # fmt: skip
    stability, unranked = [], []
    for mode, mode_stages in stages.items():
        table = f"{mode}: {mode_stages[-1]}"
        for m in measures:
            last = {n: {e: {m: summaries[n]["similarity"][mode][e][m][-1]} for e in explainers} for n in names}
            undefined = [f"{n}/{e}" for n in names for e in explainers if last[n][e][m]["mean"] is None]
            if undefined:
                unranked.append({"table": table, "metric": m, "undefined": undefined})
                continue
            stability += [{"mode": mode, **r} for r in robustness(last, {table: explainers}, {m: True})]
    return {"config": config, "members": names, "n_inputs": first["n_inputs"], "measures": measures,
            "stages": stages, "layer_types": first["layer_types"],
            "member_similarity": {n: s["similarity"] for n, s in summaries.items()},
            "member_random_logit": {n: s["random_logit"] for n, s in summaries.items()},
            "similarity": similarity, "random_logit": logit, "efficient_mprt": efficient, "stability": stability,
            "unranked": unranked}  # fmt: skip


# --- report ---------------------------------------------------------------------------
def _cell(entry: dict, k: int) -> str:
    """``mean ± ci95 [inputs ± inputs_ci95]``, with ``(k=...)`` where fewer than all ``k`` members were defined."""
    if entry["mean"] is None:
        return "undefined"
    text = f"{entry['mean']:.3f}" + (f" ± {entry['ci95']:.3f}" if entry["ci95"] is not None else "")
    text += f" [±{entry['inputs_ci95']:.3f}]" if entry["inputs_ci95"] is not None else ""
    return text + (f" (k={entry['n_members']})" if entry["n_members"] != k else "")


def markdown(summary: dict) -> str:
    """Per mode and measure: explainers × stages; the random-logit scores; the stability."""
    k, n = len(summary["members"]), summary["n_inputs"]
    lines = [f"Seed-level mean ± 95 % t-interval over {k} members ({', '.join(summary['members'])}); in brackets "
             f"the members' mean 95 % half-width over {n} inputs.", ""]  # fmt: skip
    for mode, by_explainer in summary["similarity"].items():
        stages = summary["stages"][mode]
        for measure in summary["measures"]:
            lines += [f"### {mode}: {measure}", "", "| explainer | " + " | ".join(stages) + " |",
                      "|---" * (len(stages) + 1) + "|"]  # fmt: skip
            lines += [f"| {e} | " + " | ".join(_cell(x, k) for x in by_measure[measure]) + " |"
                      for e, by_measure in by_explainer.items()]  # fmt: skip
            lines.append("")
    if summary["random_logit"]:
        lines += ["### random logit", "", "| explainer | " + " | ".join(summary["measures"]) + " |",
                  "|---" * (len(summary["measures"]) + 1) + "|"]  # fmt: skip
        lines += [f"| {e} | " + " | ".join(_cell(by_measure[m], k) for m in summary["measures"]) + " |"
                  for e, by_measure in summary["random_logit"].items()]  # fmt: skip
        lines.append("")
    if summary.get("efficient_mprt"):
        lines += ["### efficient MPRT (higher is better)", "",
                  "| explainer | eMPRT | entropy, original | entropy, randomised |", "|---|---|---|---|"]  # fmt: skip
        lines += [f"| {e} | " + " | ".join(_cell(x, k) for x in entry.values()) + " |"
                  for e, entry in summary["efficient_mprt"].items()]  # fmt: skip
        lines.append("")
    lines += ["### Which explainers stay similar: stability over members", "",
              "Kendall's τ_b between two members' rankings of the explainers by similarity at the last stage (mean "
              "and smallest over member pairs), the share of member pairs naming the same most similar explainer, "
              "and the most frequent one (share of members).", "",
              "| mode: stage | measure | τ mean | τ min | pairs agreeing on the most similar "
              "| most similar (members) |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for r in summary["stability"]:
        lines.append(f"| {r['table']} | {r['metric']} | {r['kendall_tau']:.3f} | {r['kendall_tau_min']:.3f} | "
                     f"{r['best_agreement']:.2f} of {r['n_pairs']} | {r['best']} ({r['best_share']:.2f}) |")
    for r in summary["unranked"]:
        lines.append(f"| {r['table']} | {r['metric']} | not ranked: undefined for {', '.join(r['undefined'])} "
                     "| | | |")
    return "\n".join(lines) + "\n"


SEED_COLUMNS = ["mean", "ci95_members", "n_members", "inputs_ci95"]


def _seed_values(entry: dict) -> list:
    return [entry["mean"], entry["ci95"], entry["n_members"], entry["inputs_ci95"]]


def write_population_report(summary: dict, out_dir: Path) -> None:
    """``members.csv``, ``seed_table.csv``, ``random_logit.csv``, ``stability.csv``,
    ``table.md``, ``similarity_<mode>.png`` (seed-level means, t-interval bands), W&B, and
    last ``sanity.json`` (its presence marks a finished run)."""
    key = ["mode", "stage_index", "stage", "explainer", "measure"]
    with atomic_open(out_dir / "members.csv", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["member", *key, "mean", "ci95", "n"])
        for member, similarity in summary["member_similarity"].items():
            for mode, by_explainer in similarity.items():
                for e, by_measure in by_explainer.items():
                    for m, entries in by_measure.items():
                        writer.writerows([member, mode, s, x["stage"], e, m, x["mean"], x["ci95"], x["n"]]
                                         for s, x in enumerate(entries))  # fmt: skip
    seed_rows = [[mode, s, x["stage"], e, m, *_seed_values(x)] for mode, by_explainer in summary["similarity"].items()
                 for e, by_measure in by_explainer.items() for m, entries in by_measure.items()
                 for s, x in enumerate(entries)]  # fmt: skip
    logit_rows = [[e, m, *_seed_values(x)] for e, by_measure in summary["random_logit"].items()
                  for m, x in by_measure.items()]  # fmt: skip
    efficient_rows = [[e, key, *_seed_values(x)] for e, entry in summary.get("efficient_mprt", {}).items()
                      for key, x in entry.items()]  # fmt: skip
    stability_columns = ["mode", "table", "metric", "kendall_tau", "kendall_tau_min", "best_agreement", "n_pairs",
                         "best", "best_share", "n_members"]  # fmt: skip
    stability_rows = [[r[c] for c in stability_columns] for r in summary["stability"]]
    tables = {"seed_table": ([*key, *SEED_COLUMNS], seed_rows), "random_logit": (["explainer", "measure",
              *SEED_COLUMNS], logit_rows), "efficient_mprt": (["explainer", "number", *SEED_COLUMNS], efficient_rows),
              "stability": (stability_columns, stability_rows)}  # fmt: skip
    for name, (columns, rows) in tables.items():
        if rows or name not in ("random_logit", "efficient_mprt"):
            with atomic_open(out_dir / f"{name}.csv", newline="") as f:
                csv.writer(f).writerows([columns, *rows])
    pngs = []
    for mode, by_explainer in summary["similarity"].items():
        stages = stage_labels(summary, mode)
        title = f"{mode} randomisation, {len(summary['members'])} members (t-interval over members)"
        pngs.append(plot_similarity_curves(by_explainer, stages, out_dir / f"similarity_{mode}.png", title))
    text = markdown(summary)
    write_text(out_dir / "table.md", text)
    n_keys = {"seed_table": len(key), "random_logit": 2, "efficient_mprt": 2, "stability": 3}  # cells naming a row
    scalars = {k: v for name, (columns, rows) in tables.items()
               for k, v in table_scalars(name, columns, rows, n_keys[name]).items()}
    log_report(summary["config"]["log_to"], out_dir, "sanity", summary["config"], tables, {p.stem: p for p in pngs},
               scalars, summary["config"]["run"])  # fmt: skip
    write_json(out_dir / "sanity.json", summary)
    print(text)
