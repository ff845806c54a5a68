"""Seeds of the explainers' random draws (``evaluators.maps``): no explainer draws from a
generator its caller has not seeded through it.

Every explainer, for every model, draws each input's samples from its own seed,
:func:`input_seeds`: :func:`derived_seed` (seed, the input's index in its split). A map then
depends on (seed, index) alone, not on the chunking or on which other inputs share the call (a
population member's copy of an input gets that input's seed, so its map is the member's own).
Methods that are Captum's and draw from the global generators (LIME, KernelSHAP) explain each
input in a call of its own within :func:`seeded_generators` of its seed, which seeds them and
restores them afterwards.
"""

from __future__ import annotations

import numbers
import random
from contextlib import contextmanager

import numpy as np
import torch

from foundation.errors import InputError


def check_seed(seed) -> int:
    """``seed`` as an int; an ``InputError`` unless it is a non-negative integer."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise InputError(f"option seed={seed!r}; expected a non-negative integer")
    return int(seed)


def derived_seed(*keys: int) -> int:
    """A seed in [0, 2^32) from non-negative integer keys: NumPy's
    ``SeedSequence(keys).generate_state(1)[0]``; different keys give independent streams."""
    return int(np.random.SeedSequence([check_seed(k) for k in keys]).generate_state(1)[0])


def input_index(index, n: int) -> list[int]:
    """The inputs' indices in their split as a list: ``index`` ((n,) non-negative integers),
    or 0 … n − 1 where None."""
    if index is None:
        return list(range(n))
    index = torch.as_tensor(index)
    if index.shape != (n,) or index.is_floating_point() or bool((index < 0).any()):
        raise InputError(f"option index of shape {tuple(index.shape)} ({index.dtype}); expected ({n},) non-negative "
                         "integers, one per input")  # fmt: skip
    return index.tolist()


def input_seeds(seed: int, index, n: int) -> list[int]:
    """Input i's seed, ``derived_seed(seed, index[i])`` (``index`` None: 0 … n − 1)."""
    return [derived_seed(check_seed(seed), i) for i in input_index(index, n)]


@contextmanager
def seeded_generators(seed: int, device: torch.device):
    """Within the block, the global generators a Captum method may draw from (torch's on the
    CPU and on ``device``, NumPy's, Python's ``random``) start from ``seed``
    (``torch.manual_seed(seed)``, ``np.random.seed(seed mod 2^32)``, ``random.seed(seed)``);
    after it, each is back in the state it had before."""
    seed = check_seed(seed)
    devices = [device] if device.type == "cuda" else []
    numpy_state, python_state = np.random.get_state(), random.getstate()
    with torch.random.fork_rng(devices=devices):
        torch.random.default_generator.manual_seed(seed)
        for d in devices:
            with torch.cuda.device(d):
                torch.cuda.manual_seed(seed)
        np.random.seed(seed % 2**32)
        random.seed(seed)
        try:
            yield
        finally:
            np.random.set_state(numpy_state)
            random.setstate(python_state)
