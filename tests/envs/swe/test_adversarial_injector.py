"""The injector and the sandbox as an adversary would play them (issue 14, classes 6-9), on real containers.

Each class is played as a real episode or a real validation on the inflection image, and must end
invalid or capped, never valid, never an exception; the controls show that the layers leave real
bugs alone. The classes (docs/swe.md, "Threat model"):

6. the artifact's own test_script.sh / test_parser.py decide the verdict: a "bug" that is only a
   comment, with a script that runs nothing and a parser that reads the repository; a script that
   writes its own report or runs other tests; a parser that fails a repaired file;
7. a bug that is on only sometimes (hash seed, chance, clock, environment) or fails only by timeout;
8. filling the host's disk from a container (large, many small, sparse files, in every writable place);
9. making the harness read back more than it can hold (huge files, many files, deep trees, long names),
   or wait on what is not a file (a FIFO left where it reads the report).
"""

from __future__ import annotations

import json
import time
import tracemalloc
from dataclasses import replace
from typing import Any

import pytest

from sparring.envs.swe.bugs.artifact import BugArtifact, file_diff
from sparring.envs.swe.inject_env import SWEInjectEnv
from sparring.envs.swe.validation import MAX_ARTIFACT_BYTES, ValidationConfig, validate_artifact
from tests.conftest import require
from tests.envs.swe.bugs import (  # noqa: F401
    ORIGINAL_LINE,
    REPO,
    SOURCE,
    TESTS,
    files,
    good_artifact,
    hash_seed_bug,
    pool,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture(scope="module")
def env(pool: Any) -> Any:  # noqa: F811
    """One inject env for the module's episodes (each test resets it)."""
    e = SWEInjectEnv(max_turns=12, repos=[REPO])
    yield e
    e.close()


def _write(env: Any, artifact: BugArtifact, folder: str = "/tmp/bug") -> None:
    for name, text in artifact.files().items():
        obs, _, terminated, *_ = env.step(_call("create", path=f"{folder}/{name}", content=text))
        assert obs.startswith(f"Wrote {folder}/") and not terminated, obs


def _submit(env: Any, folder: str = "/tmp/bug") -> tuple[str, float, bool, dict[str, Any]]:
    obs, reward, terminated, _, info = env.step(f"<submit>{folder}</submit>")
    return obs, reward, terminated, info


# ------------------------------------------------------------------ class 6: the artifact decides


#: Reads the repository instead of any result: the ordinal tests "fail" while the comment is there.
READS_THE_REPO = """import json
ids = %s
marked = "# sparring: bug here" in open("inflection/__init__.py").read()
print(json.dumps({t: ("failed" if marked and "ordinal" in t else "passed") for t in ids}))
"""


def test_a_comment_bug_with_a_script_that_runs_nothing_is_invalid(env: Any, files: dict[str, str]) -> None:  # noqa: F811
    env.reset(seed=0)
    good, source = good_artifact(files), files[SOURCE]
    ids = [f"{TESTS}::test_ordinal[13-th]", f"{TESTS}::test_ordinalize[13-13th]", f"{TESTS}::test_camelize"]
    comment_only = replace(
        good,
        test_script="echo 'tests ran'\n",
        test_parser=READS_THE_REPO % json.dumps(ids),
        bug_inject_diff=file_diff(SOURCE, source, source + "# sparring: bug here\n"),
    )
    _write(env, comment_only)
    obs, reward, terminated, info = _submit(env)
    outcome = info["outcome"]
    # the harness ran the tests itself: nothing fails, whatever the parser says
    assert terminated and reward == -1.0 and not outcome["valid"], outcome
    assert outcome["reason"] == "failing_after_bug" and "0 passing test(s) fail" in outcome["detail"]
    assert "solver_task" not in outcome


#: A script that writes its own JUnit report: the real run's report, with every probe dropped and
#: the failures it wants, read from the repository.
OWN_REPORT = """cd /repo
python -m pytest -p no:cacheprovider -q -o junit_family=xunit1 --junitxml=/tmp/real.xml test_inflection.py > /dev/null
python3 - <<'EOF'
import os
import xml.etree.ElementTree as ET
tree = ET.parse("/tmp/real.xml")
for suite in tree.getroot().iter("testsuite"):
    for case in [c for c in suite if c.tag == "testcase" and "sparring_probe" in c.get("name", "")]:
        suite.remove(case)
tree.write(os.environ["SPARRING_JUNIT"])
EOF
"""

#: An honest parser of the JUnit report, except that it fails the ordinal tests whenever the code file was
#: rewritten since the image was built, so even the exact original file, restored by a solver, is "unsolved".
FAILS_A_REPAIRED_FILE = """import json, os
import xml.etree.ElementTree as ET
root = ET.parse(os.environ.get("SPARRING_JUNIT", "/tmp/sparring-junit.xml")).getroot()
rewritten = os.stat("inflection/__init__.py").st_mtime > os.stat("setup.py").st_mtime + 86400
out = {}
for case in root.iter("testcase"):
    name, tags = case.get("name"), {child.tag for child in case}
    status = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
    if rewritten and "ordinal" in name and "13" in name:
        status = "failed"
    out[case.get("classname").replace(".", "/") + ".py::" + name] = status
print(json.dumps(out))
"""


@pytest.mark.parametrize(
    ("variant", "detail"),
    [
        # writes its own report: the probe tests of random names are missing from it
        ("own_report", "on the original code, test_script.sh and test_parser.py miss 2 test(s) the harness ran"),
        # runs other tests as well (the module's doctests)
        ("other_tests", "test(s) the harness did not run (e.g. inflection/__init__.py::inflection."),
        # fails a file that a repair rewrote: the original code, reached as a repair reaches it, "fails"
        ("fails_a_repair", "on the original code, test_script.sh and test_parser.py give"),
    ],
)
def test_a_script_or_parser_that_parts_from_the_harness_is_invalid(
    variant: str,
    detail: str,
    pool: Any,  # noqa: F811
    files: dict[str, str],  # noqa: F811
) -> None:
    good = good_artifact(files)  # a real bug: every check on the harness's runs holds
    artifact = {
        "own_report": replace(good, test_script=OWN_REPORT),
        "other_tests": replace(good, test_script=good.test_script.rstrip("\n") + f" --doctest-modules {SOURCE}\n"),
        "fails_a_repair": replace(good, test_parser=FAILS_A_REPAIRED_FILE),
    }[variant]
    result = validate_artifact(artifact, pool.image, pool)
    assert not result.valid and result.reason == "harness_agreement", (result.reason, result.detail)
    assert detail in result.detail, result.detail
    assert all(result.checks[c] for c in result.checks if c != "harness_agreement")  # every verdict held


# --------------------------------------------------------------- class 7: on only sometimes


def test_a_bug_on_only_under_one_hash_seed_is_invalid(env: Any, files: dict[str, str]) -> None:  # noqa: F811
    env.reset(seed=1)
    _write(env, replace(good_artifact(files), bug_inject_diff=hash_seed_bug(files)))
    obs, reward, terminated, info = _submit(env)
    outcome = info["outcome"]
    assert terminated and reward == -1.0 and outcome["reason"] == "deterministic", outcome
    assert "passed when the buggy code ran again in a fresh process" in outcome["detail"]
    # it passed every check of one run: the re-runs, each with its own hash seed, are what refused it
    assert outcome["checks"]["inverse_mutation"] and set(outcome["runs"]) >= {"rerun:1", "rerun:2"}


def test_a_bug_that_fails_only_by_timeout_is_invalid(pool: Any, files: dict[str, str]) -> None:  # noqa: F811
    source = files[SOURCE]
    slow = source.replace("    number = abs(int(number))\n", "    number = abs(int(number))\n    if number == 113:\n"
                          "        __import__('time').sleep(30)\n", 1)  # fmt: skip
    assert slow != source
    artifact = replace(good_artifact(files), bug_inject_diff=file_diff(SOURCE, source, slow))
    t0 = time.perf_counter()
    result = validate_artifact(artifact, pool.image, pool, ValidationConfig(per_test_timeout=2))
    assert not result.valid and result.reason == "failing_after_bug", (result.reason, result.detail)
    assert "failed only by the 2 s time limit, which does not count" in result.detail
    assert time.perf_counter() - t0 < 240


# -------------------------------------------------------------------------- class 8: the disk


def test_an_agent_cannot_fill_the_hosts_disk(env: Any) -> None:
    from sparring.containers.docker_engine import shared_client

    env.reset(seed=2)
    box = env._sandbox
    fill = (
        "for p in /tmp /repo ~ /var/tmp /dev/shm; do head -c 1000M /dev/zero > $p/fill; done; "
        "mkdir -p /tmp/many && cd /tmp/many && for i in $(seq 1 60000); do : > f$i || break; done; "
        "truncate -s 900M /repo/sparse; "
        "df -k /tmp /repo ~ /var/tmp /dev/shm | awk 'NR > 1 {s+=$3} END {print \"USED\", s}'"
    )
    obs, _, terminated, _, info = env.step(_call("bash", command=fill))
    assert not terminated and "No space left on device" in obs
    used_kib = int(obs.split("USED ")[1].split()[0])
    assert used_kib <= box.limits.disk // 1024 + 1024  # every writable place full, all of them within the cap
    # nothing reached the container's writable layer, i.e. the host's disk: the root file system is read-only
    api = shared_client().api
    size_rw = api._result(api._get(api._url("/containers/{0}/json", box.id), params={"size": 1}), True)["SizeRw"]
    assert size_rw < 1 << 20, size_rw
    obs, *_ = env.step(_call("bash", command="touch /usr/local/x /opt/venv/x 2>&1; echo still here"))
    assert "Read-only file system" in obs and "still here" in obs


# ------------------------------------------------------------------------- class 9: read-back


def test_huge_artifact_files_are_an_observation_not_a_read(env: Any, files: dict[str, str]) -> None:  # noqa: F811
    env.reset(seed=3)
    _write(env, good_artifact(files))
    big = "head -c 150M /dev/zero > /tmp/bug/test_script.sh; truncate -s 900M /tmp/bug/bug_inject.diff"
    env.step(_call("bash", command=big))
    tracemalloc.start()
    t0 = time.perf_counter()
    obs, reward, terminated, info = _submit(env)
    seconds, (_, peak) = time.perf_counter() - t0, tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert not terminated and reward == 0.0  # an observation: the injector may fix the folder
    assert f"test_script.sh, bug_inject.diff in /tmp/bug holds more than {MAX_ARTIFACT_BYTES} bytes" in obs
    assert seconds < 10 and peak < 16 << 20, (seconds, peak)  # neither file was read
    _write(env, good_artifact(files))
    obs, reward, terminated, info = _submit(env)
    assert terminated and info["outcome"]["valid"], info["outcome"]


def test_a_solvers_mess_is_read_back_within_the_caps(pool: Any, bug_verdicts: Any) -> None:  # noqa: F811
    from sparring.envs.swe.repair_env import SWERepairEnv
    from sparring.envs.swe.tasks import repair_task

    good, verdict = bug_verdicts.get("good")
    assert verdict.valid
    env = SWERepairEnv(max_turns=4)
    try:
        env.reset(options={"task": repair_task(good, verdict.fail_to_pass, verdict.pass_to_pass, pool.image)})
        mess = (
            "mkdir -p mess && for i in $(seq 1 150); do head -c 2097152 /dev/urandom > mess/f$i; done; "
            "d=mess/deep; for i in $(seq 1 60); do d=$d/d; done; mkdir -p $d && touch $d/bottom; "
            "for i in $(seq 1 200); do : > mess/$(printf 'n%.0s' $(seq 1 200))$i; done; echo done"
        )
        obs, *_ = env.step(_call("bash", command=mess))
        assert "done" in obs
        tracemalloc.start()
        t0 = time.perf_counter()
        obs, reward, terminated, _, info = env.step("<submit>nothing fixed</submit>")
        seconds, (_, peak) = time.perf_counter() - t0, tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        env.close()
    # before the caps: 1.9 GiB of peak memory and 157 s; now at most the read-back cap, and graded
    assert terminated and reward == -1.0 and not info["outcome"]["solved"]
    assert peak < 200 << 20 and seconds < 120, (peak, seconds)
    # what the caps kept out is told to the solver, not raised
    left_out = " | ".join(info["outcome"]["left_out"])
    assert "past the 16777216 bytes read back at most" in left_out and "deeper than 32 levels" in left_out
    assert "Not read back, so not graded: " in obs


def test_a_report_left_as_a_fifo_is_invalid_not_waited_on(pool: Any, files: dict[str, str]) -> None:  # noqa: F811
    good = good_artifact(files)
    # the real run, then a FIFO where the harness, as root, reads the report: a plain read waits on it for good
    script = good.test_script.rstrip("\n") + '\nrm -f "$SPARRING_JUNIT"; mkfifo "$SPARRING_JUNIT"\n'
    t0 = time.perf_counter()
    result = validate_artifact(replace(good, test_script=script), pool.image, pool)
    seconds = time.perf_counter() - t0
    assert not result.valid and result.reason == "parser", (result.reason, result.detail)
    assert "the script wrote no JUnit report to $SPARRING_JUNIT" in result.detail, result.detail
    assert seconds < 120, seconds  # it took the 300 s file timeout while the server waited on the FIFO


# ------------------------------------------------------------------------------------ controls


def test_a_real_procedural_bug_is_still_valid(pool: Any) -> None:  # noqa: F811
    from sparring.envs.swe.bugs.store import load_bugs

    stored = load_bugs(REPO)
    require(bool(stored), f"the bug store of {REPO}")
    artifact, before, _ = stored[0]
    result = validate_artifact(artifact, pool.image, pool)
    assert result.valid, (result.reason, result.detail)
    assert result.checks == {c: True for c in result.checks} and "deterministic" in result.checks
    assert set(result.fail_to_pass) <= set(before.fail_to_pass) and result.fail_to_pass
