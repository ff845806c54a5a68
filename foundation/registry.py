"""One registry shape for everything a user chooses by name: explainers, metrics, aggregators,
protocols, ensembles, populations, datasets and architectures (timm's ``@register_model``).

A registry is filled at the definitions, by a decorator::

    EXPLAINERS = Registry("explainer", page="explainers.md")

    @EXPLAINERS.register("saliency", modalities=("rows", "images"), needs=("target",), linear=True)
    def saliency(model, x, target, max_batch, **options): ...

and read through one interface: ``EXPLAINERS["saliency"]`` (an :class:`Entry`; an unknown name
is an ``InputError`` naming the choices), ``EXPLAINERS.names(modality="rows")``, ``"x" in
EXPLAINERS``. Every entry declares the same traits: what it applies to (``modalities``), what it
reads beyond its inputs (``needs``: a target, baselines, a model, maps, ...), for a score its
direction (``higher_is_better``), its documented ``defaults`` (by default the keyword defaults of
its signature), and a one-line ``help`` (by default its docstring's first sentence). Traits proper
to one kind (an explainer's ``linear``, a protocol's ``resumable``) are keyword arguments kept in
``extra`` and read as attributes of the entry; the registry's ``traits`` give their defaults.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from foundation.errors import InputError
from foundation.modality import MODALITIES

ALL_MODALITIES = tuple(MODALITIES)  # foundation.modality's, registered at its import: ("rows", "images")


def _first_sentence(obj: Any) -> str:
    """The first sentence of ``obj``'s docstring (of its first paragraph), on one line."""
    doc = getattr(obj, "__doc__", None) or ""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def _signature_defaults(obj: Any) -> dict[str, Any]:
    """The keyword defaults of ``obj``'s signature (a class: of its ``__init__``); {} if it has none."""
    try:
        parameters = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):  # not callable, or a builtin without a signature
        return {}
    return {p.name: p.default for p in parameters
            if p.default is not p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}  # fmt: skip


@dataclass(frozen=True)
class Entry:
    """One registered name: ``obj`` (the function, class or spec registered) and its traits."""

    name: str
    obj: Any
    help: str = ""
    modalities: tuple[str, ...] = ALL_MODALITIES
    needs: tuple[str, ...] = ()
    higher_is_better: bool | None = None
    defaults: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __getattr__(self, key: str) -> Any:
        # only reached for names that are not fields: a kind's own traits
        extra = self.__dict__.get("extra", {})
        if key in extra:
            return extra[key]
        raise AttributeError(f"{type(self).__name__} {self.__dict__.get('name')!r} has no trait {key!r}")

    def applies_to(self, modality: str | None) -> bool:
        """Whether the entry applies to ``modality`` (None: to any)."""
        return modality is None or modality in self.modalities

    def __call__(self, *args, **kwargs):
        return self.obj(*args, **kwargs)


class Registry:
    """Names of one ``kind`` (``"explainer"``, ``"metric"``, ...) and their :class:`Entry`;
    ``page``: the docs page that describes them (named in the error for an unknown name);
    ``traits``: the kind's own traits and their defaults, for an entry that does not give them."""

    def __init__(self, kind: str, page: str | None = None, traits: Mapping[str, Any] | None = None) -> None:
        self.kind, self.page = kind, page
        self.traits = MappingProxyType(dict(traits or {}))
        self._entries: dict[str, Entry] = {}

    def register(self, name: str | None = None, *, help: str | None = None,
                 modalities: tuple[str, ...] = ALL_MODALITIES, needs: tuple[str, ...] = (),
                 higher_is_better: bool | None = None, defaults: Mapping[str, Any] | None = None,
                 **extra: Any) -> Callable[[Any], Any]:  # fmt: skip
        """A decorator adding the decorated function or class under ``name`` (default: its
        ``__name__``) with these traits; it returns the object unchanged."""

        def decorator(obj: Any) -> Any:
            self.add(name or obj.__name__, obj, help=help, modalities=modalities, needs=needs,
                     higher_is_better=higher_is_better, defaults=defaults, **extra)  # fmt: skip
            return obj

        return decorator

    def add(self, name: str, obj: Any, *, help: str | None = None, modalities: tuple[str, ...] = ALL_MODALITIES,
            needs: tuple[str, ...] = (), higher_is_better: bool | None = None,
            defaults: Mapping[str, Any] | None = None, **extra: Any) -> Entry:  # fmt: skip
        """Registers ``obj`` under ``name`` where a decorator cannot sit (an object built by a
        factory); a name registered twice is an error; ``defaults`` None: ``obj``'s signature's."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        unknown = set(modalities) - set(MODALITIES)  # foundation.modality's: rows, images and any registered there
        if unknown:
            raise ValueError(f"{self.kind} {name!r}: unknown modalities {sorted(unknown)}; "
                             f"expected {sorted(MODALITIES)}")  # fmt: skip
        defaults = _signature_defaults(obj) if defaults is None else defaults
        traits = MappingProxyType({**self.traits, **extra})
        entry = Entry(name, obj, _first_sentence(obj) if help is None else help, tuple(modalities), tuple(needs),
                      higher_is_better, MappingProxyType(dict(defaults)), traits)  # fmt: skip
        self._entries[name] = entry
        return entry

    def __getitem__(self, name: str) -> Entry:
        entry = self._entries.get(name)
        if entry is None:
            where = f" (docs/{self.page})" if self.page else ""
            raise InputError(f"unknown {self.kind} {name!r}; expected one of {self.names()}{where}")
        return entry

    def get(self, name: str, default: Any = None) -> Entry | Any:
        return self._entries.get(name, default)

    def names(self, modality: str | None = None, **traits: Any) -> list[str]:
        """The registered names in registration order, those applying to ``modality`` and
        whose traits equal ``traits`` (fields or ``extra``) only."""
        return [name for name, entry in self._entries.items() if entry.applies_to(modality)
                and all(getattr(entry, k, None) == v for k, v in traits.items())]  # fmt: skip

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def items(self):
        return self._entries.items()

    def values(self):
        return self._entries.values()

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self)} names)"


__all__ = ["ALL_MODALITIES", "Entry", "Registry"]
