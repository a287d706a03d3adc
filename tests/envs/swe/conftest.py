"""Fixtures shared by the sandbox tests: a pool of base-image sandboxes and a fresh sandbox of it.

Test modules that define their own ``pool`` (a repository image's, from ``bugs.py``) override it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sparring.envs.swe.base_image import BASE_IMAGE
from tests.envs.swe.sandbox_helpers import docker_ready


@pytest.fixture(scope="module")
def pool() -> Iterator[Any]:
    """Two base-image sandboxes kept started, with a 30 s command timeout."""
    from sparring.envs.swe.sandbox import SandboxLimits, SandboxPool

    docker_ready()
    with SandboxPool(BASE_IMAGE, size=2, limits=SandboxLimits(exec_timeout=30)) as p:
        yield p


@pytest.fixture
def box(pool: Any) -> Iterator[Any]:
    """A fresh sandbox of ``pool``, released after the test."""
    sandbox = pool.acquire()
    yield sandbox
    pool.release(sandbox)
