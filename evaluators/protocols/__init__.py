"""Protocols that run experiments from trained models and write reports: the loss
landscape, explanation consistency (Table 1), the σ ablation, the explanation grid,
pixel and optimised aggregation, ROAR (``roar``); ``registry.PROTOCOLS`` names them for
evaluate.py. Importing the package imports every protocol module, each registering itself (in
this order: evaluate.py's sub-commands')."""

from evaluators.protocols import landscape  # noqa: F401  (each registers itself in PROTOCOLS)
from evaluators.protocols import sigma_ablation  # noqa: F401
from evaluators.protocols import consistency  # noqa: F401
from evaluators.protocols import aggregation  # noqa: F401
from evaluators.protocols import optimised_aggregation  # noqa: F401
from evaluators.protocols.roar import protocol  # noqa: F401
from evaluators.protocols import sanity  # noqa: F401
from evaluators.protocols import data_randomisation  # noqa: F401
from evaluators.protocols import report  # noqa: F401
