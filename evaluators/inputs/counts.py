"""How many inputs of a split a protocol option that counts them takes (``n_points``,
``n_inputs``, ``n_images``, ``n_background``, ``n_baselines``, ...), one rule for every protocol
(docs/reliability.md, "When something is wrong"):

* a positive number the split holds: that many;
* more than the split holds: an ``InputError`` naming the option, the number asked and the
  number the split holds;
* except the option's documented default, which means "up to that many" (``n_points: 1000`` on
  German Credit's 200 test rows): all of the split, with a warning naming the option and both numbers.
"""

from __future__ import annotations

import numbers
import warnings
from dataclasses import fields

from foundation.errors import InputError


def counted(option: str, asked, available: int, split: str, unit: str = "inputs", default: int | None = None) -> int:
    """The number of the ``available`` ``unit`` (rows, images) of ``split`` (e.g. "test split")
    that ``option=asked`` takes, by the module's rule; ``default``: the option's documented default."""
    if isinstance(asked, bool) or not isinstance(asked, numbers.Integral) or asked < 1:
        raise InputError(f"option {option}={asked!r}; expected a positive integer")
    if asked <= available:
        return int(asked)
    if asked == default:
        warnings.warn(f"option {option}={asked} (its default) is more than the {split}'s {available} {unit}: "
                      f"using all {available}", stacklevel=2)  # fmt: skip
        return available
    raise InputError(f"option {option}={asked}: the {split} has {available} {unit}; expected at most {available}")


def default_of(config, option: str):
    """The default of a config dataclass's ``option``."""
    return next(f.default for f in fields(config) if f.name == option)
