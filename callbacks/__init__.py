"""Callbacks: explanation consistency during training (ROAR and aggregation fidelity to come)."""

from callbacks.explanation_consistency import ExplanationConsistency

__all__ = ["ExplanationConsistency"]
