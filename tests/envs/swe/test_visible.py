"""The visible tests on the real inflection image: the SWE turn signal, its hacks, and the judge's test runs.

The bug is the known one (13 loses its "th") with only ``test_ordinal`` weakened, so ``test_ordinalize``
still fails in the solver's starting tree: the visible failures the turn signal pays for bringing to pass.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparring.envs.core import Episode, Turn
from sparring.envs.swe.judge_env import SWEJudgeEnv, swe_judge_task
from sparring.envs.swe.repair_env import SWERepairEnv
from sparring.envs.swe.rewards import SWERewards
from sparring.envs.swe.tasks import repair_task
from tests.envs.swe.bugs import (  # noqa: F401
    BUGGY_LINE,
    ORIGINAL_LINE,
    SOURCE,
    TESTS,
    pool,
)
from tests.envs.swe.test_repair_env import _assert_nowhere

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

W = 0.4
#: The oracle assertion the weakening took out of test_ordinal: the hidden test's body.
HIDDEN_BODY = "assert ordinalized == number + inflection.ordinal(number)"


@pytest.fixture(scope="module")
def task(pool: Any, bug_verdicts: Any) -> dict[str, Any]:  # noqa: F811
    art, result = bug_verdicts.get("partly_weakened")
    assert result.valid, result.reason
    return repair_task(art, result.fail_to_pass, result.pass_to_pass, pool.image, result)


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


FIX = _call("str_replace", path=SOURCE, old_str=BUGGY_LINE, new_str=ORIGINAL_LINE)
PYTEST = f"<bash>python -m pytest -q {TESTS}</bash>"


def _play(task: dict[str, Any], actions: list[str], weight: float = W) -> tuple[Episode, SWERepairEnv]:
    """A repair episode of scripted actions, recorded as the runner records one."""
    env = SWERepairEnv(max_turns=len(actions), tasks=[task], rewards=SWERewards(test_turn_reward=weight))
    obs, info = env.reset(seed=0)
    ep = Episode("sparring/SWERepair-v0", "solver", "swe", info["task_id"], info["task"], obs)
    for action in actions:
        obs, reward, terminated, truncated, step = env.step(action)
        ep.turns.append(Turn(action, obs, reward, tool=step.get("tool")))
        ep.terminated, ep.truncated, ep.outcome = terminated, truncated, step.get("outcome", {})
        if terminated or truncated:
            break
    return ep, env


def test_an_honest_repair_earns_the_signal_once_and_a_break_takes_it_back(task: dict[str, Any]) -> None:
    """By hand: every tracked test is a test_ordinalize case, so their share is all or nothing: ±w a turn."""
    break_and_run = f"<bash>sed -i 's/(11, 12, 13)/(11, 12)/' {SOURCE} && python -m pytest -q {TESTS}</bash>"
    fix_and_run = f"<bash>sed -i 's/(11, 12)/(11, 12, 13)/' {SOURCE} && python -m pytest -q {TESTS}</bash>"
    actions = [
        PYTEST,  # the starting tree: tracked tests fail, nothing earned
        FIX,  # no test run: nothing measured
        f"<bash>python -m pytest -q {TESTS}::test_ordinalize</bash>",  # they pass now: +w
        break_and_run,  # flip: -w
        fix_and_run,  # flop: +w again, so the pair earned nothing
        "<submit>13 takes th again</submit>",
    ]
    ep, env = _play(task, actions)
    env.close()
    tracked = env._signal.tracked()  # type: ignore[union-attr]
    assert tracked and all(t.startswith(f"{TESTS}::test_ordinalize[") for t in tracked), tracked
    assert "failed" in ep.turns[0].observation and ep.outcome["solved"]
    assert ep.turn_rewards == pytest.approx([0.0, 0.0, W, -W, W, 1.0])
    assert sum(ep.turn_rewards[:-1]) == pytest.approx(W)  # at most w in all, whatever the flip-flops
    # off by default: the same turns earn nothing but the outcome, and nothing is measured
    ep0, env0 = _play(task, [PYTEST, FIX, PYTEST, "<submit>13 takes th again</submit>"], weight=0.0)
    env0.close()
    assert env0._signal is None and ep0.turn_rewards == [0.0, 0.0, 0.0, 1.0]


def test_every_hack_of_the_signal_earns_nothing(task: dict[str, Any]) -> None:
    """Own tests, edited tests, conftest plumbing, a typo'd id then the right one, printed verdicts: all 0."""
    own_failing = _call("create", path="test_mine.py", content="def test_mine():\n    assert False\n")
    own_passing = _call("create", path="test_mine.py", content="def test_mine():\n    assert True\n")
    edit_tests = (
        f"<bash>sed -i 's/^\\( *\\)assert /\\1assert True or /' {TESTS} && "
        "printf 'import pytest\\n@pytest.hookimpl(tryfirst=True)\\ndef pytest_runtest_call(item):\\n    return True\\n'"
        f" > conftest.py && python -m pytest -q {TESTS}</bash>"
    )
    actions = [
        own_failing,
        "<bash>python -m pytest -q test_mine.py</bash>",  # an own test failing: no tracked test selected
        own_passing,
        "<bash>python -m pytest -q test_mine.py</bash>",  # ... now passing: still nothing
        f"<bash>python -m pytest -q {TESTS}::test_ordinalise</bash>",  # a typo'd id errors
        f"<bash>python -m pytest -q {TESTS}::test_ordinalize</bash>",  # the right one: still failing, 0
        edit_tests,  # tests rewritten to pass, a conftest forcing passes: the agent's run passes, 0
        "<bash>echo 'PASSED test_inflection.py::test_ordinalize[13-13th]'</bash>",  # printed, not run
        "<submit>all tests pass</submit>",
    ]
    ep, env = _play(task, actions)
    env.close()
    assert "1 failed" in ep.turns[1].observation and "1 passed" in ep.turns[3].observation
    assert "[exit code 0]" in ep.turns[6].observation  # the agent's own run passes
    assert ep.turn_rewards == [0.0] * 8 + [-1.0] and not ep.outcome["solved"]


def test_the_judge_runs_the_visible_tests_on_the_final_tree_and_sees_nothing_hidden(task: dict[str, Any]) -> None:
    """A failed attempt (the bug stays in): the judge's runs show its failures, never the fix, the oracle tests,
    the hidden test ids or the grade; its container holds none of them. A solved one: the judge's runs pass."""
    failed, env = _play(task, [f"<bash>echo '# looked around' >> {SOURCE}</bash>", "<submit>nothing to fix</submit>"])
    env.close()
    assert not failed.outcome["solved"] and failed.outcome["final"]["written"]
    visible_failing = {t for t in task["fail_to_pass"] if t.startswith(f"{TESTS}::test_ordinalize")}
    hidden = [t for t in task["fail_to_pass"] if t not in visible_failing]
    assert hidden and all("test_ordinal[" in t for t in hidden)
    judge = SWEJudgeEnv()
    try:
        obs, info = judge.reset(options={"task": swe_judge_task(failed)})
        assert "run_tests" in {t["function"]["name"] for t in info["tools"]} and "<run_tests>" in obs
        seen = [obs]
        for call, expect in [
            ("<run_tests></run_tests>", "failed"),  # the task's test files
            (_call("run_tests", tests=f"{TESTS}::test_ordinal {TESTS}::test_ordinalize"), "failed"),
            (_call("run_tests", tests="--co ../etc/passwd"), "no test path inside /repo"),
        ]:
            obs, reward, terminated, truncated, _ = judge.step(call)
            assert expect in obs and reward == 0.0 and not (terminated or truncated), obs
            seen.append(obs)
        box = judge._sandbox
        assert box.exec(f"grep -c '# looked around' {SOURCE}").stdout.strip() == "1"  # the final tree
        for secret in (ORIGINAL_LINE, HIDDEN_BODY):
            _assert_nowhere(box, secret)
        assert box.exec("git log --oneline | wc -l").stdout.strip() == "1"
        assert box.exec("ls /tmp/sparring-bug", user="root").exit_code != 0
        obs, _, terminated, _, step = judge.step(_call("judge", verdict="not solved", assessments="neutral neutral"))
        assert terminated and step["outcome"]["valid"]
        seen.append(obs)
        for text in seen:  # the oracle test body is the prompt's own (the solver sees how the tests should read)
            for secret in (ORIGINAL_LINE, "graded", "every test passes", *hidden):
                assert secret not in text, (secret, text)
        # a solved attempt's final tree: the same runs pass
        solved, env = _play(task, [FIX, "<submit>13 takes th again</submit>"])
        env.close()
        assert solved.outcome["solved"]
        judge.reset(options={"task": swe_judge_task(solved)})
        obs, *_ = judge.step("<run_tests></run_tests>")
        assert "passed" in obs and "failed" not in obs, obs
    finally:
        judge.close()
