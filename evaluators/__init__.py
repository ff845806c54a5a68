"""Evaluators, by role (sub-packages only):

* ``inputs``: what an evaluator is given, read and checked once (configs, runs, populations, finite values);
* ``maps``: what makes explanation maps (explainers for every model, aggregators);
* ``metrics``: what scores them (agreement between maps, fidelity of a map);
* ``protocols``: experiments from trained models to reports, built on the above (``registry``: evaluate.py's
  sub-commands; ``roar``: Hooker et al.'s remove and retrain);
* ``reports``: what the protocols write besides their JSON/CSV (map grids, W&B).
"""
