"""Callbacks: explanation consistency and aggregation fidelity during training, ROAR at its end."""

from callbacks.aggregation_fidelity import AggregationFidelity
from callbacks.explanation_consistency import ExplanationConsistency
from callbacks.roar import ROAR

__all__ = ["AggregationFidelity", "ExplanationConsistency", "ROAR"]
