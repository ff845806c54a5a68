"""Progress of a long section of the report, with an estimate of the time left.

``Progress(label, total)`` counts ``total`` steps of about equal cost (an explainer's unit: one
map computation of one member on every input, or one faithfulness metric of one member); after
step i of n, with t seconds elapsed since the first, the time left is estimated as
t / i · (n − i). A line ``<label>: <i>/<n> <what> (<t> s elapsed, about <left> s left)`` is
printed after the first step, then at most once every ``every`` seconds, and after the last.
"""

from __future__ import annotations

import time
from collections.abc import Callable

EVERY_S = 10.0  # seconds between two progress lines of one section


def eta(start: float, done: int, total: int, clock: Callable[[], float] = time.perf_counter) -> str:
    """Elapsed time since ``start`` and the estimate of the time left after ``done`` of ``total`` equal steps."""
    elapsed = clock() - start
    if not done:
        return f"{elapsed:.0f} s elapsed"
    return f"{elapsed:.0f} s elapsed, about {elapsed / done * (total - done):.0f} s left"


class Progress:
    """Steps of one section, printed with the time left (the module docstring)."""

    def __init__(self, label: str, total: int, out: Callable[[str], None] = print, every: float = EVERY_S,
                 clock: Callable[[], float] = time.perf_counter) -> None:  # fmt: skip
        self.label, self.total, self.out, self.every, self.clock = label, total, out, every, clock
        self.done, self.start, self.printed = 0, clock(), None

    def step(self, what: str = "") -> None:
        """One step done (``what``: which one, said in the line)."""
        self.done += 1
        now = self.clock()
        if self.printed is None or now - self.printed >= self.every or self.done == self.total:
            self.printed = now
            left = eta(self.start, self.done, self.total, self.clock)
            self.out(f"{self.label}: {self.done}/{self.total} {what} ({left})")


def quiet(what: str) -> None:
    """A step that nobody is told of."""
