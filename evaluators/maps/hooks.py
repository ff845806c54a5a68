"""Models as Captum's module-hook explainers need them (DeepLift, DeepLiftShap, GuidedBackprop):
each ReLU an ``nn.ReLU`` module, called once per forward pass.

Captum's DeepLift keeps a ReLU's input and output on its module, so a module called twice in
one forward pass (torchvision's ``BasicBlock`` calls ``self.relu`` twice) is refused; both
methods override the gradient only at ``nn.ReLU`` modules, so a functional relu
(``torch.relu``, ``F.relu``, ``Tensor.relu``, in place or not) silently keeps its plain
gradient. :func:`hookable` gives such methods a deep copy of the model with one module per call
and functional relus rewritten as modules (torch.fx), or one ``InputError`` saying how to fix
the model; the user's model is never modified. In-place ReLU modules need nothing: Captum's
hooks clone their inputs (docs/explainers.md).
"""

from __future__ import annotations

import copy

import torch
from torch import fx, nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from foundation.errors import InputError

RELU_FUNCTIONS = frozenset({torch.relu, torch.relu_, F.relu, F.relu_, torch.Tensor.relu, torch.Tensor.relu_})
RELU_METHODS = ("relu", "relu_")


class _FunctionalRelus(TorchFunctionMode):
    """Counts calls of :data:`RELU_FUNCTIONS` made outside ``nn.ReLU`` modules (``inside``: the
    depth of ``nn.ReLU`` forward calls under way, kept by hooks)."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in RELU_FUNCTIONS and not self.inside:
            self.calls += 1
        return func(*args, **(kwargs or {}))


def _calls(model: nn.Module, x: torch.Tensor) -> tuple[dict[str, int], int]:
    """One forward pass of ``model`` on ``x[:1]``: calls per module without children (by name)
    and the number of functional relu calls outside ``nn.ReLU`` modules."""
    calls: dict[str, int] = {}
    mode = _FunctionalRelus()

    def enter(module, inputs):
        mode.inside += isinstance(module, nn.ReLU)

    def leave(module, inputs, output, name):
        mode.inside -= isinstance(module, nn.ReLU)
        calls[name] = calls.get(name, 0) + 1

    hooks = []
    for name, module in model.named_modules():
        if not list(module.children()):
            hooks += [module.register_forward_pre_hook(enter),
                      module.register_forward_hook(lambda m, i, o, name=name: leave(m, i, o, name))]  # fmt: skip
    try:
        with torch.no_grad(), mode:
            model(x[:1])
    finally:
        for hook in hooks:
            hook.remove()
    return calls, mode.calls


class _PerCall(nn.Module):
    """Stands for a module called ``calls`` times per forward pass: call k goes to copy k mod ``calls``."""

    def __init__(self, module: nn.Module, calls: int) -> None:
        super().__init__()
        self.copies = nn.ModuleList([copy.deepcopy(module) for _ in range(calls)])
        self.calls = 0

    def forward(self, *args):
        self.calls += 1
        return self.copies[(self.calls - 1) % len(self.copies)](*args)


def _relu_modules(model: nn.Module) -> fx.GraphModule:
    """``model`` traced by torch.fx, each functional relu call an ``nn.ReLU()`` module of its own
    (``functional_relu_<k>``); raises what torch.fx raises where ``model`` does not trace."""
    traced = fx.symbolic_trace(model)
    graph = traced.graph
    for k, node in enumerate([n for n in graph.nodes if (n.op == "call_function" and n.target in RELU_FUNCTIONS)
                              or (n.op == "call_method" and n.target in RELU_METHODS)]):  # fmt: skip
        traced.add_submodule(f"functional_relu_{k}", nn.ReLU())
        with graph.inserting_after(node):
            module_call = graph.call_module(f"functional_relu_{k}", (node.args[0],))
        node.replace_all_uses_with(module_call)
        graph.erase_node(node)
    graph.lint()
    traced.recompile()
    return traced.train(model.training)


def hookable(model: nn.Module, x: torch.Tensor, who: str) -> nn.Module:
    """``model`` where each of its ReLUs is an ``nn.ReLU`` module called once in a forward pass
    on ``x[:1]``; else a deep copy of it in which every functional relu is an ``nn.ReLU`` module
    (:func:`_relu_modules`) and every module without children called k > 1 times is k copies,
    call j going to copy j mod k. ``InputError`` naming ``who`` (the explainer or option) where functional relus
    remain (the model does not trace, or they are inside a module torch.fx keeps whole) or the
    model is TorchScript (which runs no module hooks)."""
    if any(isinstance(m, torch.jit.ScriptModule) for m in model.modules()):
        raise InputError(f"{who} acts through module hooks, which a TorchScript model does not run; expected the "
                         "model as a torch.export file, or its class and state dict")  # fmt: skip
    calls, functional = _calls(model, x)
    if not functional and all(n == 1 for n in calls.values()):
        return model
    model = copy.deepcopy(model)
    if functional:
        try:
            model = _relu_modules(model)
        except Exception as error:  # torch.fx raises many kinds on code it cannot trace
            raise InputError(_functional_message(who, functional, f"torch.fx cannot trace it ({error})"))
        calls, left = _calls(model, x)
        if left:
            raise InputError(_functional_message(who, left, "inside modules that torch.fx keeps whole"))
    for name, n in calls.items():
        if n > 1:
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, _PerCall(model.get_submodule(name), n))
    return model


def _functional_message(who: str, calls: int, why: str) -> str:
    return (f"{who} acts through Captum's hooks on nn.ReLU modules, and the model calls a "
            f"functional relu (torch.relu, F.relu or Tensor.relu) {calls} time(s) per forward pass outside "
            f"nn.ReLU modules, {why}: make each such ReLU an nn.ReLU module of its own")  # fmt: skip
