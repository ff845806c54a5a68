"""Aggregators: Mahlau & Nolde's pixel aggregators of several maps into one, Decker et al.'s
optimised aggregators, the normalisations they share and the simplex QP solver. Importing the
package imports both aggregator modules, each registering its aggregators in
``registry.AGGREGATORS`` (pixel first)."""

from evaluators.aggregators import pixel_aggregators  # noqa: F401  (registered at their definitions)
from evaluators.aggregators import optimised_aggregators  # noqa: F401
