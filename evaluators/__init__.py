"""Evaluators, by role:

* ``maps``: what makes explanation maps (explainers for every model, aggregators);
* ``metrics``: what scores them (agreement between maps, fidelity of a map);
* ``protocols``: experiments from trained models to reports, built on the two above
  and on ``population_sets`` (member sets and curves) and ``config`` (options, devices).
"""
