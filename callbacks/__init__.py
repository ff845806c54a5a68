"""Callbacks: explanation consistency, ROAR retraining and aggregation fidelity."""
