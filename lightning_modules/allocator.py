"""Keep freed memory in the process between training or explanation steps (glibc).

glibc's ``malloc`` hands every block above its mmap threshold (128 KiB, adapting
up to the size of blocks freed) back to the kernel on ``free``. A stacked
population's activations are megabytes per layer and are freed and allocated
again at every step, so each step page-faults them back in (the speed gained:
docs/tabular_population.md). The memory a process keeps is its peak working set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
HEAP_BLOCK_BYTES = 32 * 2**20  # glibc's upper limit for M_MMAP_THRESHOLD on 64-bit
_TRIM_THRESHOLD = 2**30


@functools.cache
def retain_freed_memory() -> bool:
    """Serve blocks up to 32 MiB from the heap and keep up to 1 GiB of freed heap;
    True when applied (glibc), False elsewhere (other C libraries manage this themselves)."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, HEAP_BLOCK_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
