"""Keep the broker's megabyte-sized buffers in the heap instead of fresh ``mmap``s.

A broker moves record data in buffers of up to a few MiB: a Produce request, a ``pread`` of a
log range, a ReplicaFetch response on both ends, gRPC's message slices. glibc serves allocations
above ``M_MMAP_THRESHOLD`` with a private ``mmap`` and unmaps them on free, and it gives the top
of the heap back to the kernel above ``M_TRIM_THRESHOLD``; either way the next buffer of the same
size starts as untouched pages, and the kernel zero-fills them one 4 KiB page fault at a time.
Measured on a 3-broker RF=3 acks=all run (8 partitions, 1 KiB records, 2 cores): 500-800 minor
faults and ~1.6-2.1 ms of system CPU per replicated MB per broker with glibc's (dynamic)
defaults, ~30 faults and ~0.7-0.9 ms with the thresholds below, and 135-149 -> 182-197 MB/s
end to end; RSS after the run grew by ~10 MB per broker (benchmarks/README.md).

Fixed thresholds are what ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` would set
(they also turn off glibc's dynamic adjustment); an operator who sets either variable keeps
their value, and ``STROM_MALLOC_TUNING=0`` turns this off. Not glibc (musl, macOS): nothing to do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform
from collections.abc import Mapping

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD_BYTES = 16 << 20
"""Above the largest buffers of the default sizes (1 MiB per partition and fetch, 10 MiB per
ReplicaFetch response) so that they come from the heap and are reused."""

TRIM_THRESHOLD_BYTES = 32 << 20
"""Free memory kept at the top of the heap for the next buffers (RSS bound of the tuning)."""

_ENV_OVERRIDES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def plan(environ: Mapping[str, str], libc: str) -> list[tuple[int, int]]:
    """The ``mallopt`` calls to make: none off glibc, when turned off, or when the operator
    set glibc's own variables (theirs win)."""
    if libc != "glibc" or environ.get("STROM_MALLOC_TUNING", "1").strip() in ("0", "false"):
        return []
    if any(name in environ for name in _ENV_OVERRIDES):
        return []
    return [(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES), (M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)]


def tune(environ: Mapping[str, str]) -> bool:
    """Apply :func:`plan` to this process; True if thresholds were set. Call it before gRPC
    starts its threads, so their first buffers already follow the thresholds."""
    calls = plan(environ, platform.libc_ver()[0])
    if not calls:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = all(mallopt(param, value) == 1 for param, value in calls)
    if ok:
        log.debug("malloc: mmap threshold %d MiB, trim threshold %d MiB",
                  MMAP_THRESHOLD_BYTES >> 20, TRIM_THRESHOLD_BYTES >> 20)
    return ok
