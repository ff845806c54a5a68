"""A synthetic reliability report (evaluators/reports/reliability/), shared by the tests of its
sections, summary and page: two explainers' units of 4 members, 5 inputs and 6 features, drawn
from a seeded generator, with the sections, summary and text the protocol builds from them."""

from __future__ import annotations

import torch

MEMBERS, INPUTS, FEATURES = 4, 5, 6
MEASURE = "spearman_abs"
# infidelity (lower is better) per member: "a" beats "b" on every member
INFIDELITY = {"a": [0.10, 0.12, 0.11, 0.13], "b": [0.50, 0.60, 0.55, 0.52]}


def units() -> dict[str, dict]:
    """Each explainer's unit as ``maps.explainer_unit`` returns it, its numbers drawn at random."""
    g = torch.Generator().manual_seed(0)
    out = {}
    for name in INFIDELITY:
        out[name] = {"maps": torch.randn(MEMBERS, INPUTS, FEATURES, generator=g, dtype=torch.float64),
                     "randomised": torch.randn(MEMBERS, INPUTS, FEATURES, generator=g, dtype=torch.float64),
                     "cascade": torch.rand(MEMBERS, 2, generator=g, dtype=torch.float64),
                     "layers": ["fc2", "fc1"],
                     "random_logit": torch.rand(MEMBERS, generator=g, dtype=torch.float64),
                     "faithfulness": {"infidelity": torch.tensor(INFIDELITY[name], dtype=torch.float64)}}
    return out


def report(dataset: str = "loans") -> dict:
    """The report of ``units()`` as the protocol assembles it: no ensembles, no permuted-label
    population, no aggregates, no ground truth."""
    from evaluators.reports.reliability.sections import agreement, faithfulness, sanity
    from evaluators.reports.reliability.summary import recommendation, summary_rows, summary_text

    u = units()
    sections = {
        "agreement": agreement(u, 2, False, 0) | {"ensembles": {"available": False, "why": "too few members",
                                                                "size": 2}},
        "sanity": sanity(u, MEASURE, list(range(MEMBERS)), True) | {"data_randomisation": None},
        "faithfulness": faithfulness(u, ["infidelity"], 50, 0) | {"aggregates": {"available": False,
                                                                                 "why": "one explainer"}},
    }  # fmt: skip
    out = {"population": {"dataset": dataset, "n_members": MEMBERS, "n_points": INPUTS, "inputs": "rows",
                          "input_shape": [FEATURES], "n_classes": 2, "accuracy_mean": 0.8},
           "sections": sections, "seconds": 12.3,
           "summary": {"rows": summary_rows(sections), "recommendation": recommendation(u, sections, 50, 0)}}
    out["summary"]["text"] = summary_text(out)
    return out
