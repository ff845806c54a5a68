"""Protocols that run experiments from trained models and write reports: the loss
landscape, explanation consistency (Table 1), the σ ablation, the explanation grid,
pixel and optimised aggregation, ROAR (``roar``); ``registry`` names them for evaluate.py."""
