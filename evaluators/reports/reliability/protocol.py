"""``evaluate.py report``: can I trust these explanations? One pass over a population
of table or image classifiers.

``evaluate_report(cfg, run_dir)`` loads the population, its inputs and each member's test
accuracy (``inputs.report_inputs``), and for each explainer computes every member's maps once
(``maps.explainer_unit``, kept in ``<run>/maps/<explainer>.pt``: an interrupted report resumed
with ``--resume <run>`` computes only the explainers not yet finished). The three sections
(``sections``) and the one-screen summary (``summary``) are computed from those maps; with
option ``permute_labels`` the permuted-label twin must be trained in ``<run>/permuted/`` first
(``twin``: ``evaluate.py report`` does it).
``write_report(report, run_dir)`` writes the figures (PNG), ``report.html`` (``html``), the
W&B run (``wandb_log.log_report``: scalars, tables and figures, grouped by population) and last
``report.json`` (every number; its presence marks a finished report).
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

from evaluators.metrics.agreement import default_k
from evaluators.reports.reliability.assemble import report_sections
from evaluators.reports.reliability.config import ReportConfig
from evaluators.reports.reliability.html import figures, write_html
from evaluators.reports.reliability.inputs import report_inputs
from evaluators.reports.reliability.maps import explainer_unit
from evaluators.reports.reliability.permuted import permuted_source
from evaluators.reports.reliability.summary import recommendation, summary_rows, summary_text
from evaluators.reports.reliability.verdict import equally_good
from evaluators.reports.wandb_log import log_report, population_link
from foundation.errors import InputError
from foundation.files import write_json, write_text

REPORT = "report.json"


def evaluate_report(cfg: ReportConfig, run_dir: Path) -> dict:
    """The report of ``cfg``'s population (the module docstring), every number in one mapping."""
    start = time.perf_counter()
    permuted = permuted_source(cfg, run_dir)  # a twin not trained yet is refused before any work
    given = report_inputs(cfg)
    x = given.x
    units_per_map = math.prod(given.modality.unit_shape(x))  # pixels of an image's map, or features
    k = cfg.k or default_k(units_per_map)
    if k > units_per_map:
        raise InputError(f"option k={k}: the maps have {units_per_map} {given.modality.unit}s; "
                         f"expected k <= {units_per_map}")  # fmt: skip
    units = {}
    for i, method in enumerate(cfg.explainers):
        print(f"explainer {i + 1}/{len(cfg.explainers)}: {method} ({time.perf_counter() - start:.0f} s elapsed)",
              flush=True)  # its unit prints its own steps with the time left (maps.explainer_unit)
        units[method] = explainer_unit(run_dir / "maps", given.members, x, given.target, given.n_classes, method,
                                       cfg.options.get(method, {}), cfg.seed, cfg.measure, cfg.faithfulness,
                                       given.metric_options, cfg.cascade_steps)  # fmt: skip
    accuracies, members = given.accuracies, given.members
    kept, filtered = equally_good(accuracies, cfg.accuracy_tolerance)
    sections, candidates = report_sections(cfg, given, units, k, kept, filtered, run_dir / "maps", permuted)
    report = {"config": dataclasses.asdict(cfg),
              "population": {"dataset": cfg.report_name(), "n_members": len(members), "n_points": len(x),
                             "inputs": given.modality.name, "input_shape": list(x.shape[1:]),
                             "map_units": units_per_map, "n_classes": given.n_classes, "names": given.names,
                             "accuracy": accuracies.tolist(), "accuracy_mean": accuracies.mean().item(),
                             "group": population_link(cfg.population).group},
              "sections": sections,
              "summary": {"rows": summary_rows(sections),
                          "recommendation": recommendation(candidates, sections, cfg.n_bootstrap,
                                                           cfg.seed)}}  # fmt: skip
    report["summary"]["text"] = summary_text(report)
    report["seconds"] = time.perf_counter() - start
    return report


def verdict_scalars(prefix: str, verdict: dict | None) -> dict[str, float]:
    """A calibrated verdict's δ (seed-level mean), its 95 % half-width and whether it passed (1/0),
    as ``<prefix>delta``, ``<prefix>delta_ci95`` and ``<prefix>passed``; none for no verdict."""
    if verdict is None:
        return {}
    return {f"{prefix}delta": verdict["delta"]["mean"], f"{prefix}delta_ci95": verdict["delta"]["ci95"],
            f"{prefix}passed": float(verdict["passed"])}  # fmt: skip


def scalars(report: dict) -> dict[str, float]:
    """The numbers a dashboard charts, per explainer and aggregate ``<section>/<candidate>/<number>``:
    agreement (SA, SSA, CDC@k, Watson's C; ``ensembles_<metric>``: the average ensembles'),
    sanity (the model randomisation's ``delta``, ``delta_ci95``, ``passed``; the data
    randomisation's as ``data_delta``, ... when it ran) and faithfulness (each metric's mean and
    ``<metric>_ci95``)."""
    sections = report["sections"]
    data = sections["sanity"]["data_randomisation"]
    ensembles = sections["agreement"]["ensembles"]
    out = {}
    for name, entry in sections["agreement"]["explainers"].items():
        for metric, value in entry.items():
            out[f"agreement/{name}/{metric}"] = value["mean"]
        for metric, value in (ensembles["explainers"].get(name, {}) if ensembles["available"] else {}).items():
            out[f"agreement/{name}/ensembles_{metric}"] = value["mean"]
        out |= verdict_scalars(f"sanity/{name}/", sections["sanity"]["explainers"][name]["verdict"])
        out |= verdict_scalars(f"sanity/{name}/data_", data["explainers"][name] if data else None)
    aggregates = sections["faithfulness"]["aggregates"]
    for name, entry in (aggregates["aggregates"] if aggregates["available"] else {}).items():
        for metric, value in entry["agreement"].items():
            out[f"agreement/{name}/{metric}"] = value["mean"]
        out |= verdict_scalars(f"sanity/{name}/", entry["verdict"])
        out |= verdict_scalars(f"sanity/{name}/data_", entry["data_randomisation"])
    for metric, entry in sections["faithfulness"]["by_metric"].items():
        for name, value in entry["explainers"].items():
            out[f"faithfulness/{name}/{metric}"] = value["mean"]
            out[f"faithfulness/{name}/{metric}_ci95"] = value["ci95"]
    return out


def write_report(report: dict, run_dir: Path) -> None:
    """Figures, ``summary.txt``, ``report.html``, the W&B run and last ``report.json``."""
    images = figures(report, run_dir)
    write_text(run_dir / "summary.txt", report["summary"]["text"])
    write_html(report, images, run_dir / "report.html")
    columns = ["explainer", "agree", "sane", "faithful"]
    table = [r["cells"] for r in report["summary"]["rows"]]
    figures_logged = {f"figure/{name}": path for name, path in images.items()}
    log_report(report["config"]["log_to"], run_dir, "report", report["config"], {"summary": (columns, table)},
               figures_logged, scalars(report), report["config"]["population"])  # fmt: skip
    write_json(run_dir / REPORT, report)
    print(report["summary"]["text"])
