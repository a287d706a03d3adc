"""The inject env on the real inflection image: a scripted injector, invalid artifacts, check_env."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from sparring.envs.swe.bugs.artifact import DEFAULT_TEST_SCRIPT, diff_files, reverse_diff
from sparring.envs.swe.inject_env import STRATEGIES, SWEInjectEnv
from sparring.envs.swe.repair_env import SWERepairEnv
from sparring.envs.swe.rewards import injector_reward
from tests.envs.swe.bugs import REPO, files, good_artifact, pool, repo_image, violating  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def _create(path: str, content: str) -> str:
    return _call("create", path=path, content=content)


@pytest.fixture()
def env(pool: Any) -> Any:  # noqa: F811
    e = SWEInjectEnv(max_turns=10, repos=[REPO])
    yield e
    e.close()


def _write_artifact(env: Any, artifact_files: dict[str, str]) -> None:
    for name, text in artifact_files.items():
        obs, _, terminated, *_ = env.step(_create(f"/tmp/bug/{name}", text))
        assert obs.startswith("Wrote /tmp/bug/") and not terminated


def test_scripted_injector_with_a_good_artifact_is_valid(env: Any, files: dict[str, str]) -> None:  # noqa: F811
    obs, info = env.reset(seed=3)
    task = info["task"]
    assert info["role"] == "proposer" and task["repo"] == REPO and task["strategy"] in STRATEGIES
    assert STRATEGIES[task["strategy"]] in obs and "bug_inject.diff" in obs
    # the injector sees the clean repository with its release history
    log, *_ = env.step("<bash>git log --oneline | wc -l && git status --porcelain | wc -l</bash>")
    assert log.split()[:2] == ["3", "0"]
    art = good_artifact(files)
    _write_artifact(env, art.files())
    obs, reward, terminated, truncated, info = env.step("<submit>/tmp/bug</submit>")
    assert terminated and not truncated
    outcome = info["outcome"]
    assert outcome["valid"] and outcome["reason"] is None, outcome
    assert outcome["fail_to_pass"] and outcome["bug_id"]
    assert reward == 0.0  # the real reward waits for the solvers: the game computes it with env.rewards
    assert env.rewards.proposer(True, 0.25) == injector_reward(True, 0.25) == pytest.approx(0.55)
    assert env.rewards.proposer(True, 1.0) == -0.8
    # the link of the game: the outcome holds the repair task the solvers play
    solver_task = outcome["solver_task"]
    assert solver_task["id"] == outcome["bug_id"] and solver_task["image"] == task["image"]
    assert solver_task["fail_to_pass"] == outcome["fail_to_pass"]
    repair = SWERepairEnv(max_turns=2)
    try:
        obs, info = repair.reset(options={"task": solver_task})
        assert info["role"] == "solver" and info["task_id"] == outcome["bug_id"]
        assert reverse_diff(art.test_weaken_diff) in obs
    finally:
        repair.close()


def test_invalid_artifact_gets_the_reason_and_the_invalid_reward(env: Any, files: dict[str, str]) -> None:  # noqa: F811
    env.reset(seed=0)
    _write_artifact(env, violating(files, "weakening_hides_bug").files())
    _, reward, terminated, _, info = env.step("<submit>/tmp/bug</submit>")
    assert terminated and reward == -1.0
    assert info["outcome"]["valid"] is False and info["outcome"]["reason"] == "weakening_hides_bug"
    assert "solver_task" not in info["outcome"]
    assert env.rewards.proposer(False, None) == env.rewards.unfinished("proposer") == -1.0


def test_incomplete_folder_is_an_observation_not_the_end(env: Any) -> None:
    env.reset(seed=0)
    env.step(_create("/tmp/bug/test_script.sh", "pytest\n"))
    obs, reward, terminated, _, info = env.step("<submit>/tmp/bug</submit>")
    assert not terminated and reward == 0.0
    assert "lacks test_files.txt, bug_inject.diff, test_weaken.diff" in obs
    obs, *_ = env.step('<tool_call>{"name": "submit"}</tool_call>')
    assert "missing argument(s) folder" in obs
    obs, *_ = env.step("<inject>now</inject>")
    assert "unknown tool 'inject'" in obs


def test_turn_limit_without_submission(pool: Any) -> None:  # noqa: F811
    env = SWEInjectEnv(max_turns=1, repos=[REPO])
    try:
        env.reset(seed=0)
        _, reward, _, truncated, info = env.step("<bash>ls</bash>")
        assert truncated and reward == -1.0 and info["outcome"]["reason"] == "no_submission"
    finally:
        env.close()


def test_check_env_with_a_real_container(pool: Any) -> None:  # noqa: F811
    env = gym.make("sparring/SWEInject-v0", repos=[REPO], max_turns=4)
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def test_every_strategy_is_drawn_and_prompted(pool: Any) -> None:  # noqa: F811
    env = SWEInjectEnv(max_turns=2, repos=[REPO])
    seen: dict[str, str] = {}
    try:
        for seed in range(30):
            obs, info = env.reset(seed=seed)
            strategy = info["task"]["strategy"]
            assert info["task"]["id"].endswith(f"-{strategy}")
            seen.setdefault(strategy, obs)
            if len(seen) == len(STRATEGIES):
                break
    finally:
        env.close()
    assert set(seen) == set(STRATEGIES)
    for strategy, obs in seen.items():
        # the prompt carries the drawn strategy's instruction and no other's
        assert [s for s, text in STRATEGIES.items() if text in obs] == [strategy]


#: The history injector's target: parse 1.22.3 made flexible times keep their timezone
#: (``dt.time()`` -> ``dt.timetz()`` in ``strf_date_convert``) and added tests for it.
HISTORY_REPO = "parse"
HISTORY_CODE = "parse/__init__.py"
HISTORY_TESTS = "tests/test_parse.py"
TZ_TEST = f"{HISTORY_TESTS}::test_flexible_time_preserves_timezone"


def test_scripted_history_injector_reverts_a_past_change() -> None:
    repo_image(HISTORY_REPO)
    env = SWEInjectEnv(max_turns=12, repos=[HISTORY_REPO], strategies=("history",))
    try:
        obs, info = env.reset(seed=0)
        assert info["task"]["strategy"] == "history" and STRATEGIES["history"] in obs

        def bash(command: str) -> str:
            out, _, terminated, *_ = env.step(f"<bash>{command}</bash>")
            assert not terminated
            return out

        assert "parse 1.22.3" in bash("git log --oneline")  # one commit per release
        # find the release that introduced the line, and its change to the code
        out = bash(
            f"c=$(git log --format=%H -S'dt.timetz()' -- {HISTORY_CODE}) && git log -1 --format=%s $c && "
            f"git show $c -- {HISTORY_CODE} > /tmp/change.diff"
        )
        assert out.startswith("parse 1.22.3\n") and "[exit code 0]" in out, out
        # revert it; its __version__ hunk no longer applies (the code moved on), so keep the hunk that does
        out = bash(f"git apply -R --reject /tmp/change.diff; rm -f {HISTORY_CODE}.rej; git diff --stat")
        assert "Rejected hunk #1" in out and "Hunk #2 applied cleanly" in out, out
        # weaken the test that reveals it
        weakened = (
            "    assert result.fixed[0] == expected\n    assert result.fixed[0].utcoffset() == expected.utcoffset()\n"
        )
        out, *_ = env.step(_call("str_replace", path=HISTORY_TESTS, old_str=weakened, new_str="    pass\n"))
        assert out.startswith("Edited"), out
        out = bash(
            f"mkdir -p /tmp/bug && git diff -- {HISTORY_CODE} > /tmp/bug/bug_inject.diff && "
            f"git diff -- {HISTORY_TESTS} > /tmp/bug/test_weaken.diff && echo {HISTORY_TESTS} > /tmp/bug/test_files.txt"
        )
        assert "[exit code 0]" in out, out
        env.step(_create("/tmp/bug/test_script.sh", DEFAULT_TEST_SCRIPT.format(files=HISTORY_TESTS)))
        _, reward, terminated, _, info = env.step("<submit>/tmp/bug</submit>")
    finally:
        env.close()
    outcome = info["outcome"]
    assert terminated and outcome["valid"] and reward == 0.0, outcome
    bug = outcome["artifact"]["bug_inject_diff"]
    assert diff_files(bug) == [HISTORY_CODE] and outcome["artifact"]["origin"] == "agent:history"
    assert "-        return dt.timetz()\n+        return dt.time()\n" in bug and "__version__" not in bug
    # the reverted fix's tests fail again: every timezone offset of the test the release added
    assert outcome["fail_to_pass"] and all(t.startswith(f"{TZ_TEST}[") for t in outcome["fail_to_pass"])
    assert len(outcome["fail_to_pass"]) == 4 and outcome["pass_to_pass"]
