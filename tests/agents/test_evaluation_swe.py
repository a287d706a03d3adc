"""``sparring eval swe`` in real containers: oracle 100%, do-nothing 0%, kill and resume, SWE-bench replay.

A small set (2 bugs of inflection, the store setup builds) keeps this to about a minute. The bugs
are copied into a private ``SPARRING_HOME``, so the set file that evaluation saves on first use
does not land in the user's home.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sparring import SparringError
from sparring.agents.evaluation.swe_instances import load_instance_file
from tests.agents.conftest import private_home, sparring

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = "inflection"
SET = ["--split", "train", "--repos", REPO, "--n-bugs", "2", "--seed", "0"]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private home holding a copy of the inflection bug store."""
    return private_home(tmp_path_factory, REPO, 2)


def outcomes(out: Path) -> list[tuple[Any, ...]]:
    """What must not depend on how the run went: instance, solved, reward, turns, reason."""
    report = json.loads((out / "report.json").read_text())
    return [(r["id"], r["solved"], r["reward"], r["turns"], r["reason"]) for r in report["records"]]


@pytest.fixture(scope="module")
def oracle(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted oracle run on the set."""
    out = tmp_path_factory.mktemp("oracle")
    run = sparring(home, "eval", "swe", "--model", "scripted:oracle", *SET, "--concurrency", "2", "--out", str(out))
    assert run.returncode == 0, run.stderr
    return out


@pytest.mark.timeout(600)
def test_the_oracle_solves_every_bug_and_doing_nothing_none(home: Path, oracle: Path, tmp_path: Path) -> None:
    out = tmp_path / "nothing"
    run = sparring(home, "eval", "swe", "--model", "scripted:do-nothing", *SET, "--concurrency", "2", "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["solve_rate"] == 0.0
    solved = json.loads((oracle / "report.json").read_text())
    unsolved = json.loads((out / "report.json").read_text())
    assert solved["instances"] == unsolved["instances"] and len(solved["instances"]) == 2  # same seed, same bugs
    for report, rate in ((solved, 1.0), (unsolved, 0.0)):
        assert report["summary"]["score"] == {"mean": rate, "ci": [rate, rate], "n": 2}
        assert report["by_group"][REPO]["mean"] == rate
        markdown = (Path(report["out"]) / "report.md").read_text()
        assert f"| solve rate | {rate:.3f} | [{rate:.3f}, {rate:.3f}] | 2 |" in markdown
        assert all(r["outcome"] and r["seconds"] > 0 and r["error"] is None for r in report["records"])
    assert unsolved["reasons"]["no_change"]["count"] == 2 and solved["reasons"] == {}
    assert all(r["changed_files"] for r in solved["records"])


@pytest.mark.timeout(600)
def test_a_run_stopped_halfway_resumes_to_the_same_report(home: Path, oracle: Path, tmp_path: Path) -> None:
    out = tmp_path / "stopped"
    args = ["eval", "swe", "--model", "scripted:oracle", *SET, "--concurrency", "1", "--out", str(out)]
    env = {**os.environ, "SPARRING_HOME": str(home), "COLUMNS": "250"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparring.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    records = out / "records.jsonl"
    deadline = time.monotonic() + 300
    while not (records.is_file() and records.read_text().count("\n") >= 1) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)  # during the second bug
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "interrupted: 1 of 2 instances are recorded" in stderr and "run the same command again" in stderr
    assert not (out / "report.json").exists()
    resumed = sparring(home, *args)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr and "1 of 2 instances done" in resumed.stderr
    assert records.read_text().count("\n") == 2  # the finished bug was not played again
    assert outcomes(out) == outcomes(oracle)


@pytest.mark.timeout(600)
def test_exported_instances_replay_in_their_repository_image(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARRING_HOME", str(home))
    from sparring.envs.swe.bugs.export import export_instances
    from sparring.envs.swe.repos.catalog import get_repo
    from sparring.envs.swe.repos.images import load_manifest

    export_instances(tmp_path / "export", [REPO], hf=False)
    rows = [json.loads(line) for line in (tmp_path / "export" / "instances.jsonl").read_text().splitlines()][:2]
    manifest = load_manifest(get_repo(REPO))
    assert manifest is not None
    assert {r["environment_setup_commit"] for r in rows} == {manifest.history[-1]["sha"]}  # the release's commit
    assert {r["repo_image"] for r in rows} == {get_repo(REPO).image}
    path = tmp_path / "two.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "replayed"
    run = sparring(home, "eval", "swe", "--model", "scripted:oracle", "--instances", str(path), "--out", str(out))
    assert run.returncode == 0, run.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["instances"] == [r["instance_id"] for r in rows] and report["summary"]["score"]["mean"] == 1.0
    path.write_text(json.dumps(rows[0] | {"environment_setup_commit": "0" * 40}) + "\n")
    with pytest.raises(SparringError, match="was set up from commit 000000000000, but sparring-repo/inflection"):
        load_instance_file(path)


@pytest.mark.timeout(300)
def test_set_errors_are_one_sentence(home: Path, tmp_path: Path) -> None:
    stored = len(list((home / "bugs" / REPO).iterdir()))
    cases = [
        (["--split", "train", "--repos", REPO, "--n-bugs", str(stored + 2), "--no-generate"], f"holds {stored} bug(s)"),
        (["--repos", REPO], "inflection is a train repository, not heldout; pass --split train"),
        (["--split", "test"], "unknown split 'test'"),
        (["--instances", str(tmp_path / "none.jsonl")], "no instance file at"),
    ]
    for args, says in cases:
        run = sparring(home, "eval", "swe", "--model", "scripted:oracle", "--out", str(tmp_path / "x"), *args)
        assert run.returncode == 2, (args, run.stderr)
        assert says in run.stderr and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
