"""Procedural bugs into a store, the repair env drawing from it, SWE-bench export, the CLI."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sparring.envs.swe.bugs.artifact import diff_files, reverse_diff
from sparring.envs.swe.bugs.store import weaken_tests
from sparring.envs.swe.runs import GIT
from tests.envs.swe.bugs import pool  # noqa: F401

TEST_FILE = '''import pytest


def test_a():
    assert 1 + 1 == 2


class TestB:
    @pytest.mark.parametrize("x", [1, 2])
    def test_c(self, x):
        """Docstring."""
        y = x * 2
        assert y > x
'''


def test_weaken_tests_replaces_bodies_of_the_named_tests_only() -> None:
    out = weaken_tests("tests/t.py", TEST_FILE, ["tests/t.py::TestB::test_c[1]", "tests/other.py::test_a"])
    assert "assert 1 + 1 == 2" in out and "assert y > x" not in out and "Docstring" not in out
    assert "    def test_c(self, x):\n        pass\n" in out
    compile(out, "t.py", "exec")
    assert weaken_tests("tests/t.py", TEST_FILE, ["tests/t.py::test_zzz"]) == ""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two validated procedural bugs of inflection in a private SPARRING_HOME."""
    from tests.envs.swe.bugs import repo_image

    repo_image()
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("SPARRING_HOME", str(home))
    from sparring.envs.swe.bugs.store import generate_bugs

    report = generate_bugs("inflection", 2, seed=1)
    assert len(report.saved) == 2, report
    assert report.tried >= 2 and len(report.valid_seconds) == 2
    yield home
    mp.undo()


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_store_feeds_the_repair_env(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARRING_HOME", str(store))
    from sparring.envs.swe.bugs.store import load_bugs, load_repair_tasks
    from sparring.envs.swe.repair_env import SWERepairEnv

    bugs = load_bugs("inflection")
    assert len(bugs) == 2
    for artifact, validation, image in bugs:
        assert artifact.origin.startswith("procedural:") and validation.valid and validation.fail_to_pass
        assert image == "sparring-repo/inflection:0.5.1"
    tasks = load_repair_tasks(repos=["inflection"])
    assert {t["id"] for t in tasks} == {a.bug_id for a, _, _ in bugs}
    env = SWERepairEnv(max_turns=3)  # no tasks given: the store supplies them
    try:
        _, info = env.reset(seed=0)
        assert info["task"]["id"] in {t["id"] for t in tasks}
        _, reward, terminated, _, info = env.step("<submit>nothing changed</submit>")
        assert terminated and reward == -1.0 and info["outcome"]["failing"]
    finally:
        env.close()


def _git_apply(box: Any, diff: str) -> None:
    """Apply a unified diff to the container's /repo (as the harness does, as root)."""
    box.put_file("/tmp/sparring-test.diff", diff, user="root")
    applied = box.exec(f"{GIT} apply /tmp/sparring-test.diff", workdir="/repo", user="root", timeout=60)
    assert applied.ok, applied.stderr


def _node_ids(test_ids: list[str]) -> str:
    """A pytest command that runs exactly these test ids (the repository's addopts left out)."""
    return "python -m pytest -o addopts= " + " ".join(shlex.quote(t) for t in test_ids)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_stored_bugs_are_solved_by_their_reverse(store: Path, monkeypatch: pytest.MonkeyPatch, pool: Any) -> None:  # noqa: F811
    """Generated bugs take the original code's results from the image's clean runs; grading proves them solvable."""
    monkeypatch.setenv("SPARRING_HOME", str(store))
    from sparring.envs.swe.bugs.store import load_bugs
    from sparring.envs.swe.grading import SolverChanges, changes_between, grade_repair, setup_solver_repo, snapshot

    bugs = load_bugs("inflection")
    assert len(bugs) == 2
    for artifact, validation, _ in bugs:
        box = pool.acquire()  # the solver's repository: bug and weakening applied, one fresh commit
        try:
            setup_solver_repo(box, artifact)
            before = snapshot(box)
            _git_apply(box, reverse_diff(artifact.bug_inject_diff))
            changes = changes_between(before, snapshot(box))
        finally:
            box.close()
        assert changes.paths == sorted(diff_files(artifact.bug_inject_diff))
        graded = grade_repair(
            pool, artifact, validation.expected, changes, timeout=120, fail_to_pass=validation.fail_to_pass
        )
        assert graded.solved, graded
        assert graded.passed == len(validation.expected)
        # and the grade can fail: leaving the bug in is not solved
        unchanged = grade_repair(pool, artifact, validation.expected, SolverChanges(), timeout=120)
        assert not unchanged.solved and set(unchanged.failing) == set(validation.fail_to_pass), unchanged


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_export_swe_instances(store: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pool: Any) -> None:  # noqa: F811
    monkeypatch.setenv("SPARRING_HOME", str(store))
    import datasets

    from sparring.cli import app
    from sparring.envs.swe.testing import run_tests

    out = tmp_path / "export"
    result = CliRunner().invoke(app, ["export", "swe-instances", "--out", str(out), "--repo", "inflection"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["instances"] == 2
    rows = [json.loads(line) for line in (out / "instances.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        for key in ("instance_id", "repo", "version", "patch", "test_patch", "image"):
            assert row[key], key
        # the instance's own image (its buggy state as base_commit), built on the repository's
        assert row["repo_image"] == "sparring-repo/inflection:0.5.1" and row["image"].startswith("sparring-swe/")
        fail_to_pass, pass_to_pass = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
        for ids in (fail_to_pass, pass_to_pass):
            assert isinstance(ids, list) and ids and all(isinstance(t, str) and "::" in t for t in ids), ids
        assert not set(fail_to_pass) & set(pass_to_pass)
        # the instance as SWE-bench uses it: the starting state, the oracle tests, then the fix
        box = pool.acquire()
        try:
            for diff in (row["bug_patch"], row["test_weaken_patch"], row["test_patch"]):
                _git_apply(box, diff)
            broken = run_tests(box, _node_ids(fail_to_pass), expected=fail_to_pass, timeout=120)
            assert set(fail_to_pass) <= broken.failing, broken.to_dict()  # the tests see the bug
            _git_apply(box, row["patch"])
            fixed = run_tests(box, _node_ids(fail_to_pass + pass_to_pass), expected=fail_to_pass + pass_to_pass)
        finally:
            box.close()
        assert fixed.ok and fixed.passing == set(fail_to_pass + pass_to_pass), fixed.to_dict()
    ds = datasets.load_from_disk(str(out / "dataset"))
    assert ds.num_rows == 2 and ds[0]["instance_id"] == rows[0]["instance_id"]
    listed = CliRunner().invoke(app, ["bugs", "list"])
    assert "inflection: 2" in listed.stdout


def test_cli_errors_are_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    monkeypatch.setenv("SPARRING_HOME", str(tmp_path))
    cmd = [sys.executable, "-m", "sparring.cli", "bugs", "generate", "--repo", "no-such-project", "--n", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "no-such-project" in done.stderr
