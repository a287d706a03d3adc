"""Keeping a CPU run's resident memory near what it holds, not what glibc's allocator kept.

A training process on CPU frees gigabytes at a time (a backward pass's activations, a
checkpoint's serialised copy, finished episodes' KV caches) from several threads (the episode
runner's, torch's). glibc gives each thread that allocates an arena of its own and returns little
of what is freed in them to the system, so the resident size climbs towards the sum of the
phases' peaks. Two calls keep it near the live size: fewer arenas from the start, and
``malloc_trim`` after each phase that freed a lot. Both are no-ops off glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import resource
import sys

__all__ = ["limit_arenas", "peak_rss_gib", "release"]

_M_ARENA_MAX = -8  # mallopt parameter of glibc's malloc.h


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim  # noqa: B018 - glibc only (musl has no malloc_trim)
        return libc
    except (OSError, AttributeError):
        return None


def limit_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas (call before the worker threads start); True when it applied."""
    libc = _libc()
    return bool(libc is not None and libc.mallopt(_M_ARENA_MAX, arenas))


def release() -> None:
    """Collect garbage and hand the allocator's free memory back to the system."""
    gc.collect()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def peak_rss_gib() -> float:
    """Peak resident memory of this process so far, in GiB (``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**30
