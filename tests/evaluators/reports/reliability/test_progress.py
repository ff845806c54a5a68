"""The report's progress lines: the time left estimated by hand from a fake clock, and the rate
at which lines are printed (the first step, then at most once every ``every`` seconds, the last)."""

from __future__ import annotations

from evaluators.reports.reliability.progress import Progress, eta


class Clock:
    """A clock that reads ``now``, moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_time_left_is_the_mean_step_time_times_the_steps_left():
    clock = Clock()
    clock.now = 130.0
    assert eta(100.0, 3, 10, clock) == "30 s elapsed, about 70 s left"  # 10 s a step, 7 steps left
    assert eta(100.0, 0, 10, clock) == "30 s elapsed"  # nothing to estimate from yet


def test_lines_come_after_the_first_step_then_at_most_every_interval_and_after_the_last():
    clock, lines = Clock(), []
    progress = Progress("saliency", 6, lines.append, every=10.0, clock=clock)
    for seconds, what in zip([4, 4, 4, 4, 1, 1], "abcdef"):  # steps end at 4, 8, 12, 16, 17, 18 s
        clock.now += seconds
        progress.step(what)
    assert lines == ["saliency: 1/6 a (4 s elapsed, about 20 s left)",   # first step: printed
                     "saliency: 4/6 d (16 s elapsed, about 8 s left)",   # 12 s after the last line
                     "saliency: 6/6 f (18 s elapsed, about 0 s left)"]   # the last step: always printed
