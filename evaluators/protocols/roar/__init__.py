"""Hooker et al.'s remove and retrain (docs/roar.md): estimators (``estimators``), a split's maps cached on disk
(``maps``), the resumable grid of retrained cells (``grid``), its report (``report``), and the protocol of
``evaluate.py roar`` (``protocol``). The removal itself is ``datamodules.roar``; the callback ``callbacks.roar``."""
