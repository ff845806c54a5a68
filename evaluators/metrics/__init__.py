"""What scores explanation maps: agreement between explanations (Ley et al.'s SA, SSA,
CDC; Watson et al.'s separability), and fidelity metrics of single maps. Importing the package
imports every fidelity metric's module, each registering its Metric in ``registry.METRICS`` (in
this order: the order of ``METRICS.names()``)."""

from evaluators.metrics import insertion_deletion  # noqa: F401  (registered at their definitions)
from evaluators.metrics import infidelity  # noqa: F401
from evaluators.metrics import faithfulness_correlation  # noqa: F401
from evaluators.metrics import sensitivity  # noqa: F401
from evaluators.metrics import road  # noqa: F401
from evaluators.metrics import relative_stability  # noqa: F401
from evaluators.metrics import complexity  # noqa: F401
from evaluators.metrics import localisation  # noqa: F401
from evaluators.metrics import axiomatic  # noqa: F401
