"""A network given by name on train.py's command line (``--model.net``, of ``Classifier`` and
``ModulePopulation``): a class, or a function returning the network (``torchvision.models.resnet18``,
``timm.create_model``), and the options the datamodule sets on it.

A function's options that its signature only takes as ``**kwargs`` (``timm.create_model``'s
``num_classes``, ``in_chans``, ...) live in the config's ``dict_kwargs`` beside its ``init_args``
(jsonargparse's form, which the run's config.yaml records); :func:`net_kwargs` gives both as one
set of keyword arguments, the form a network is built from (``classifier.build_seeded``).

:func:`one_net_option` gathers ``--model.net X --model.net.KEY V ...`` into a single
``--model.net {class_path, init_args, dict_kwargs}`` option: jsonargparse cannot take a
``**kwargs`` option as ``--model.net.KEY``, and a second ``--model.net.KEY`` of a function
ends inside it (``add_function_arguments() got an unexpected keyword argument 'linked_targets'``,
raised where the model has linked options such as ``num_classes``).
"""

from __future__ import annotations

import importlib
import inspect
import json

from jsonargparse import Namespace

NET_FLAGS = ("--model.net", "--model.init_args.net")
NET_OPTIONS = {"in_features": "num_features", "num_classes": "num_classes", "in_channels": "in_channels",
               "in_chans": "in_channels"}  # a network's option: the datamodule's property that sets it
# factories whose every network takes these data-determined options through **kwargs
KWARGS_OPTIONS = {"timm.create_model": ("num_classes", "in_chans"),
                  "timm.models.create_model": ("num_classes", "in_chans")}  # fmt: skip


def net_kwargs(config: dict) -> dict:
    """A network config ``{class_path, init_args[, dict_kwargs]}`` as ``{class_path, init_args}``,
    the ``dict_kwargs`` among the ``init_args`` (the arguments the network is called with)."""
    init_args = {**dict(config.get("init_args") or {}), **dict(config.get("dict_kwargs") or {})}
    return {"class_path": config["class_path"], "init_args": init_args}


def _parameters(class_path: str) -> dict:
    """The parameters of the class or function at ``class_path`` (``module.name``); none where it is
    not importable or has no signature (jsonargparse then reports it, in its own words)."""
    module, _, name = class_path.rpartition(".")
    try:
        return dict(inspect.signature(getattr(importlib.import_module(module), name)).parameters)
    except (ImportError, AttributeError, ValueError, TypeError):
        return {}


def _split(args: list[str], i: int) -> tuple[str, str | None, int]:
    """The option at ``args[i]``: its flag, its value (``--flag=value`` or the next argument) and
    the index after it."""
    flag, eq, value = args[i].partition("=")
    if eq:
        return flag, value, i + 1
    return flag, (args[i + 1] if i + 1 < len(args) else None), i + 2


def one_net_option(args: list[str]) -> list[str]:
    """``args`` with a network named by class path on the command line and its ``--model.net.KEY V``
    options given as one ``--model.net {class_path, init_args, dict_kwargs}`` (JSON; the values
    as typed, which jsonargparse then checks against the signature) after the last other
    ``--model`` option (a ``--model.KEY`` after a function's options meets the same failure as a
    second ``--model.net.KEY``): a KEY that the class or function has no parameter for, where it
    takes ``**kwargs``, goes to ``dict_kwargs`` (so does ``--model.net.dict_kwargs.KEY``).
    Unchanged where no ``--model.net`` names a class path."""
    out, spec, at = [], None, 0
    i = 0
    while i < len(args):
        flag, value, after = _split(args, i)
        if not (flag == "--model" or flag.startswith("--model.")) or value is None:
            out.append(args[i])
            i += 1
            continue
        net_flag = next((f for f in NET_FLAGS if flag == f or flag.startswith(f + ".")), None)
        key = flag[len(net_flag) + 1:] if net_flag else None
        section, _, name = (key or "").rpartition(".")
        if net_flag is None:  # another --model option, with its value
            out.extend(args[i:after])
            at = len(out)
        elif not key and value.lstrip().startswith("{"):  # a whole config: as given
            return args
        elif not key:
            spec, at = {"class_path": value, "init_args": {}, "dict_kwargs": {}}, len(out)
        elif spec is None or section not in ("", "init_args", "dict_kwargs"):
            return args  # options of a network named in a config file, or of a class nested in it: as given
        else:
            spec[section or "init_args"][name] = value
        i = after
    if spec is None:
        return args
    parameters = _parameters(spec["class_path"])
    if any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        for name in [n for n in spec["init_args"] if n not in parameters]:
            spec["dict_kwargs"][name] = spec["init_args"].pop(name)
    spec = {k: v for k, v in spec.items() if v or k == "class_path"}
    return [*out[:at], "--model.net", json.dumps(spec), *out[at:]]


def net_options_from_data(net: Namespace | None, data) -> dict:
    """The options of a network config (``class_path``, ``init_args``, ``dict_kwargs``) that the
    datamodule sets and that differ from it, as ``{(section, option): value}``: ``in_features``
    (a table's encoded width), ``num_classes``, ``in_channels`` / ``in_chans`` (images), each where
    the network's signature has it, it was given among the ``dict_kwargs``, or the network's
    factory takes it (``KWARGS_OPTIONS``: timm's ``create_model``)."""
    if not isinstance(net, Namespace) or not isinstance(getattr(net, "init_args", None), Namespace):
        return {}
    dict_kwargs = getattr(net, "dict_kwargs", None) or {}
    taken = KWARGS_OPTIONS.get(net.class_path, ())
    changed = {}
    for option, prop in NET_OPTIONS.items():
        if not hasattr(type(data), prop):
            continue
        value = getattr(data, prop)
        if option in net.init_args and net.init_args[option] != value:
            changed["init_args", option] = value
        elif option not in net.init_args and (option in dict_kwargs or option in taken):
            if dict_kwargs.get(option) != value:
                changed["dict_kwargs", option] = value
    return changed


def set_net_options(net: Namespace, changed: dict) -> None:
    """Set the options :func:`net_options_from_data` found in the network config ``net``."""
    for (section, option), value in changed.items():
        if section == "init_args":
            net.init_args[option] = value
        else:
            net.dict_kwargs = {**(getattr(net, "dict_kwargs", None) or {}), option: value}
