"""The protocols ``evaluate.py`` runs from a config, one sub-command each: ``PROTOCOLS`` (a
``foundation.registry.Registry``). Each protocol's module registers itself once its parts are
defined (``PROTOCOLS.add(name, evaluate, config=..., write=..., ...)`` at its end: a protocol is
three definitions, its config class, the function that evaluates it and the one that writes its
report); the package's ``__init__`` imports every protocol module, so importing this module gives
the full registry. A new protocol is one module (docs/extending.md).

An entry's ``obj`` is the function that evaluates the config (``evaluate(cfg, run_dir,
**options)`` when ``resumable``, else ``evaluate(cfg)``; ``None`` back: nothing to report yet);
its traits:

* ``config``: the config class (read by ``evaluators.inputs.config.load_config``);
* ``write``: ``write(summary, run_dir)`` writes the report into the run folder;
* ``report``: the file whose presence marks a finished run;
* ``has_sets``: whether ``--n_sets`` applies; ``resumable``: ``evaluate(cfg, run_dir)`` keeps its
  finished work in run_dir (both False unless given);
* ``source``: what it evaluates (evaluate.py's model options map onto its config):
  ``"population"`` (a config of PopulationSource), ``"run"`` (ModelSource's run: one model or a
  population, each member evaluated), ``"model"`` (ModelSource's run, one model only) or
  ``"pair"`` (two runs named in its config only); ``"population"`` unless given;
* ``options``: its own command-line options, name -> add_argument's keywords, passed to evaluate;
* ``report_dir``: cfg -> its run folder (None: a new folder per run);
* ``default_configs``: a population's kind -> the config taken when ``--config`` is not given;
* ``choices``: config options that name registered things, option -> (registry, traits): evaluate.py
  gives each a ``--<option> a,b`` whose names must be the registry's names with those traits
  (these four None unless given).
"""

from __future__ import annotations

from pathlib import Path

from foundation.registry import Registry

PROTOCOLS = Registry("protocol", page="extending.md", traits=dict(
    has_sets=False, resumable=False, source="population", options=None, report_dir=None, default_configs=None,
    choices=None))
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TABLE_DEFAULT = str(CONFIGS / "consistency" / "table.yaml")  # the generic table config (any CSVDataModule run)
