"""The bottom layer: what every other package uses and which imports none of them (errors and
the entry points' exit, files written whole, run-folder locks, seeds, batch sizes, devices).
Nothing here imports ``datamodules``, ``lightning_modules``, ``evaluators`` or ``callbacks``."""
