"""The base of the fidelity and agreement metrics (evaluators/metrics/base.py): the mean over inputs
of per-input scores in float64 (against NumPy's), undefined scores left out and counted where the
metric says so, a mean of no defined score refused, and a metric that explains without ``explain_fn``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evaluators.metrics.base import MeanOverInputs, require_explain_fn
from foundation.errors import InputError


class RowSums(MeanOverInputs):
    """Score of an input: the sum of its map's row (NaN where the map holds one)."""

    def scores(self, model, x, maps, target, explain_fn):
        return maps.sum(1)


class LeavingOut(RowSums):
    leaves_out_undefined = True


def test_the_mean_of_float32_scores_over_updates_is_float64():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 3)).astype(np.float32), rng.normal(size=(2, 3)).astype(np.float32)
    metric = RowSums({})
    metric.update(None, torch.zeros(5, 3), torch.from_numpy(a))
    metric.update(None, torch.zeros(2, 3), torch.from_numpy(b))
    result = metric.compute()
    assert result.dtype == torch.float64 and int(metric.count) == 7
    expected = np.concatenate([a.sum(1), b.sum(1)]).astype(np.float64).mean()
    assert float(result) == pytest.approx(expected, rel=1e-12)


def test_undefined_scores_are_left_out_and_counted_or_refused():
    maps = torch.tensor([[1.0, 2.0], [float("nan"), 0.0], [3.0, 3.0]])
    leaving = LeavingOut({})
    leaving.update(None, maps, maps)
    assert float(leaving.compute()) == pytest.approx(4.5) and int(leaving.left_out) == 1 and int(leaving.count) == 2
    keeping = RowSums({})
    keeping.update(None, maps, maps)
    with pytest.raises(InputError, match=r"metric 'RowSums': 1 of 1 result value\(s\) not finite \(the mean of 3"):
        keeping.compute()
    nothing = LeavingOut({})
    nothing.update(None, maps[1:2], maps[1:2])
    with pytest.raises(InputError, match=r"the mean of 0 score\(s\), 1 undefined left out"):
        nothing.compute()


def test_scores_of_a_shape_per_input():
    metric = MeanOverInputs({}, shape=(2,))
    metric.add(torch.tensor([[1.0, float("nan")], [3.0, 4.0]]))
    with pytest.raises(InputError, match="1 of 2 result value"):
        metric.compute()
    metric = type("Left", (MeanOverInputs,), {"leaves_out_undefined": True})({}, shape=(2,))
    metric.add(torch.tensor([[1.0, float("nan")], [3.0, 4.0]]))  # a row with any NaN is left out whole
    assert metric.compute().tolist() == [3.0, 4.0] and int(metric.left_out) == 1


def test_a_metric_that_explains_needs_explain_fn():
    def fn(x, target):
        return x

    assert require_explain_fn(fn, RowSums({})) is fn
    with pytest.raises(InputError, match="RowSums.update needs explain_fn="):
        require_explain_fn(None, RowSums({}))
