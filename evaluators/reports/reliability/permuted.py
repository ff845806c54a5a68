"""Data randomisation (Adebayo et al. 2018, §3.2), calibrated by the seed like the model
randomisation (``verdict``).

A permuted-label population (option ``permuted_population``, or with ``permute_labels`` the
twin the report trained, ``twin``): members of the same architecture trained on the same data
with the training labels permuted (``train.py --data.permute_labels <seed>``,
``datamodules.label_permutation``), so what they learnt is noise. Its members explain the
report's inputs x for the report's class ``target`` (the real population's, the same for every
member) with each explainer, the same options and draws
(``maps.member_maps``; kept in ``<run>/maps/permuted/<explainer>.pt``, read again on resume).
Member m of the real population is paired with member m of the permuted one (the first
n = min(K, K') pairs). With φ_m the real member's maps and ψ_m its permuted partner's:

* s_perm(m) = S(ψ_m, φ_m): how alike a member's maps stay when the labels are noise;
* s_seed(m) = mean over the other equally good members b of S(φ_m, φ_b), as in ``verdict``;
* δ_m = s_seed(m) − s_perm(m), its seed-level mean with the 95 % t-interval over members.

The explainer **passes** when δ's interval lies above 0: training on noise moves its maps
further than a change of seed does (``verdict.calibrated_verdict`` with ψ in place of the
randomised maps). The permuted inputs must be the report's own (the test split is never
permuted); a population that serves other inputs is refused. The permuted members' test
accuracies are reported (near chance when the labels were noise).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import torch

from evaluators.reports.reliability.config import ReportConfig
from evaluators.reports.reliability.inputs import ReportInputs, report_inputs
from evaluators.reports.reliability.maps import member_maps
from evaluators.reports.reliability.twin import TWIN, twin_population
from evaluators.reports.reliability.verdict import calibrated_verdict
from foundation.errors import InputError
from foundation.files import atomic_write


def permuted_source(cfg: ReportConfig, run_dir: Path) -> str | None:
    """The permuted-label population: ``permuted_population``, or with ``permute_labels`` the twin
    trained in report folder ``run_dir`` (``evaluate.py report`` trains it first); None: neither."""
    if cfg.permute_labels is None:
        return cfg.permuted_population
    trained = twin_population(run_dir)
    if trained is None:
        raise InputError(f"option permute_labels={cfg.permute_labels}: no trained twin under {run_dir / TWIN}; "
                         "expected evaluate.py report to train it before the report (or permuted_population=<a "
                         "population trained with train.py --data.permute_labels>)")  # fmt: skip
    return str(trained)


def permuted_inputs(cfg: ReportConfig, source: str, given: ReportInputs) -> ReportInputs:
    """The members and accuracies of permuted-label population ``source``, its inputs checked to be ``given``'s."""
    other = report_inputs(dataclasses.replace(cfg, population=source, permuted_population=None, permute_labels=None))
    if other.x.shape != given.x.shape or not torch.equal(other.x.cpu(), given.x.cpu()):
        raise InputError(f"permuted-label population {source!r} serves other test inputs than population="
                         f"{cfg.population!r}; expected a population of the same data (same split and "
                         "preprocessing) trained with data.permute_labels")  # fmt: skip
    return other


def permuted_maps(folder: Path, members, given: ReportInputs, method: str, options: dict, seed: int,
                  progress: Callable[[str], None] = print) -> torch.Tensor:  # fmt: skip
    """(K', N, ...) maps of the permuted members, read from ``folder/<method>.pt`` when kept there."""
    path = folder / f"{method}.pt"
    if path.is_file():
        progress(f"{method} (permuted labels): read from {path}")
        return torch.load(path, weights_only=True)["maps"]
    progress(f"{method} (permuted labels): {len(members)} members")
    maps = member_maps(members, given.x, given.target, method, options, seed)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: torch.save({"maps": maps}, tmp))
    return maps


def data_verdict(maps: torch.Tensor, permuted: torch.Tensor, measure: str, kept: list[int], what: str) -> dict:
    """The verdict of the module docstring for real maps (K, N, ...) and permuted maps (K', N, ...):
    the first min(K, K') pairs, the seed reference over the equally good members among them
    (all of them where fewer than 2 are)."""
    n = min(len(maps), len(permuted))
    reference = [i for i in kept if i < n]
    reference = reference if len(reference) >= 2 else list(range(n))
    out = calibrated_verdict(maps[:n], permuted[:n], measure, reference, f"{what} (permuted labels)")
    out["similarity_permuted"] = out.pop("similarity_randomised")
    out["per_member"]["permuted"] = out["per_member"].pop("randomised")
    return out


def data_randomisation(cfg: ReportConfig, source: str | None, given: ReportInputs, units: dict[str, dict],
                       kept: list[int], folder: Path) -> tuple[dict | None, dict[str, torch.Tensor]]:  # fmt: skip
    """The data-randomisation part of the sanity section with permuted-label population ``source``
    (``permuted_source``; None: no such part) and the permuted maps per explainer (for the
    aggregates' verdicts)."""
    if source is None:
        return None, {}
    other = permuted_inputs(cfg, source, given)
    maps = {m: permuted_maps(folder, other.members, given, m, cfg.options.get(m, {}), cfg.seed) for m in units}
    verdicts = {m: data_verdict(units[m]["maps"], maps[m], cfg.measure, kept, f"explainer {m!r}") for m in units}
    section = {"population": source, "permute_labels": cfg.permute_labels,
               "n_pairs": min(len(other.members), len(given.members)), "accuracy": other.accuracies.tolist(),
               "accuracy_mean": other.accuracies.mean().item(), "explainers": verdicts}  # fmt: skip
    return section, maps
