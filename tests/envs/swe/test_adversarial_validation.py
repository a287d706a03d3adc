"""Validation and grading as an injector and a solver would play them (issue 30), on real containers.

The classes (docs/swe.md, "Threat model: the injector and the sandbox", classes 10-13):

10. a bug that validation and grading can tell apart: on only under validation's per-test timer,
    only while a file grading rewrites is as old as the image, or code of the bug that reaches
    the test machinery (it could forge validation's verdicts as a repair's could forge grading's);
11. a valid bug no repair can solve: it deletes a file a repair may not write back;
12. a weakening that changes nothing a test does, under a bug that reads the test files;
13. a repair that hangs holds grading for the whole test timeout.

Each must end refused (or, for a bug that is the same wherever it runs, graded the same), never
valid with a do-nothing repair solved; the controls show that honest bugs and fixes still pass.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import pytest

from sparring.envs.swe.bugs.artifact import BugArtifact, file_diff
from sparring.envs.swe.bugs.store import weaken_tests
from sparring.envs.swe.carry import carry_plan
from sparring.envs.swe.grading import GRADE_TIME_MARGIN, SolverChanges, grade_time_limit
from sparring.envs.swe.tasks import repair_task
from sparring.envs.swe.validation import ValidationResult, validate_artifact
from tests.envs.swe.bugs import (  # noqa: F401
    BUGGY_LINE,
    ORIGINAL_LINE,
    SOURCE,
    STALE,
    TESTS,
    WEAKENED_TESTS,
    files,
    good_artifact,
    keyed_bug,
    pool,
    spelled_apart,
    violating,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def _play(task: dict[str, Any], *actions: str) -> tuple[float, dict[str, Any], float]:
    """One repair episode on ``task``: the actions, then submit; (reward, outcome, seconds the submit took)."""
    from sparring.envs.swe.repair_env import SWERepairEnv

    env = SWERepairEnv(max_turns=len(actions) + 2, tasks=[task])
    try:
        env.reset(seed=0)
        for action in actions:
            obs, _, terminated, _, _ = env.step(action)
            assert not terminated, obs
        t0 = time.perf_counter()
        _, reward, terminated, _, info = env.step("<submit>fixed</submit>")
        assert terminated
        return reward, info["outcome"], time.perf_counter() - t0
    finally:
        env.close()


def _validated(pool: Any, artifact: BugArtifact) -> tuple[ValidationResult, dict[str, Any]]:  # noqa: F811
    result = validate_artifact(artifact, pool.image, pool)
    assert result.valid, (result.reason, result.detail)
    return result, repair_task(artifact, result.fail_to_pass, result.pass_to_pass, pool.image, result)


@pytest.fixture(scope="module")
def good(pool: Any, bug_verdicts: Any) -> tuple[ValidationResult, dict[str, Any]]:  # noqa: F811
    """The known-good bug, validated (once per session), and its repair task."""
    artifact, result = bug_verdicts.get("good")
    assert result.valid, (result.reason, result.detail)
    return result, repair_task(artifact, result.fail_to_pass, result.pass_to_pass, pool.image, result)


# ------------------------------------------------------- class 10: validation and grading told apart

#: True while a signal handler for SIGALRM is installed: the per-test timer's, read from /proc by a
#: computed path (the static check does not resolve it).
TIMED = "(int(next(l for l in open('/pr' + 'oc/self/status') if l.startswith('SigCgt:')).split()[1], 16) >> 13) & 1"


def test_a_bug_on_only_under_the_per_test_timer_is_refused_by_the_runs_guard(pool: Any, files: dict[str, str]) -> None:  # noqa: F811
    """The timer's trace in /proc is out of the tested code's reach: the bug's runs count as tampering.

    Grading also runs validation's timer (so a bug keyed on it would be on in both), and check 12
    puts every bug through grading itself; the run-time guard refuses the tested code the /proc
    read this bug needs, so the bug is refused before either comes into play.
    """
    timed = replace(good_artifact(files), bug_inject_diff=keyed_bug(files, TIMED))
    result = validate_artifact(timed, pool.image, pool)
    assert not result.valid and "tampering" in result.detail and "/proc" not in TIMED, (result.reason, result.detail)
    assert "refused open" in result.detail, result.detail


def test_a_bug_on_only_while_a_file_grading_rewrites_is_old_is_refused(pool: Any, files: dict[str, str]) -> None:  # noqa: F811
    """Whatever differs between validation's runs and grading's, check 12 runs the bug through grading."""
    result = validate_artifact(violating(files, "graded_as_validated"), pool.image, pool)
    assert not result.valid and result.reason == "graded_as_validated", (result.reason, result.detail)
    assert "a repair that does nothing would be graded solved" in result.detail
    assert result.checks["solver_tree"] and result.checks["deterministic"]  # on in every run of validation's own


@pytest.mark.parametrize(
    "reach",
    ["import gc\n", "import signal\n_TIMER = signal.getitimer(signal.ITIMER_REAL)\n"],
    ids=["gc", "interval_timer"],
)
def test_code_a_bug_adds_meets_the_rules_a_repairs_does(reach: str, pool: Any, files: dict[str, str]) -> None:  # noqa: F811
    source = files[SOURCE]
    bug = source.replace(ORIGINAL_LINE, BUGGY_LINE).replace("import re\n", "import re\n" + reach, 1)
    result = validate_artifact(
        replace(good_artifact(files), bug_inject_diff=file_diff(SOURCE, source, bug)), pool.image, pool
    )
    assert not result.valid and result.reason == "bug_capabilities", (result.reason, result.detail)
    assert reach.split()[1].rstrip() in result.detail


# --------------------------------------------------------------- class 11: valid, and no repair solves


def test_a_bug_that_deletes_the_package_init_can_be_repaired(pool: Any, files: dict[str, str]) -> None:  # noqa: F811
    """inflection/ keeps py.typed, so the package becomes an empty namespace and every test fails."""
    source = files[SOURCE]
    gone = f"--- a/{SOURCE}\n+++ /dev/null\n@@ -1,{len(source.splitlines())} +0,0 @@\n" + "".join(
        "-" + line for line in source.splitlines(keepends=True)
    )
    # the module builds a parameter list from inflection.UNCOUNTABLES: the weakening keeps it collectable
    tests, listed = files[TESTS], "for word in inflection.UNCOUNTABLES]"
    assert listed in tests
    weakened = weaken_tests(TESTS, tests, WEAKENED_TESTS).replace(listed, "for word in getattr(inflection, 'X', ())]")
    deleted = replace(good_artifact(files), bug_inject_diff=gone, test_weaken_diff=file_diff(TESTS, tests, weakened))
    result, task = _validated(pool, deleted)
    assert len(result.fail_to_pass) > 300 and result.checks["graded_as_validated"]
    reward, outcome, _ = _play(task, _call("create", path=SOURCE, content=source))
    assert outcome["solved"] and reward == 1.0 and outcome["ignored"] == [], outcome


def test_any_path_of_the_original_tree_may_be_written_back() -> None:
    """Paths the bug deleted are existing files for the carry rules, whatever their name or place."""
    paths = ["pkg/__init__.py", "pkg/json.py", "toplevel.py", "pkg/sub/__init__.py", "pkg/sub/conftest.py"]
    gone = "".join(f"--- a/{p}\n+++ /dev/null\n@@ -1 +0,0 @@\n-x = 1\n" for p in paths)
    artifact = BugArtifact(test_script="", test_files=["tests/test_pkg.py"], bug_inject_diff=gone, test_weaken_diff="")
    written = {p: b"x = 1\n" for p in paths} | {"pkg/sub/new.py": b"y = 2\n", "pkg/sub/json.py": b"", "other.py": b""}
    plan = carry_plan(artifact, SolverChanges(written=written, package_dirs=[]))
    # conftest.py stays refused (check 4 refuses a bug that touches one); a new module in a restored package is carried
    assert sorted(plan.written) == sorted([*paths[:4], "pkg/sub/new.py"]), plan.dropped
    assert set(plan.dropped) == {"pkg/sub/conftest.py", "pkg/sub/json.py", "other.py"}


# ------------------------------------------------------ class 12: a weakening that changes no test


#: True while test_inflection.py holds a marker anywhere: a bug that reads the test files (refused at run
#: time: the tested code may not open an oracle test file, so the bug raises instead).
MARKED = f"'sparring: off' in open(_os.path.join(_os.path.dirname(_os.path.dirname(__file__)), {TESTS!r})).read()"

#: True while test_inflection.py has another size than ``%d``: a bug that sees the weakening with no read.
RESIZED = f"_os.path.getsize(_os.path.join(_os.path.dirname(_os.path.dirname(__file__)), {spelled_apart(TESTS)})) != %d"


def test_a_weakening_that_only_adds_a_comment_is_refused(pool: Any, files: dict[str, str]) -> None:  # noqa: F811
    tests = files[TESTS]
    off = replace(
        good_artifact(files),
        bug_inject_diff=keyed_bug(files, "not " + RESIZED % len(tests.encode())),
        test_weaken_diff=file_diff(TESTS, tests, tests + "\n# sparring: off\n"),
    )
    result = validate_artifact(off, pool.image, pool)
    assert not result.valid and result.reason == "weakening_hides_bug", (result.reason, result.detail)
    assert "read the same before and after test_weaken.diff" in result.detail


@pytest.mark.parametrize("key", ["text", "age"])
def test_a_bug_off_in_the_solvers_tree_is_refused(key: str, pool: Any, files: dict[str, str]) -> None:  # noqa: F811
    """The weakening changes a test's source, yet the bug reads the test file: it is off for the solver."""
    tests = files[TESTS]
    body = "    assert ordinalized == number + inflection.ordinal(number)\n"
    assert body in tests
    marked = tests.replace(body, body + "    assert 'sparring: off'\n", 1)  # an AST change that tests nothing
    condition = f"not {MARKED}" if key == "text" else STALE % spelled_apart(TESTS)
    off = replace(
        good_artifact(files),
        bug_inject_diff=keyed_bug(files, condition),
        test_weaken_diff=file_diff(TESTS, tests, marked),
    )
    result = validate_artifact(off, pool.image, pool)
    if key == "text":  # the read is refused at run time: the bug raises in the weakened tree too
        assert not result.valid and result.reason == "weakening_hides_bug", (result.reason, result.detail)
        assert "none of the failing tests passes once test_weaken.diff is applied" in result.detail
        return
    assert not result.valid and result.reason == "solver_tree", (result.reason, result.detail)
    assert result.checks["weakening_hides_bug"] and "so a solver could never see it" in result.detail


# ------------------------------------------------------------------- class 13: a hang costs the timeout


def test_a_repair_that_hangs_at_import_is_cut_at_the_clean_suites_bound(
    good: tuple[ValidationResult, dict[str, Any]],
    files: dict[str, str],  # noqa: F811
) -> None:
    result, task = good
    assert result.clean_seconds and task["clean_seconds"] == result.clean_seconds
    # The bound follows the task's clean seconds: a task measured at a tenth of a second waits out the margin
    # alone (about a minute) instead of the real suite's ten times over, and checks the same rule.
    task = task | {"clean_seconds": 0.1}
    hang = files[SOURCE].replace("import re\n", "import re\nwhile True:\n    pass\n", 1)
    reward, outcome, seconds = _play(task, _call("create", path=SOURCE, content=hang))
    limit = grade_time_limit(0.1, 300.0)
    assert reward == -1.0 and outcome["status"] == "timeout", outcome
    assert outcome["time_limit"] == limit < 300.0 and limit >= GRADE_TIME_MARGIN
    assert seconds < limit + 60, seconds


# ------------------------------------------------------------------------------------ controls


@pytest.mark.parametrize(
    "fix",
    [ORIGINAL_LINE, "if 11 <= number % 100 <= 13:"],
    ids=["the_original_line", "written_another_way"],
)
def test_a_correct_fix_is_solved(fix: str, good: tuple[ValidationResult, dict[str, Any]]) -> None:
    result, task = good
    assert all(result.checks.values()) and result.runs["graded:original"] == result.clean_seconds
    reward, outcome, _ = _play(task, _call("str_replace", path=SOURCE, old_str=BUGGY_LINE, new_str=fix))
    assert outcome["solved"] and reward == 1.0 and outcome["status"] == "passed", outcome
    assert outcome["time_limit"] == grade_time_limit(result.clean_seconds, 300.0)
