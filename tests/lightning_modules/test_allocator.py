"""glibc's allocator told to keep freed memory (lightning_modules/allocator.py): applied where
the C library is glibc (``platform.libc_ver``), refused quietly elsewhere, and once per process."""

from __future__ import annotations

import ctypes.util
import platform

from lightning_modules import allocator


def test_applied_on_glibc_and_once():
    expected = platform.libc_ver()[0] == "glibc"
    assert allocator.retain_freed_memory() is expected
    assert allocator.retain_freed_memory.cache_info().currsize == 1
    assert allocator.HEAP_BLOCK_BYTES == 32 * 2**20  # glibc's largest M_MMAP_THRESHOLD on 64-bit (mallopt(3))


def test_another_c_library_is_left_alone(monkeypatch):
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "/no/such/libc.so")
    allocator.retain_freed_memory.cache_clear()
    try:
        assert allocator.retain_freed_memory() is False
    finally:
        allocator.retain_freed_memory.cache_clear()
