"""The golden record: the outputs the project's results depend on, pinned bit for bit on the CPU.

``tests/golden/record.json`` holds, per group, the SHA-256 of every tensor's dtype, shape and
bytes (with its sum and largest absolute value, so that a failure says how far off it is) for:

* ``tabular_explainers``: every ``TABULAR_EXPLAINERS`` method on an ``MLPClassifier``, a
  ``PopulationMLP`` and each ensemble (average, majority, perturb, connect, combine), with
  ``explain_output`` logit and probability; the registry's defaults on the MLP; DeepSHAP's
  rescale rule on the probability ensembles;
* ``ensemble_outputs``: the tabular ensembles' and the population's forward, explained output
  and predictions;
* ``image_explainers``: every ``IMAGE_EXPLAINERS`` method on a ResNet-8 and the small CNN;
* ``image_ensembles``: the five image ensembles of both, their outputs and three explainers;
* ``agreement``: every agreement function, separability and Watson's consistency;
* ``fidelity``: insertion/deletion, infidelity, faithfulness correlation, sensitivity, ROAD,
  relative stability and the model scores, on images and on rows;
* ``aggregation``: every normalisation, pixel aggregator and optimised aggregator, and the
  simplex QP;
* ``training``: a short population fit (``fit_population``, two chunks), a short image
  population fit (``ImagePopulation``, loop), a Bézier curve fit (alone and in a stack) and
  one tabular ROAR cell.

The record is computed by ``tests/golden/record.py`` in a subprocess in portable mode
(``portable.py``) with numpy's and scipy's OpenBLAS on its generic kernels too, so it holds on
any x86-64 CPU with the pinned packages. After a change that
must not move a number, every group must pass unchanged. To rewrite the record:

    .venv/bin/python -m tests.golden.record --write

Rewriting it is a decision: the closing note names the entries that changed and why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tests.support import ROOT

RECORD = ROOT / "tests" / "golden" / "record.json"
STORED = json.loads(RECORD.read_text())
PORTABLE_VARIABLES = ("RELIABLE_EXPLANATIONS_PORTABLE", "MKL_CBWR", "ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS",
                      "MKL_NUM_THREADS")  # fmt: skip


@pytest.fixture(scope="module")
def computed(tmp_path_factory) -> dict:
    """The record computed now, by ``tests.golden.record`` in a fresh process (portable mode
    must be set before torch is imported)."""
    out = tmp_path_factory.mktemp("golden") / "record.json"
    env = {k: v for k, v in os.environ.items() if k not in PORTABLE_VARIABLES}
    result = subprocess.run([sys.executable, "-m", "tests.golden.record", "--out", str(out)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(out.read_text())


def differences(stored: dict, now: dict, prefix: str = "") -> list[str]:
    """One line per entry that is missing, new or changed, with its summaries then and now."""
    lines = []
    for key in sorted(set(stored) | set(now)):
        name = f"{prefix}{key}"
        if key not in now:
            lines.append(f"{name}: missing now")
        elif key not in stored:
            lines.append(f"{name}: new (not in the record)")
        elif isinstance(stored[key], dict) and "sha256" not in stored[key]:
            lines += differences(stored[key], now[key], f"{name}/")
        elif stored[key] != now[key]:
            then, current = stored[key] or {}, now[key] or {}
            shown = [k for k in ("shape", "dtype", "sum", "absmax", "nan", "value")
                     if then.get(k) != current.get(k) or k in ("sum", "absmax")]  # fmt: skip
            lines.append(f"{name}: " + "; ".join(f"{k} {then.get(k)!r} -> {current.get(k)!r}" for k in shown))
    return lines


@pytest.mark.parametrize("group", sorted(STORED))
def test_golden_record_holds_bit_for_bit(computed, group):
    assert group in computed, f"group {group!r} is no longer computed"
    changed = differences(STORED[group], computed[group])
    assert not changed, f"{len(changed)} of {len(STORED[group])} entries of {group!r} changed:\n" + "\n".join(changed)


def test_every_computed_group_is_in_the_record(computed):
    assert sorted(computed) == sorted(STORED)
