"""The report's figures (PNG) and its one self-contained HTML page.

``figures(report, run_dir)`` draws ``agreement.png`` (SA@k, SSA@k, CDC@k per explainer, mean ±
95 % t-interval over members; open squares: over average ensembles), ``sanity.png`` (left: the
cascading randomisation, each step's mean similarity to the member's own maps with the seed
reference s_seed dashed; right: δ = s_seed − s_rand with its interval, PASS above 0; open
squares: δ of the permuted-label members), ``faithfulness.png`` (each metric's mean ± interval
per explainer and per aggregate, squares) and ``settle.png`` (the share of bootstrap resamples
of n members that name the population's best candidate, against n, with the 95 % line).
``write_html`` embeds them as base64 data URIs in one page with inline CSS, beside the sanity
table and the tables of the ensembles, the data randomisation and the aggregates: no network
access to open it, one column of at most 60 rem (a laptop screen), and a print style that
keeps figures whole."""

from __future__ import annotations

import base64
import html
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from evaluators.reports.reliability.aggregates import PREFIX  # noqa: E402
from evaluators.reports.reliability.sections import AGREEMENTS  # noqa: E402
from evaluators.reports.reliability.verdict import SETTLED  # noqa: E402
from foundation.files import save_figure, write_text  # noqa: E402

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 60rem; margin: 1.5rem auto;
       padding: 0 1rem; color: #1b1b1b; line-height: 1.45; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; border-bottom: 1px solid #ccc; margin-top: 2rem; }
pre.summary { background: #f5f5f5; padding: 0.8rem; white-space: pre-wrap; font-size: 0.85rem; }
table { border-collapse: collapse; font-size: 0.9rem; margin: 0.5rem 0; }
td, th { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; }
.pass { color: #11661b; font-weight: bold; } .fail { color: #a31515; font-weight: bold; }
figure { margin: 1rem 0; } figure img { max-width: 100%; height: auto; display: block; }
figcaption { font-size: 0.85rem; color: #444; }
@media print { body { max-width: none; margin: 0; } figure, table { break-inside: avoid; } }
"""


def _errorbar(ax, labels: list[str], entries: list[dict], offset: float = 0.0, **style) -> None:
    xs = [i + offset for i in range(len(labels))]
    ax.errorbar(xs, [e["mean"] for e in entries], yerr=[e["ci95"] for e in entries], fmt="o", capsize=4, **style)


def agreement_figure(report: dict, path: Path) -> None:
    section = report["sections"]["agreement"]
    names = list(section["explainers"])
    metrics = [m for m in ("sa", "ssa", "cdc_k", "watson_c") if m in section["explainers"][names[0]]]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for j, metric in enumerate(metrics):
        _errorbar(ax, names, [section["explainers"][n][metric] for n in names], 0.15 * (j - len(metrics) / 2),
                  label=f"{metric}@{section['k']}" if metric != "watson_c" else "Watson's C")  # fmt: skip
    ensembles = section["ensembles"]
    for j, metric in enumerate(AGREEMENTS if ensembles["available"] else ()):
        shown = [i for i, n in enumerate(names) if n in ensembles["explainers"]]
        entries = [ensembles["explainers"][names[i]][metric] for i in shown]
        ax.errorbar([i + 0.15 * (j - len(metrics) / 2) + 0.05 for i in shown], [e["mean"] for e in entries],
                    yerr=[e["ci95"] for e in entries], fmt="s", mfc="none", capsize=3,
                    label=f"{metric}@{section['k']}, ensembles of {ensembles['size']}")  # fmt: skip
    ax.set_xticks(range(len(names)), names, rotation=15)
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("agreement between members")
    ax.legend(fontsize=7, ncol=len(metrics))
    save_figure(fig, path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def sanity_figure(report: dict, path: Path) -> None:
    section = report["sections"]["sanity"]
    names = list(section["explainers"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    for n in names:
        entry = section["explainers"][n]
        steps = entry["cascade"]
        line = left.plot(range(1, len(steps) + 1), [s["mean"] for s in steps], marker="o", label=n)[0]
        left.axhline(entry["verdict"]["similarity_seed"]["mean"], color=line.get_color(), linestyle="--", lw=1)
    left.set_xticks(range(1, len(steps) + 1))
    left.set_xlabel("layers randomised (cascading, top first)")
    left.set_ylabel(f"{section['measure']} to the member's maps")
    left.set_title("randomisation (dashed: another seed)", fontsize=9)
    left.legend(fontsize=7)
    verdicts = [section["explainers"][n]["verdict"] for n in names]
    for i, v in enumerate(verdicts):
        right.errorbar([i], [v["delta"]["mean"]], yerr=[v["delta"]["ci95"]], fmt="o", capsize=4,
                       color="#11661b" if v["passed"] else "#a31515")  # fmt: skip
    data = section["data_randomisation"]
    for i, n in enumerate(names if data else ()):
        v = data["explainers"][n]
        right.errorbar([i + 0.2], [v["delta"]["mean"]], yerr=[v["delta"]["ci95"]], fmt="s", mfc="none", capsize=4,
                       color="#11661b" if v["passed"] else "#a31515")  # fmt: skip
    right.axhline(0, color="black", lw=1)
    right.set_xticks(range(len(names)), names, rotation=15)
    right.set_ylabel("δ = s_seed − s_randomised")
    right.set_title("calibrated verdict: pass above 0" + (" (squares: permuted labels)" if data else ""),
                    fontsize=9)
    save_figure(fig, path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def faithfulness_figure(report: dict, path: Path) -> None:
    section = report["sections"]["faithfulness"]
    metrics = section["metrics"]
    names = list(section["by_metric"][metrics[0]]["explainers"])  # explainers, then aggregates
    width = max(4.2, 1.5 + 0.55 * len(names))
    fig, axes = plt.subplots(1, len(metrics), figsize=(width * len(metrics), 3.4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        entry = section["by_metric"][metric]
        for i, n in enumerate(names):
            aggregate = n.startswith(PREFIX)
            ax.errorbar([i], [entry["explainers"][n]["mean"]], yerr=[entry["explainers"][n]["ci95"]],
                        fmt="s" if aggregate else "o", capsize=4, color="#7a3e9d" if aggregate else "#1f77b4")
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        ax.set_title(f"{metric} ({'higher' if entry['higher_is_better'] else 'lower'} is better)", fontsize=9)
    save_figure(fig, path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def settle_figure(report: dict, path: Path) -> None:
    section = report["sections"]["faithfulness"]
    fig, ax = plt.subplots(figsize=(5, 3))
    for metric, entry in section["by_metric"].items():
        if "settle" in entry:
            shares = entry["settle"]["settle_share"]
            ax.plot([int(n) for n in shares], list(shares.values()), marker="o",
                    label=f"{metric}: best {entry['settle']['best']}")  # fmt: skip
    ax.axhline(SETTLED, color="black", linestyle="--", lw=1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("members resampled")
    ax.set_ylabel("share naming the best")
    if ax.get_legend_handles_labels()[0]:  # one explainer: no ranking to settle, an empty plot
        ax.legend(fontsize=7)
    save_figure(fig, path, dpi=110, bbox_inches="tight")
    plt.close(fig)


FIGURES = {"agreement": agreement_figure, "sanity": sanity_figure, "faithfulness": faithfulness_figure,
           "settle": settle_figure}  # fmt: skip
CAPTIONS = {
    "agreement": "Agreement across seeds: SA@k, SSA@k and CDC@k between pairs of members (and Watson et al.'s C), "
                 "mean ± 95 % t-interval over members; open squares: between average ensembles of members.",
    "sanity": "Sanity, calibrated by the seed: left, the similarity of each member's maps after randomising its "
              "layers from the top, against the similarity to another equally good member (dashed); right, the "
              "difference δ with its interval (open squares: the maps of members trained on permuted labels, when "
              "given). An explainer passes when δ's interval lies above 0.",
    "faithfulness": "Faithfulness per explainer and per aggregate of their maps (squares), mean ± 95 % t-interval "
                    "over members.",
    "settle": "How many members settle the ranking: the share of bootstrap resamples of n members that name the "
              "population's best explainer (dashed: 95 %).",
}  # fmt: skip


def figures(report: dict, run_dir: Path) -> dict[str, Path]:
    """Every figure of the report as ``<run_dir>/<name>.png``: name -> path."""
    paths = {}
    for name, draw in FIGURES.items():
        paths[name] = run_dir / f"{name}.png"
        draw(report, paths[name])
    return paths


def _table(head: list[str], rows: list[list[str]]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


def _cell(entry: dict | None) -> str:
    if entry is None:
        return "–"
    word = '<span class="pass">PASS</span>' if entry["passed"] else '<span class="fail">FAIL</span>'
    return f"{word} {entry['delta']['mean']:.3f} ± {entry['delta']['ci95']:.3f}"


def _numbers(*entries: dict) -> list[str]:
    return [f"{n['mean']:.3f} ± {n['ci95']:.3f}" for n in entries]


def _verdict_rows(report: dict) -> list[list[str]]:
    section = report["sections"]["sanity"]
    data = section["data_randomisation"]
    rows = []
    for name, entry in section["explainers"].items():
        v = entry["verdict"]
        rows.append([html.escape(name), _cell(v), *_numbers(v["similarity_seed"], v["similarity_randomised"],
                                                            entry["random_logit"])]
                    + ([_cell(data["explainers"][name]), *_numbers(data["explainers"][name]["similarity_permuted"])]
                       if data else []))  # fmt: skip
    return rows


def additions(report: dict) -> list[str]:
    """The ensembles', the data randomisation's and the aggregates' paragraphs and tables."""
    sections = report["sections"]
    ensembles, data = sections["agreement"]["ensembles"], sections["sanity"]["data_randomisation"]
    aggregates = sections["faithfulness"]["aggregates"]
    parts = ["<h2>Agreement: members and ensembles</h2>"]
    if ensembles["available"]:
        left = f"; not linear, left out: {', '.join(ensembles['left_out'])}" if ensembles["left_out"] else ""
        parts += [f"<p>Average ensembles of {ensembles['size']} members ({ensembles['n_ensembles']} disjoint sets, "
                  f"each ensemble's map the mean of its members' maps{html.escape(left)}), beside single members "
                  "(mean ± 95 % t-interval over members or ensembles).</p>",
                  _table(["explainer", *(f"{m}@{ensembles['k']} members" for m in AGREEMENTS),
                          *(f"{m}@{ensembles['k']} ensembles" for m in AGREEMENTS)],
                         [[html.escape(n), *_numbers(*(sections["agreement"]["explainers"][n][m] for m in AGREEMENTS)),
                           *_numbers(*(e[m] for m in AGREEMENTS))] for n, e in ensembles["explainers"].items()])]
    else:
        parts.append(f"<p>No ensembles of {ensembles['size']}: {html.escape(ensembles['why'])}.</p>")
    parts.append("<h2>Data randomisation</h2>")
    parts.append(f"<p>Members trained on permuted labels: <code>{html.escape(data['population'])}</code>, "
                 f"{data['n_pairs']} pairs, mean test accuracy {data['accuracy_mean']:.3f}; the verdict per explainer "
                 "is in the sanity table (δ = s_seed − s_permuted).</p>" if data
                 else "<p>Not run: no permuted-label population given or trained (options "
                      "<code>permuted_population</code>, <code>permute_labels</code>).</p>")
    parts.append("<h2>Aggregates of the explainers' maps</h2>")
    if aggregates["available"]:
        metric = sections["faithfulness"]["primary"]
        scores = sections["faithfulness"]["by_metric"][metric]["explainers"]
        parts += [f"<p>Per member, the {aggregates['normalisation']}-normalised maps of "
                  f"{html.escape(', '.join(aggregates['of']))} merged by each aggregator.</p>",
                  _table(["aggregate", f"SA@{sections['agreement']['k']}", "δ randomised", "δ permuted", metric],
                         [[html.escape(n), *_numbers(a["agreement"]["sa"]), _cell(a["verdict"]),
                           _cell(a["data_randomisation"]), *_numbers(scores[n])]
                          for n, a in aggregates["aggregates"].items()])]  # fmt: skip
    else:
        parts.append(f"<p>None: {html.escape(aggregates['why'])}.</p>")
    return parts + truth_part(sections.get("truth", {"available": False}))


def truth_part(truth: dict) -> list[str]:
    """The ground-truth section's paragraph and table (none where the data know no truth)."""
    if not truth["available"]:
        return []
    against = truth["against_faithfulness"]
    names = list(truth["by_metric"][truth["primary"]]["candidates"])
    return ["<h2>Against the ground truth</h2>",
            f"<p>Localisation of |map| in what truly decides the label (mean ± 95 % t-interval over members). "
            f"The truth's best: {html.escape(against['best_by_truth'])}; the {html.escape(against['metric'])} "
            f"ranking's best: {html.escape(against['best_by_faithfulness'])}; Kendall τ between the two rankings "
            f"{against['kendall_tau']:.2f}.</p>",
            _table(["candidate", *truth["metrics"]],
                   [[html.escape(n), *_numbers(*(truth["by_metric"][m]["candidates"][n] for m in truth["metrics"]))]
                    for n in names])]  # fmt: skip


def page(report: dict, images: dict[str, Path]) -> str:
    """The HTML page (the module docstring)."""
    info = report["population"]
    parts = [f"<h1>Can I trust these explanations? {html.escape(info['dataset'])}</h1>",
             f"<p>{info['n_members']} members, {info['n_points']} test {info['inputs']} of shape "
             f"{tuple(info['input_shape'])}, "
             f"{info['n_classes']} classes; report computed in {report['seconds']:.0f} s.</p>",
             "<h2>Summary</h2>", f'<pre class="summary">{html.escape(report["summary"]["text"])}</pre>',
             "<h2>Sanity, calibrated by the seed</h2>",
             _table(["explainer", "verdict: δ randomised", "s_seed", "s_randomised", "random logit"]
                    + (["δ permuted", "s_permuted"] if report["sections"]["sanity"]["data_randomisation"] else []),
                    _verdict_rows(report)),
             *additions(report)]
    for name, path in images.items():
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(f'<figure><img alt="{name}" src="data:image/png;base64,{data}">'
                     f"<figcaption>{html.escape(CAPTIONS[name])}</figcaption></figure>")  # fmt: skip
    parts.append("<p>Every number, with the per-member values: <code>report.json</code> beside this page.</p>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<link rel=\"icon\" href=\"data:,\">"
            f"<title>Reliability report: {html.escape(info['dataset'])}</title><style>{CSS}</style></head>"
            f"<body>{''.join(parts)}</body></html>\n")  # fmt: skip


def write_html(report: dict, images: dict[str, Path], path: Path) -> None:
    """``page(report, images)`` written atomically to ``path``."""
    write_text(path, page(report, images))
