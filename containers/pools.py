"""Sandbox pools by image, shared by the SWE envs, validation and grading.

Each episode, validation run and grading run takes a fresh container (``pool.acquire()``) and
closes it afterwards; the pool keeps the next ones started so that costs little.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["PoolSet"]


class PoolSet:
    """Lazily made :class:`SandboxPool` per image; :meth:`close` is idempotent."""

    def __init__(self, size: int = 2, limits: Any = None, hosts: list[str] | None = None):
        """Pools of ``size`` pre-started containers with ``limits`` (the sandbox's defaults when None).

        ``hosts``: engine URLs they run on (default: the process's; :mod:`~sparring.containers.engines`).
        """
        from sparring.containers.engines import engine_hosts

        self.size = size
        self.limits = limits
        self.hosts = list(hosts) if hosts else None
        if hosts:
            engine_hosts(hosts)  # a malformed or unsafe URL is the caller's error now, not a pool thread's
        self._pools: dict[str, Any] = {}
        self._lock = threading.Lock()

    def pool(self, image: str) -> Any:
        """The pool of ``image``, made on first use."""
        with self._lock:
            if image not in self._pools:
                from sparring.containers.sandbox import SandboxPool

                kwargs = {"limits": self.limits} if self.limits is not None else {}
                self._pools[image] = SandboxPool(image, size=self.size, hosts=self.hosts, **kwargs)
            return self._pools[image]

    def acquire(self, image: str) -> Any:
        """A fresh container of ``image``; the caller closes it."""
        return self.pool(image).acquire()

    def close(self) -> None:
        """Close every pool and its containers."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
