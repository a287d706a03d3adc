"""The repair env on the real inflection image: solver repository, grading, adversaries, check_env."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from sparring.envs.swe.bugs.artifact import reverse_diff
from sparring.envs.swe.repair_env import SWERepairEnv
from sparring.envs.swe.tasks import repair_task
from tests.envs.swe.bugs import BUGGY_LINE, ORIGINAL_LINE, SOURCE, TESTS, pool  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def task(pool: Any, bug_verdicts: Any) -> dict[str, Any]:  # noqa: F811
    art, result = bug_verdicts.get("good")
    assert result.valid
    return repair_task(art, result.fail_to_pass, result.pass_to_pass, pool.image)


@pytest.fixture()
def env(task: dict[str, Any]) -> Any:
    e = SWERepairEnv(max_turns=8, tasks=[task])
    yield e
    e.close()


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def _search_root(box: Any, text: str) -> Any:
    """``grep`` for ``text`` in every file under / (as root; devices, FIFOs and /proc, /sys, /dev skipped).

    The search must run to its end: a timeout would say nothing about what is on disk.
    """
    search = "grep -rlF -D skip --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev"
    found = box.exec(f"{search} {shlex.quote(text)} /", user="root", timeout=120)
    assert not found.timed_out, f"the search of / for {text!r} timed out after {found.seconds:.0f} s"
    return found


def _assert_nowhere(box: Any, text: str) -> None:
    """No file of the container holds ``text``: grep read everything and said "no match" (exit 1, not 2)."""
    found = _search_root(box, text)
    assert found.exit_code == 1 and found.stdout == "", (found.exit_code, found.stdout, found.stderr)


def test_solver_repository_has_no_history_of_the_fix(env: Any, task: dict[str, Any]) -> None:
    obs, info = env.reset(seed=0)
    assert info["role"] == "solver" and info["task"]["id"] == task["id"]
    assert {t["function"]["name"] for t in info["tools"]} == {"bash", "view", "str_replace", "create", "submit"}
    assert "test_ordinal" in obs and reverse_diff(task["artifact"]["test_weaken_diff"]) in obs
    assert ORIGINAL_LINE not in obs  # the prompt shows the tests, never the fix
    box = env._sandbox
    log = box.exec("git log --all --oneline | wc -l; git tag | wc -l; git reflog | wc -l; git stash list | wc -l")
    assert log.stdout.split() == ["1", "0", "1", "0"], log
    assert box.exec("test -e .git/ORIG_HEAD || test -e .git/packed-refs").exit_code == 1
    # the search of / sees the repository: the buggy line is found, in the one file that holds it
    buggy = _search_root(box, BUGGY_LINE)
    assert buggy.exit_code == 0 and buggy.stdout.split() == [f"/repo/{SOURCE}"], buggy
    # the fixed line is nowhere: not in the tree, not in any git object, not in the artifact's folder
    _assert_nowhere(box, ORIGINAL_LINE)
    objects = box.exec(f"git cat-file --batch-all-objects --batch | grep -cF '{ORIGINAL_LINE}'")
    assert objects.stdout.strip() == "0"
    # nor the weakening: the artifact's diffs are gone and the weakened-away assertion is nowhere
    diffs = box.exec("find / -xdev \\( -name '*inject*.diff' -o -name '*weaken*.diff' \\) -print", user="root")
    assert diffs.ok and diffs.stdout.strip() == ""
    _assert_nowhere(box, "assert ordinalized == number + inflection.ordinal(number)")  # weakened away
    assert box.exec("git status --porcelain").stdout == ""
    # the weakened tests pass in the solver's repository: the bug is hidden
    assert box.exec(f"python -m pytest -q -p no:cacheprovider {TESTS} -k ordinal", timeout=120).ok


def test_reverse_of_the_bug_is_solved(env: Any) -> None:
    env.reset(seed=0)
    obs, *_ = env.step(_call("str_replace", path=SOURCE, old_str=BUGGY_LINE, new_str=ORIGINAL_LINE))
    assert "Edited /repo/inflection/__init__.py" in obs and obs.endswith("[7 turns left]")
    obs, reward, terminated, truncated, info = env.step("<submit>restored 13 in the teen check</submit>")
    assert terminated and not truncated
    assert info["outcome"]["solved"], info["outcome"]
    assert reward == 1.0 == env.get_reward()
    assert info["outcome"]["changed_files"] == [SOURCE]


@pytest.mark.parametrize(
    "attack",
    [
        f"rm {TESTS}",  # delete the failing tests
        "printf 'import sys\\nsys.exit(0)\\n' > conftest.py",  # pytest plumbing
        "echo 'this is not python' >> inflection/__init__.py",  # collection fails
        "printf 'nothing.py\\n' > test_files.txt",  # edit a test_files.txt of its own
        "printf 'import sys\\nsys.exit(0)\\n' > pytest.py",  # shadow the test runner
        "echo 'import os' > sitecustomize.py",  # interpreter start-up hook
    ],
)
def test_adversarial_solvers_are_not_solved(env: Any, attack: str) -> None:
    env.reset(seed=0)
    obs, *_ = env.step(f"<bash>{attack}</bash>")
    assert "[exit code 0]" in obs
    _, reward, terminated, _, info = env.step("<submit>all tests pass now</submit>")
    assert terminated and reward == -1.0
    outcome = info["outcome"]
    assert not outcome["solved"]
    assert outcome["missing"] or outcome["failing"] or outcome["error"]
    if "pytest.py" in attack or "sitecustomize" in attack or "conftest" in attack:
        assert outcome["ignored"]  # grading dropped the change instead of running it


@pytest.mark.parametrize(
    ("attack", "ignored"),
    [
        ("true", []),  # submit the repository as given: its tests were weakened, so they pass
        (f"sed -i 's/^\\( *\\)assert /\\1assert True or /' {TESTS}", [TESTS]),  # make every assertion hold
    ],
    ids=["unchanged", "assertions_rewritten"],
)
def test_tests_that_pass_for_the_solver_fail_once_the_oracle_tests_are_restored(
    env: Any, task: dict[str, Any], attack: str, ignored: list[str]
) -> None:
    """The bug stays in, yet the solver's own test file passes in full: only restoring the oracle tests fails it."""
    env.reset(seed=0)
    obs, *_ = env.step(f"<bash>{attack}</bash>")
    assert "[exit code 0]" in obs
    own = env._sandbox.exec(f"python -m pytest -q -p no:cacheprovider {TESTS}", timeout=120)
    assert own.ok and " passed" in own.stdout, own.stdout[-2000:]
    assert env._sandbox.exec(f"grep -qF '{BUGGY_LINE}' {SOURCE}").ok
    _, reward, terminated, _, info = env.step("<submit>all tests pass now</submit>")
    outcome = info["outcome"]
    assert terminated and reward == -1.0 and not outcome["solved"]
    assert outcome["ignored"] == ignored
    # graded on the original tests: exactly the bug's tests ran and failed, none went missing
    assert set(outcome["failing"]) == set(task["fail_to_pass"]) and not outcome["missing"], outcome


def test_collection_failure_reports_missing_tests(env: Any) -> None:
    env.reset(seed=0)
    env.step("<bash>echo 'syntax error here' >> inflection/__init__.py</bash>")
    _, _, _, _, info = env.step("<submit>done</submit>")
    assert not info["outcome"]["solved"] and info["outcome"]["missing"]


def test_malformed_and_unknown_calls_are_observations(env: Any) -> None:
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step('<tool_call>{"name": "bash", "arguments": </tool_call>')
    assert "not valid JSON" in obs and "<bash>" in obs and not terminated and reward == 0.0
    obs, *_ = env.step("<rm_rf>/</rm_rf>")
    assert "unknown tool 'rm_rf'" in obs
    obs, *_ = env.step(_call("str_replace", path=SOURCE, old_str="no such text", new_str="x"))
    assert "was not found" in obs
    obs, *_ = env.step(_call("str_replace", path=SOURCE, old_str="return", new_str="x"))
    assert "occurs" in obs and "include more context" in obs
    obs, *_ = env.step(_call("view", path=SOURCE, start_line=226, num_lines=2))
    assert "226\t" in obs and BUGGY_LINE in obs
    obs, *_ = env.step(_call("view", path="no/such/file.py"))
    assert "does not exist" in obs
    obs, _, _, truncated, info = env.step("<bash>sleep 0</bash>")
    assert not truncated and "[exit code 0]" in obs
    _, reward, _, truncated, info = env.step("just talking")
    assert truncated and info["outcome"]["status"] == "turn_limit" and reward == -1.0


def test_turn_limit_keeps_the_changes_for_higher_order_bugs(env: Any, pool: Any, task: dict[str, Any]) -> None:  # noqa: F811
    from sparring.envs.swe.tasks import higher_order_task

    env.reset(seed=0)
    # a failed repair: it changes the teen check again, wrongly (12 is now missing too)
    env.step(_call("str_replace", path=SOURCE, old_str=BUGGY_LINE, new_str="if number % 100 in (11,):"))
    for _ in range(env.max_turns - 1):
        *_, truncated, info = env.step("<bash>true</bash>")
    assert truncated and env.last_changes is not None and env.last_changes.paths == [SOURCE]
    order2 = higher_order_task(pool, task, env.last_changes)
    assert order2 is not None
    assert order2["order"] == 2 and order2["artifact"]["meta"]["parent"] == task["id"]
    assert "in (11,):" in order2["artifact"]["bug_inject_diff"]
    assert set(task["fail_to_pass"]) < set(order2["fail_to_pass"])  # 12 now fails as well


def test_check_env_with_a_real_container(task: dict[str, Any]) -> None:
    env = gym.make("sparring/SWERepair-v0", tasks=[task], max_turns=4)
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()
    env.close()  # idempotent


def test_a_bug_that_no_longer_fits_its_image_is_a_clear_error(task: dict[str, Any]) -> None:
    from sparring import SparringError

    broken = json.loads(json.dumps(task))
    broken["artifact"]["bug_inject_diff"] = broken["artifact"]["bug_inject_diff"].replace("(11, 12, 13)", "(1, 2)")
    env = SWERepairEnv(max_turns=2, tasks=[broken])
    try:
        with pytest.raises(SparringError, match="regenerate it with `sparring bugs generate --repo inflection`"):
            env.reset(seed=0)
        assert env._sandbox is None  # the container was given back
    finally:
        env.close()


@pytest.mark.parametrize("key, value", [("clean_seconds", "12"), ("per_test_timeout", [30])])
def test_a_task_with_a_time_bound_that_is_not_a_number_is_a_clear_error(
    task: dict[str, Any], key: str, value: object
) -> None:
    from sparring import SparringError

    env = SWERepairEnv(max_turns=2, tasks=[task | {key: value}])
    try:
        with pytest.raises(SparringError, match=re.escape(f"{key} must be a number of seconds or null, not {value!r}")):
            env.reset(seed=0)
        assert env._sandbox is None  # refused before any container started
        env.reset(seed=0, options={"task": task})  # the same env goes on with a good task
        assert env._sandbox is not None
    finally:
        env.close()


#: Solver code that leaves the bug in and, at interpreter exit, strips every failure from a JUnit
#: report (the report-forging attack of docs/swe.md; the harness writes none, and the AST check
#: refuses the code before anything runs; test_adversarial_solver.py has the attacks that remain).
FORGER = """
import atexit as _atexit, os as _os, re as _re
def _forge(path=_os.environ.get("SPARRING_JUNIT", "")):
    try:
        with open(path) as f:
            xml = f.read()
        xml = _re.sub(r"<(failure|error)\\b.*?(</\\1>|/>)", "", xml, flags=_re.S)
        with open(path, "w") as f:
            f.write(xml)
    except OSError:
        pass
_atexit.register(_forge)
"""


def test_a_solver_that_forges_the_test_report_is_not_solved(env: Any) -> None:
    env.reset(seed=0)
    obs, *_ = env.step(_call("create", path="inflection/_forge.py", content=FORGER))
    assert obs.startswith("Wrote /repo/inflection/_forge.py"), obs
    obs, *_ = env.step(f"<bash>echo 'from inflection import _forge' >> {SOURCE}</bash>")
    assert "[exit code 0]" in obs
    _, reward, terminated, _, info = env.step("<submit>all tests pass now</submit>")
    outcome = info["outcome"]
    assert terminated and reward == -1.0 and not outcome["solved"], outcome
    assert outcome["tampering"][0].startswith("inflection/_forge.py:2: import atexit (exit_hooks): import atexit")
    assert any("SPARRING_JUNIT" in t for t in outcome["tampering"]) and outcome["status"] == "refused"
    assert outcome["error"].startswith("the repair reaches for")


def test_a_test_run_is_no_changed_file_and_the_help_shows_a_solvers_example(env: Any) -> None:
    env.reset(seed=0)
    obs, *_ = env.step('<tool_call>{"name": "bash", "arguments": </tool_call>')  # every tool's example is shown
    assert "create" in obs and "/tmp/bug" not in obs  # the injector's artifact folder means nothing to a solver
    obs, *_ = env.step("<bash>python -m pytest -q -p no:randomly >/dev/null; ls -a</bash>")
    assert ".pytest_cache" in obs  # the run left its cache in /repo ...
    env.step(_call("str_replace", path=SOURCE, old_str=BUGGY_LINE, new_str=ORIGINAL_LINE))
    _, _, terminated, _, info = env.step("<submit>restored 13 in the teen check</submit>")
    assert terminated and info["outcome"]["solved"]
    assert info["outcome"]["changed_files"] == [SOURCE]  # ... which is no change of the solver's
