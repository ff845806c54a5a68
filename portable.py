"""Portable mode: a CPU run that gives the same bits on any x86-64 CPU.

By default PyTorch picks the fastest kernels the CPU has, whose sums run in different
orders on different CPUs, and training turns those last bits into different models
(measurements: docs/reliability.md, "Same seed, same numbers"). Portable mode fixes every choice that
depends on the CPU:

* ``MKL_CBWR=COMPATIBLE``: MKL's conditional numerical reproducibility, the code branch
  that every x86-64 CPU runs the same way;
* ``ATEN_CPU_CAPABILITY=default``: ATen's kernels without AVX2/AVX-512 vectorisation;
* oneDNN off (``torch.backends.mkldnn.enabled = False``): convolutions by PyTorch's own
  im2col and MKL's matrix product, whose blocking does not depend on the CPU's caches;
* one thread (``OMP_NUM_THREADS=MKL_NUM_THREADS=1``, ``torch.set_num_threads(1)``): parallel
  reductions split by the thread count;
* numpy's and scipy's OpenBLAS on its generic kernels and one thread
  (``OPENBLAS_CORETYPE=Prescott``, ``OPENBLAS_NUM_THREADS=1``): scikit-learn's regressions
  behind LIME, KernelSHAP, Watson's logistic regression and the RBM aggregator otherwise run
  OpenBLAS's Haswell or SkylakeX kernels by CPU (measured: 26 LIME/KernelSHAP entries of the
  golden record change between the two).

It is asked for by ``--portable`` on ``train.py`` or ``evaluate.py`` or by the environment
variable ``RELIABLE_EXPLANATIONS_PORTABLE=1``; either overrides any of those variables the
environment already sets. The variables take effect only if set before ``torch`` is
imported, so the entry points call :func:`enable_if_asked` first, before any other import
of the project; a process that imported torch already cannot switch (an error says so).
It runs on one thread without oneDNN, so it is opt in; it is for CPU runs of one build of
torch and MKL (the pins in setup.cfg).
"""

from __future__ import annotations

import hashlib
import os
import sys

FLAG = "--portable"
ENV_VAR = "RELIABLE_EXPLANATIONS_PORTABLE"
SETTINGS = {
    "MKL_CBWR": "COMPATIBLE",
    "ATEN_CPU_CAPABILITY": "default",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_CORETYPE": "Prescott",
    "OPENBLAS_NUM_THREADS": "1",
}


def _fail(message: str) -> None:
    """End the process as the entry points end bad input: one line, exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def asked(argv: list[str]) -> bool:
    """Whether ``argv`` holds ``--portable`` or the environment variable is set to 1."""
    value = os.environ.get(ENV_VAR, "")
    if value not in ("", "0", "1"):
        _fail(f"environment variable {ENV_VAR}={value!r}; expected 1 (portable) or 0")
    return FLAG in argv or value == "1"


def enable_if_asked(argv: list[str]) -> bool:
    """Set :data:`SETTINGS` (and ``RELIABLE_EXPLANATIONS_PORTABLE=1``, so that processes this one
    starts inherit the mode) if ``argv`` or the environment asks for portable mode; remove
    ``--portable`` from ``argv``. Call before ``torch`` is imported. Returns whether it is on."""
    on = asked(argv)
    while FLAG in argv:
        argv.remove(FLAG)
    if not on:
        return False
    if "torch" in sys.modules and not is_active():
        _fail(f"{FLAG}: torch was imported before portable mode was set; expected it on the command line "
              f"of train.py or evaluate.py, or {ENV_VAR}=1 in the environment before Python starts")
    os.environ.update(SETTINGS)
    os.environ[ENV_VAR] = "1"
    return True


def is_active() -> bool:
    """Whether this process runs in portable mode (its environment holds every setting)."""
    return os.environ.get(ENV_VAR) == "1" and all(os.environ.get(k) == v for k, v in SETTINGS.items())


def configure_torch() -> None:
    """The settings made through torch's API; call after importing torch, in portable mode."""
    import torch

    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False


def describe() -> dict:
    """What a run's metrics record of the mode."""
    return {"portable": is_active(), **({"settings": dict(SETTINGS)} if is_active() else {})}


def weights_sha256(state_dict: dict) -> str:
    """SHA-256 over a ``state_dict`` in key order: each key, its tensor's dtype and shape, and
    its bytes as stored; equal digests mean bit-identical weights."""
    import torch  # imported by the caller already; here so that this module needs none at import

    digest = hashlib.sha256()
    for key in sorted(state_dict):
        tensor = state_dict[key].detach().cpu().contiguous()
        digest.update(f"{key}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
