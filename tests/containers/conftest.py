"""Fixtures shared by the sandbox tests: a pool of base-image sandboxes and a fresh sandbox of it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sparring.containers.base_image import BASE_IMAGE
from tests.containers.sandbox_helpers import docker_ready


@pytest.fixture(scope="module")
def pool() -> Iterator[Any]:
    """Two base-image sandboxes kept started, with a 30 s command timeout."""
    from sparring.containers.sandbox import SandboxLimits, SandboxPool

    docker_ready()
    with SandboxPool(BASE_IMAGE, size=2, limits=SandboxLimits(exec_timeout=30)) as p:
        yield p


@pytest.fixture
def box(pool: Any) -> Iterator[Any]:
    """A fresh sandbox of ``pool``, released after the test."""
    sandbox = pool.acquire()
    yield sandbox
    pool.release(sandbox)
