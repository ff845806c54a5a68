"""Callbacks: explanation consistency and aggregation fidelity during training (ROAR to come)."""

from callbacks.aggregation_fidelity import AggregationFidelity
from callbacks.explanation_consistency import ExplanationConsistency

__all__ = ["AggregationFidelity", "ExplanationConsistency"]
