"""The reliability report's options (configs/report/table.yaml, configs/report/image_folder.yaml;
``evaluate.py report``): a table's population (a population file of stacked MLPs or of a
user's networks on rows) or an image population (a population file or a folder of image runs);
what is explained and with which class: ``inputs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from evaluators.aggregators.normalisations import NORMALISATIONS
from evaluators.aggregators.pixel_aggregators import aggregator_options
from evaluators.aggregators.registry import AGGREGATORS
from evaluators.inputs.config import PopulationSource
from evaluators.inputs.image_members import source_modality
from evaluators.inputs.sources import POPULATIONS
from evaluators.maps import EXPLAINERS
from evaluators.metrics.registry import METRICS
from evaluators.metrics.similarity import measures_for
from evaluators.reports.reliability.twin import training_config
from evaluators.reports.wandb_log import ReportLogging
from evaluators.sanity.maps import explainer_options
from foundation.errors import InputError

# The faithfulness metrics a table's report takes: feature removal (deletion towards the
# training mean, the zero vector of standardised features) and infidelity.
FAITHFULNESS = ("deletion", "insertion", "infidelity")
CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "report"
# the config taken without --config, by the kind of --population (evaluate.py's default_config)
DEFAULT_CONFIGS = {kind: str(CONFIGS / ("image_folder.yaml" if kind == "image population" else "table.yaml"))
                   for kind in POPULATIONS}  # fmt: skip


@dataclass
class ReportConfig(ReportLogging, PopulationSource):
    """Options of the report. ``explainers``: registry names (``evaluators.maps``); ``options``:
    per explainer, ``explain``'s options; ``k``: top-k of the agreement scores (None:
    ``evaluators.metrics.agreement.default_k``); ``measure``: the similarity of two maps in the sanity sections
    (``evaluators.metrics.similarity``); ``accuracy_tolerance``: members whose test accuracy is
    within this of the population's median are "equally good" (the calibrated verdict's seed
    reference, ``verdict``); ``cascade_steps``: the cascading randomisation steps explained
    (``maps.cascade_positions``); ``faithfulness``: metrics of ``FAITHFULNESS``, the first ranks
    the explainers; ``n_bootstrap``: resamples of members for how many members settle the
    ranking; ``n_accuracy_images``: test images each image member's accuracy is measured on;
    ``aggregators``: pixel aggregators (``AGGREGATORS``, kind "pixel") -> their options, each
    merging the explainers' maps normalised by ``normalisation`` (``aggregates``);
    ``ensemble_size``: members per average ensemble in the agreement section (None:
    ``ensembles.default_size``); ``permuted_population``: a population of the same data trained
    on permuted labels (``train.py --data.permute_labels <seed>``), the data-randomisation
    verdict's (``permuted``; None: no data randomisation); ``permute_labels``: instead of a given
    ``permuted_population``, the seed of the training labels' permutation with which the report
    trains the population's twin itself (``twin``; None: none trained)."""

    KINDS: ClassVar[tuple[str, ...]] = POPULATIONS

    explainers: list[str] = field(default_factory=lambda: ["saliency", "input_x_gradient", "integrated_gradients",
                                                           "smoothgrad"])
    options: dict = field(default_factory=lambda: {"smoothgrad": {"nt_samples": 20, "stdevs": 0.1},
                                                   "integrated_gradients": {"n_steps": 20}})
    n_points: int = 200
    seed: int = 0
    k: int | None = None
    measure: str = "spearman_abs"
    cascade_steps: int = 5
    accuracy_tolerance: float = 0.02
    watson_c: bool = True
    faithfulness: list[str] = field(default_factory=lambda: ["deletion", "infidelity"])
    infidelity_samples: int = 50
    n_bootstrap: int = 1000
    n_accuracy_images: int = 500
    aggregators: dict = field(default_factory=lambda: {"mean": {}, "ucb": {}, "var": {}})
    normalisation: str = "z"
    ensemble_size: int | None = None
    permuted_population: str | None = None
    permute_labels: int | None = None
    output_dir: str = "runs/report"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.explainers, list):
            raise InputError(f"option explainers={self.explainers!r}; expected a list of explainer names")
        if not isinstance(self.options, dict):
            raise InputError(f"option options={self.options!r}; expected a mapping explainer -> its options")
        explainer_options({name: self.options.get(name, {}) for name in self.explainers})  # names known, non-empty
        kind = self.modality.name
        other = [m for m in self.explainers if not EXPLAINERS[m].applies_to(kind)]
        if other:
            raise InputError(f"option explainers: {other} do not take {kind}; the population's inputs are {kind}")
        measures = measures_for(self.modality)
        if self.measure not in measures:
            raise InputError(f"option measure={self.measure!r}; expected one of {measures} ({kind})")
        unknown = [m for m in self.faithfulness if m not in FAITHFULNESS or m not in METRICS]
        if unknown or not self.faithfulness:
            raise InputError(f"option faithfulness={self.faithfulness!r}; expected a non-empty list from "
                             f"{list(FAITHFULNESS)}")  # fmt: skip
        for option, least in (("n_points", 2), ("n_bootstrap", 10), ("infidelity_samples", 2), ("cascade_steps", 1),
                              ("n_accuracy_images", 1)):
            if getattr(self, option) < least:
                raise InputError(f"option {option}={getattr(self, option)}; expected at least {least}")
        if self.k is not None and self.k < 1:
            raise InputError(f"option k={self.k}; expected a positive integer or null (chosen from the data)")
        if not 0 <= self.accuracy_tolerance <= 1:
            raise InputError(f"option accuracy_tolerance={self.accuracy_tolerance}; expected a share in [0, 1]")
        self.check_additions()

    def check_additions(self) -> None:
        """The options of the aggregates, the ensembles and the data randomisation."""
        pixel = AGGREGATORS.names(kind="pixel")
        if not isinstance(self.aggregators, dict) or set(self.aggregators) - set(pixel):
            raise InputError(f"option aggregators={self.aggregators!r}; expected a mapping of pixel aggregators "
                             f"from {pixel} to their options (empty: no aggregate)")  # fmt: skip
        for name, params in self.aggregators.items():
            if not isinstance(params or {}, dict) or set(params or {}) - set(aggregator_options(name)):
                raise InputError(f"option aggregators: {name}: {params!r}; expected a mapping of some of "
                                 f"{aggregator_options(name)}")  # fmt: skip
        if self.normalisation not in NORMALISATIONS:
            raise InputError(f"option normalisation={self.normalisation!r}; expected one of {list(NORMALISATIONS)}")
        if self.ensemble_size is not None and (isinstance(self.ensemble_size, bool) or self.ensemble_size < 2):
            raise InputError(f"option ensemble_size={self.ensemble_size!r}; expected an integer of at least 2 or "
                             "null (chosen from the number of members)")  # fmt: skip
        if self.permuted_population is not None:
            if not Path(self.permuted_population).exists():
                raise InputError(f"option permuted_population={self.permuted_population!r}: no such file or folder; "
                                 "expected a population trained with train.py --data.permute_labels <seed>")
            other = source_modality(self.permuted_population).name
            if other != self.modality.name:
                raise InputError(f"option permuted_population={self.permuted_population!r}: its members take "
                                 f"{other}; expected {self.modality.name}, as the population's")  # fmt: skip
        if self.permute_labels is not None:
            if self.permuted_population is not None:
                raise InputError(f"options permuted_population={self.permuted_population!r} and permute_labels="
                                 f"{self.permute_labels!r}: two permuted-label populations; expected one of them "
                                 "(permute_labels trains one, permuted_population names one trained)")  # fmt: skip
            training_config(self.population, self.permute_labels)
