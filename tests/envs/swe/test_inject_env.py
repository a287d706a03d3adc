"""The inject env on the real inflection image: a scripted injector, invalid artifacts, check_env."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from sparring.envs.swe.inject_env import STRATEGIES, SWEInjectEnv
from sparring.envs.swe.rewards import injector_reward
from tests.envs.swe.bugs import REPO, files, good_artifact, pool, violating  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]


def _create(path: str, content: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'create', 'arguments': {'path': path, 'content': content}})}</tool_call>"


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
    assert reward == 0.0  # the real reward waits for the solvers
    assert env.final_reward(0.25) == injector_reward(True, 0.25) == pytest.approx(0.55)
    assert env.final_reward(1.0) == -0.8


def test_invalid_artifact_gets_the_reason_and_the_invalid_reward(env: Any, files: dict[str, str]) -> None:  # noqa: F811
    env.reset(seed=0)
    _write_artifact(env, violating(files, "weakening_hides_bug").files())
    _, reward, terminated, _, info = env.step("<submit>/tmp/bug</submit>")
    assert terminated and reward == -1.0
    assert info["outcome"]["valid"] is False and info["outcome"]["reason"] == "weakening_hides_bug"
    assert env.final_reward(0.5) == -1.0


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
