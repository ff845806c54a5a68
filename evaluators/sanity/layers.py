"""Model parameter randomisation of any classifier (Adebayo et al. 2018, §3.1): its layers,
re-initialised one after another on a copy of the model (docs/sanity_checks.md#definitions).

* A *layer* is a module with a ``reset_parameters()`` method and parameters or buffers of its
  own (``nn.Linear``, ``nn.Conv*``, ``nn.BatchNorm*``, ``nn.LayerNorm``, ``nn.Embedding`` ...),
  listed in module order (``model.named_modules()``: the order the modules were registered,
  for most networks the order of the forward pass). Parameters of modules without
  ``reset_parameters`` (a bare ``nn.Parameter`` of a custom module) are never randomised:
  :func:`randomisable_layers` lists what is.
* Randomising a layer calls its own ``reset_parameters()``, so it is re-initialised as at
  construction, drawing from ``torch.manual_seed(seed + j)``, j its position in module order
  (``same_seed=True``: ``seed`` for every layer, as Quantus 0.6, whose ``seed`` s draws every
  layer from s + 1). The draws are made in ``torch.random.fork_rng``: the caller's global
  random state is left as it was. They depend on the parameters' device (CPU and CUDA
  generators differ).
* BatchNorm: ``reset_parameters()`` also resets the running statistics (mean 0, variance 1,
  no batches tracked) and sets weight 1, bias 0, so a randomised BatchNorm layer in eval mode
  is the identity up to its eps. The running statistics are learned from the training data as
  much as the weights are (they are the statistics of the trained layers below), so keeping
  them would keep trained information in a "randomised" layer; the layer's own initialiser
  resets them, and Quantus 0.6 (``get_random_layer_generator``) does the same.
* ``"cascading"``: from the top (last) layer down, each step adding one more randomised layer
  to those before; ``"independent"``: one layer at a time, every other layer as trained; both
  yield the layers top down. ``"bottom_up"``: cascading from the first layer up, the order
  Hedström et al. (2023) recommend for the smooth MPRT (``evaluators.sanity.mprt_variants``;
  Quantus's ``layer_order="bottom_up"``). After the last step of either cascade every layer is
  randomised: the same network, whichever the order.

:func:`randomised_models` yields ``(layer_name, randomised_model)``: one deep copy of the model,
changed in place from one step to the next (``copy.deepcopy`` it to keep a step); the user's
model is never modified.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import torch
from torch import nn

from foundation.errors import InputError
from foundation.seeds import check_seed

MODES = ("cascading", "independent", "bottom_up")


def randomisable_layers(model: nn.Module) -> list[str]:
    """Names of the layers :func:`randomised_models` re-initialises, in module order."""
    if not isinstance(model, nn.Module):
        raise InputError(f"model of type {type(model).__name__}; expected a torch.nn.Module classifier")
    return [name for name, module in model.named_modules()
            if callable(getattr(module, "reset_parameters", None))
            and (next(module.parameters(recurse=False), None) is not None
                 or next(module.buffers(recurse=False), None) is not None)]  # fmt: skip


def reinitialise(module: nn.Module, seed: int) -> None:
    """``module.reset_parameters()`` drawing from ``torch.manual_seed(seed)``, the global random
    state (CPU and the module's CUDA devices) restored afterwards."""
    devices = sorted({t.device.index or 0 for t in [*module.parameters(), *module.buffers()] if t.is_cuda})
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        module.reset_parameters()


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise InputError(f"option mode={mode!r}; expected one of {list(MODES)}")


def randomised_models(model: nn.Module, mode: str = "cascading", seed: int = 0,
                      same_seed: bool = False) -> Iterator[tuple[str, nn.Module]]:  # fmt: skip
    """``(layer_name, randomised_model)`` per layer, top layer first for ``"cascading"`` and
    ``"independent"``, first layer first for ``"bottom_up"`` (the module docstring): one deep
    copy changed in place between steps."""
    check_mode(mode)
    seed = check_seed(seed)
    names = randomisable_layers(model)
    if not names:
        raise InputError(f"model {type(model).__name__} has no layer to randomise (a module with "
                         "reset_parameters() and parameters of its own)")  # fmt: skip
    position = {name: j for j, name in enumerate(names)}
    original = dict(model.named_modules())
    randomised = copy.deepcopy(model)
    modules = dict(randomised.named_modules())
    previous = None
    for name in names if mode == "bottom_up" else reversed(names):
        if mode == "independent" and previous is not None:
            modules[previous].load_state_dict(original[previous].state_dict())
        reinitialise(modules[name], seed if same_seed else seed + position[name])
        previous = name
        yield name, randomised


__all__ = ["MODES", "randomisable_layers", "randomised_models", "reinitialise"]
