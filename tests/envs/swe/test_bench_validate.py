"""`sparring bench validate` on the real inflection image leaves the bug store it would otherwise fill alone."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.envs.swe.bugs import REPO, repo_image

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]


def _files(root: Path) -> dict[str, int]:
    """Every path under ``root``, with its modification time."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def test_bench_validate_uses_a_temporary_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo_image()
    home, scratch = tmp_path / "home", tmp_path / "tmp"
    (home / "bugs" / REPO).mkdir(parents=True)
    scratch.mkdir()
    monkeypatch.setenv("SPARRING_HOME", str(home))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the temporary store goes
    from sparring.envs.swe.bench import bench_validate
    from sparring.envs.swe.bugs.store import load_bugs

    before = _files(home / "bugs")
    figures = bench_validate(REPO, n=1, seed=3)
    assert figures["bugs"] == 1 and figures["bugs_kept"] is False, figures
    assert figures["validate_seconds"] > 0 and figures["test_run_seconds"] > 0
    assert _files(home / "bugs") == before and load_bugs(REPO) == []  # the validated bug went elsewhere
    assert _files(scratch) == {}  # and that store is gone
