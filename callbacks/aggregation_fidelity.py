"""Aggregation fidelity during training (Mahlau & Nolde 2022): how faithful the base
explanations and their pixel-level aggregates are, as the model learns.

Every ``every_n_epochs`` epochs (at the epoch's end, after its validation), and at the
end of training if ``at_train_end``, on a fixed probe batch (``n_probe`` inputs: images
evenly spaced through the validation split, else the test split; the first test rows of
a tabular datamodule): the base maps of ``explainers`` (their predicted class; a tabular
model's positive class), normalised (``normalisation``) and aggregated by each of
``aggregators`` and, if given, Decker et al.'s ``optimised`` aggregators; each map scored
by the ``metrics`` averaged over the probe: insertion and deletion AUC (``InsertionAUC``,
``DeletionAUC``; the normal baseline from each image's own channel statistics, from the
training set's feature statistics for tabular inputs), infidelity and faithfulness
correlation (on ``n_samples`` subset perturbations shared by every map), and relative
input, representation and output stability (``relative_stability``: RIS, RRS, ROS by
``evaluators.metrics.relative_stability``, its defaults but for ``n_samples`` noisy copies
per probe input and ``change="norm"``, ‖e − e'‖ / ‖e‖, finite on min-max maps' exact zeros;
L the model's output), and the maps' own sparseness and complexity (``evaluators.metrics.complexity``;
the mean over probe inputs whose map is not all zero). The maps of the noisy copies are made as those of x, for x's
explained class, with the optimised aggregators' weights fitted at x (not refitted per
copy); each score is the mean over the probe inputs that kept a sample. Its cost: every
explainer on n_probe × n_samples noisy inputs per evaluation (800 images with the defaults).
Logged as ``aggregation/<map>/<metric>`` (``<map>``: ``base_<explainer>`` or an
aggregator's name), with a PNG grid of the probe inputs and their maps (images) in
``<log_dir or default_root_dir>/aggregation/`` sent to W&B when a ``WandbLogger`` is
attached; the end-of-training scores are logged with the suffix ``/final``. Each
evaluation is also kept in ``history`` (with ``epoch`` and ``when``: ``epoch_end`` or
``train_end``).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import WandbLogger

from evaluators.aggregators.normalisations import NORMALISATIONS
from evaluators.aggregators.optimised_aggregators import (
    VAR_EPS, combine, explainer_maps, optimised_aggregation, variance_aggregate,
)  # fmt: skip
from evaluators.aggregators.pixel_aggregators import aggregate_all
from evaluators.aggregators.registry import AGGREGATORS
from foundation.finite import check_finite
from evaluators.maps import explain
from evaluators.metrics.infidelity import subset_perturbations
from evaluators.metrics.perturbations import RADIUS, uniform_noise
from evaluators.reports.map_grid import plot_map_grid
from foundation.errors import InputError
from foundation.modality import modality_of
from evaluators.metrics.registry import METRICS
from evaluators.metrics.relative_stability import STABILITIES
from lightning_modules.interface import default_classes, eval_mode

# the registered metrics scored here from the model (the probe's curves, its subset perturbations, its
# noisy copies); besides them, every registered metric of the maps alone (``needs == ("maps",)``)
MODEL_METRICS = ("insertion", "deletion", "infidelity", "fcor", "relative_stability")
MAP_OPTIONS = tuple(inspect.signature(explainer_maps).parameters)[4:]  # the optimised aggregators' map options


def scored_metrics() -> list[str]:
    """The metrics the callback scores: ``MODEL_METRICS`` and the registry's metrics of the maps alone."""
    return [*MODEL_METRICS, *METRICS.names(needs=("maps",))]


class AggregationFidelity(pl.Callback):
    def __init__(
        self,
        explainers: dict[str, dict] | None = None,
        aggregators: dict[str, dict] | None = None,
        normalisation: str = "z",
        n_probe: int = 16,
        every_n_epochs: int = 1,
        at_train_end: bool = True,
        reduction: str = "abs_sum",
        steps: int | None = None,
        baseline: str = "normal",
        seed: int = 0,
        log_grid: bool = True,
        optimised: dict[str, dict] | None = None,
        metrics: tuple[str, ...] = ("insertion", "deletion"),
        n_samples: int = 50,
    ) -> None:
        """``explainers``: registry name -> options (default: cheap gradient methods, the inputs'
        ``Modality.default_explainers``); ``aggregators``: name -> parameters
        (default ``mean`` and ``ucb``, the paper's two best); ``optimised``: Decker et al.'s
        aggregators over the same explainers, name -> options of ``optimised_aggregation``
        (e.g. ``{agg_faith: {}, agg_robust: {n_samples: 10}}``); ``metrics``: some of
        ``insertion``, ``deletion``, ``infidelity``, ``fcor`` (the last two on ``n_samples``
        subset perturbations of the probe, shared by every map), ``relative_stability``
        (RIS, RRS, ROS on ``n_samples`` noisy copies of each probe input), ``sparseness``,
        ``complexity`` (of the maps alone: any registered metric that needs only the maps)."""
        if normalisation not in NORMALISATIONS:
            raise InputError(f"AggregationFidelity: normalisation={normalisation!r}; expected one of "
                             f"{sorted(NORMALISATIONS)}")  # fmt: skip
        unknown = sorted(set(aggregators or {}) - set(AGGREGATORS.names(kind="pixel")))
        if unknown:
            raise InputError(f"AggregationFidelity: unknown aggregator(s) {unknown}; expected some of "
                             f"{sorted(AGGREGATORS.names(kind='pixel'))}")  # fmt: skip
        unknown = sorted(set(optimised or {}) - set(AGGREGATORS.names(kind="optimised")))
        unknown += sorted(set(metrics) - set(scored_metrics()))
        if unknown:
            raise InputError(f"AggregationFidelity: unknown optimised aggregator(s) or metric(s) {unknown}; expected "
                             f"some of {AGGREGATORS.names(kind='optimised')} and {scored_metrics()}")  # fmt: skip
        if every_n_epochs < 1 or n_probe < 1:
            raise InputError(f"AggregationFidelity: every_n_epochs={every_n_epochs}, n_probe={n_probe}; "
                             "expected positive integers")  # fmt: skip
        self.explainers = explainers
        self.aggregators = aggregators if aggregators is not None else {"mean": {}, "ucb": {}}
        self.normalisation, self.n_probe, self.every_n_epochs = normalisation, n_probe, every_n_epochs
        self.at_train_end, self.reduction, self.steps, self.baseline = at_train_end, reduction, steps, baseline
        self.seed, self.log_grid = seed, log_grid
        self.optimised, self.metrics, self.n_samples = optimised or {}, tuple(metrics), n_samples
        self.history: list[dict] = []
        self._probe: tuple | None = None

    # --- the probe ------------------------------------------------------------------
    def _load_probe(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> tuple:
        data = trainer.datamodule
        if data is None:
            raise InputError("AggregationFidelity needs a datamodule (trainer.fit(model, datamodule=...))")
        x, y = data.probe(self.n_probe, "val" if "val" in getattr(data, "split_sizes", ()) else "test")
        if modality_of(data).own_statistics:  # images: the normal baseline from each image's own channel statistics
            return x, y, None
        return x, y, modality_of(data).statistics(data.train_tensors[0])  # a table: its training rows' statistics

    # --- one evaluation -------------------------------------------------------------
    def evaluate(self, trainer: pl.Trainer, pl_module: pl.LightningModule, when: str) -> dict[str, float]:
        """Base and aggregated maps of the probe and their insertion/deletion AUCs."""
        with torch.enable_grad():  # explainers differentiate, whatever mode the hook runs in
            if self._probe is None:
                self._probe = self._load_probe(trainer, pl_module)
            x, y = (t.to(pl_module.device) for t in self._probe[:2])
            stats = None if self._probe[2] is None else tuple(s.to(pl_module.device) for s in self._probe[2])
            modality = modality_of(x)
            with eval_mode(pl_module):
                explainers = self.explainers or {name: dict(o) for name, o in modality.default_explainers.items()}
                target = default_classes(pl_module, x)  # the default target: a tabular model's positive class
                maps, weights = self._maps(pl_module, x, target, explainers, stats)
                scores = self._scores(pl_module, x, maps, stats)
                if "relative_stability" in self.metrics:
                    scores.update(self._stability(pl_module, x, target, explainers, stats, maps, weights))
        self.history.append({"epoch": trainer.current_epoch, "when": when, **scores})
        if self.log_grid and modality.figure == "heatmap" and trainer.is_global_zero:
            self._log_grid(trainer, pl_module, x, y, maps)
        return scores

    def _maps(self, pl_module: pl.LightningModule, x: torch.Tensor, target, explainers: dict, stats,
              weights: dict | None = None) -> tuple[dict[str, torch.Tensor], dict]:  # fmt: skip
        """Base, aggregated and optimised maps of x for ``target`` (N,), and the optimised
        aggregators' weights: fitted on x, or the given ``weights`` (name -> (len(x), k), None
        for ``agg_var``) applied to the explainers' maps."""
        modality = modality_of(x)
        base = {}
        for k, (name, options) in enumerate(explainers.items()):
            m = explain(pl_module, x, name, target=target, **{"seed": self.seed + k, **(options or {})}).detach()
            base[f"base_{name}"] = modality.reduce(m, self.reduction)
            check_finite(base[f"base_{name}"], f"explainer {name!r}", "map")
        maps = {**base, **aggregate_all(base, self.normalisation, self.aggregators, modality.map_dims)}
        fitted = {}
        for name, options in self.optimised.items():
            options = dict(options or {})
            if weights is None:
                if stats is not None and name in ("agg_faith", "agg_opt"):  # features replaced by the training means
                    options.setdefault("baseline", stats[0])
                maps[name], fitted[name] = optimised_aggregation(pl_module, x, name, explainers, target, **options)
                continue
            map_options = {k: options[k] for k in MAP_OPTIONS if k in options}
            stack = explainer_maps(pl_module, x, target, explainers, **map_options)
            maps[name] = (variance_aggregate(stack, modality.map_dims, options.get("eps", VAR_EPS))
                          if weights[name] is None else combine(stack, weights[name]))  # fmt: skip
        return maps, fitted

    def _stability(self, pl_module: pl.LightningModule, x: torch.Tensor, target, explainers: dict, stats,
                   maps: dict[str, torch.Tensor], weights: dict) -> dict[str, float]:  # fmt: skip
        """``aggregation/<map>/{ris,rrs,ros}``: each map's relative stabilities, averaged over
        the probe inputs with a score, on ``n_samples`` noisy copies of each."""
        n = self.n_samples
        perturbed = uniform_noise(x, n, RADIUS, self.seed, "evaluation")
        repeated = {name: None if w is None else w.repeat_interleave(n, 0) for name, w in weights.items()}
        noisy, _ = self._maps(pl_module, perturbed.flatten(0, 1), target.repeat_interleave(n), explainers, stats,
                              repeated)  # fmt: skip
        scores, relative_stability = {}, METRICS["relative_stability"].function
        for name, m in maps.items():
            result = relative_stability(pl_module, x, m, lambda v, t, name=name: noisy[name], target,
                                        change="norm", perturbed=perturbed, seed=self.seed,
                                        max_batch=len(x) * n)  # fmt: skip
            for stability in STABILITIES:
                scores[f"aggregation/{name}/{stability}"] = result[stability].nanmean().item()
        return scores

    def _scores(self, pl_module: pl.LightningModule, x: torch.Tensor, maps: dict[str, torch.Tensor],
                stats) -> dict[str, float]:  # fmt: skip
        """``aggregation/<map>/<metric>``: each map's mean over the probe."""
        options = {"steps": self.steps, "baseline": self.baseline, "stats": stats, "seed": self.seed}
        curves = [mode for mode in ("insertion", "deletion") if mode in self.metrics]
        samples = None
        if {"infidelity", "fcor"} & set(self.metrics):
            samples = subset_perturbations(pl_module, x, n_samples=self.n_samples, seed=self.seed,
                                           baseline=None if stats is None else stats[0])  # fmt: skip
        scores = {}
        for name, m in maps.items():
            for mode in curves:
                metric = METRICS[mode].obj(**options)
                metric.update(pl_module, x, m)
                scores[f"aggregation/{name}/{mode}"] = metric.compute().item()
            if "infidelity" in self.metrics:
                scores[f"aggregation/{name}/infidelity"] = METRICS["infidelity"].function(m, samples).mean().item()
            if "fcor" in self.metrics:
                scores[f"aggregation/{name}/fcor"] = METRICS["fcor"].function(m, samples).nanmean().item()
            for metric in (metric for metric in METRICS.names(needs=("maps",)) if metric in self.metrics):
                scores[f"aggregation/{name}/{metric}"] = METRICS[metric].function(m).nanmean().item()
        return scores

    def _log_grid(self, trainer: pl.Trainer, pl_module: pl.LightningModule, x: torch.Tensor, y: torch.Tensor,
                  maps: dict[str, torch.Tensor]) -> None:  # fmt: skip
        folder = Path(trainer.log_dir or trainer.default_root_dir) / "aggregation"
        folder.mkdir(parents=True, exist_ok=True)
        with torch.no_grad():
            predicted = default_classes(pl_module, x)
        classes = trainer.datamodule.classes
        titles = [f"{classes[int(a)]} → {classes[int(b)]}" for a, b in zip(y, predicted)]
        path = folder / f"epoch-{trainer.current_epoch}-step-{trainer.global_step}.png"
        plot_map_grid(x, maps, trainer.datamodule.normalization, path, titles)
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_image(key="aggregation/grid", images=[str(path)], step=trainer.global_step)

    # --- hooks ----------------------------------------------------------------------
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        for name, value in self.evaluate(trainer, pl_module, "epoch_end").items():
            pl_module.log(name, value, sync_dist=False, rank_zero_only=True)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.at_train_end:
            return
        scores = self.evaluate(trainer, pl_module, "train_end")
        for logger in trainer.loggers:
            logger.log_metrics({f"{k}/final": v for k, v in scores.items()}, step=trainer.global_step)
