"""LightningModules: the tabular MLP (more model families join as issues land)."""

from lightning_modules.mlp import MLPClassifier, build_mlp

__all__ = ["MLPClassifier", "build_mlp"]
