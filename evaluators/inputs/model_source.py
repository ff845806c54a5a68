"""Which model a protocol evaluates: the section every model-taking protocol config starts with.

The protocols that evaluate one model (``aggregation``, ``optimised``, ``sanity``, ``roar``)
take these options under the same names, in their YAML configs and, through ``evaluate.py``'s
one set of model options (``evaluate.add_model_source``), on the command line as
``--run``, ``--checkpoint``, ``--model_class``, ``--model_args``, ``--data_config``,
``--model_inputs``, ``--model_mean``, ``--model_std``, ``--data_dir``. The population
protocols (``consistency``, ``landscape``, ``sigma``) take the same command-line options;
their config section is ``evaluators.inputs.config.PopulationSource``, where ``--run``
(a population's run folder) and ``--population`` name its ``population`` and a model file's
options are refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from foundation.devices import resolve_device
from evaluators.inputs.model_inputs import OPTIONS as INPUT_OPTIONS, own_statistics

FILE_OPTIONS = ("model_class", "model_args", "data_config", *INPUT_OPTIONS)  # what only a model file takes


@dataclass
class ModelSource:
    """The model to evaluate and where it runs.

    * ``run``: a ``train.py`` run folder, a model file (``evaluators.inputs.user_models``:
      a checkpoint, TorchScript, ``torch.export`` or a state dict) or, for the protocols that
      evaluate every member of one (aggregation, optimised, sanity), a population
      (``evaluators.inputs.members``); ``checkpoint``: the file under ``<run>/checkpoints``;
    * a model file's options (``FILE_OPTIONS``; unset for a run folder or a population):
      ``model_class`` (a state dict's network, a class path or a function), ``model_args`` (its
      init arguments, or those overriding a checkpoint's), ``data_config`` (a YAML file whose
      ``data:`` section is the file's data; default: the config.yaml of the run folder it lies
      in), ``model_inputs``, ``model_mean``, ``model_std`` (what the model gets:
      ``evaluators.inputs.model_inputs``);
    * ``data_dir``: where the run's data lies on this machine, if it moved (``load_run``'s
      ``data_location``); ``device``: ``auto``, ``cpu``, ``cuda[:i]``; ``kind``: the data the
      model must be of (``tabular``, ``image``; null: either; ``evaluators.inputs.sources``).

    A bad device and a contradictory ``model_inputs``/``model_mean``/``model_std`` are refused
    when the config is made, before any work starts.
    """

    run: str
    checkpoint: str = "last.ckpt"
    model_class: str | None = None
    model_args: dict = field(default_factory=dict)
    data_config: str | None = None
    model_inputs: str | None = None
    model_mean: list[float] | float | None = None
    model_std: list[float] | float | None = None
    data_dir: str | None = None
    device: str = "auto"
    kind: str | None = None

    def __post_init__(self) -> None:
        resolve_device(self.device)
        own_statistics(self.model_inputs, self.model_mean, self.model_std)
