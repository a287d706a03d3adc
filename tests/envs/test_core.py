"""The env contract: text space, tool schemas, tool-call parsing, turn accounting, check_env."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from sparring.envs.core import Episode, Turn, reason_name
from sparring.envs.spaces import UnicodeText
from sparring.envs.tools import ToolCall, ToolCallError, parse_tool_call
from tests.toy_env import SumEnv


@pytest.fixture
def env() -> SumEnv:
    e = SumEnv(max_turns=4)
    e.reset(seed=3)
    return e


def test_unicode_text_space_accepts_punctuation_and_non_ascii():
    space = UnicodeText(max_length=20)
    assert space.contains("x = {'é': 1}\n")
    assert not space.contains("x" * 21)
    assert not space.contains(b"bytes")
    space.seed(0)
    assert all(space.contains(space.sample()) for _ in range(20))


def test_tool_schema_from_signature_and_docstring(env):
    by_name = {t["function"]["name"]: t["function"] for t in env.tools}
    assert set(by_name) == {"peek", "answer"}
    peek = by_name["peek"]
    assert peek["description"] == "Show one hidden number."
    index = peek["parameters"]["properties"]["index"]
    assert index == {"type": "integer", "description": "Position of the number, from 0.", "examples": [0]}
    assert peek["parameters"]["required"] == ["index"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ('<tool_call>{"name": "peek", "arguments": {"index": 1}}</tool_call>', ToolCall("peek", {"index": 1})),
        (
            'think first\n<tool_call>\n{"name": "peek", "arguments": "{\\"index\\": 2}"}\n</tool_call>',
            ToolCall("peek", {"index": 2}),
        ),
        ("<peek>0</peek>", ToolCall("peek", {"index": 0})),
        ("<answer>12</answer> <peek>1</peek>", ToolCall("answer", {"answer": "12"})),
    ],
)
def test_parse_valid_calls(env, text, expected):
    assert parse_tool_call(text, env._tool_specs) == expected


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("<tool_call>{not json}</tool_call>", "not valid JSON"),
        ('<tool_call>{"name": "rm", "arguments": {}}</tool_call>', "unknown tool 'rm'"),
        ("<launch>x</launch>", "unknown tool 'launch'"),
        ('<tool_call>{"name": "peek", "arguments": {}}</tool_call>', "missing argument(s) index"),
        ('<tool_call>{"name": "peek", "arguments": {"index": "two"}}</tool_call>', "must be of type integer"),
        ("just prose", "no tool call found"),
    ],
)
def test_parse_errors_say_what_is_wrong_and_show_the_form(env, text, fragment):
    result = parse_tool_call(text, env._tool_specs)
    assert isinstance(result, ToolCallError)
    assert fragment in result.message
    assert "<peek>" in result.message or '"name": "peek"' in result.message


def test_malformed_action_costs_a_turn_and_is_an_observation(env):
    obs, reward, terminated, truncated, info = env.step("no call here")
    assert "no tool call found" in obs and obs.endswith("[3 turns left]")
    assert (reward, terminated, truncated, info["turn"]) == (0.0, False, False, 1)
    assert "error" in info


def test_episode_ends_with_outcome_and_reward(env):
    numbers = env.task["numbers"]
    obs, *_ = env.step("<peek>0</peek>")
    assert obs.startswith(f"number 0 is {numbers[0]}")
    obs, reward, terminated, truncated, info = env.step(f"<answer>{sum(numbers)}</answer>")
    assert (obs, reward, terminated, truncated) == ("correct", 1.0, True, False)
    assert info["outcome"] == {"correct": True, "target": sum(numbers), "reward": 1.0}
    assert env.get_reward() == 1.0
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<peek>0</peek>")


def test_info_names_the_tool_called(env):
    assert env.step("<peek>0</peek>")[4]["tool"] == "peek"
    info = env.step("no call here")[4]
    assert "tool" not in info and "error" in info
    assert env.step('<tool_call>{"name": "answer", "arguments": {"answer": "3"}}</tool_call>')[4]["tool"] == "answer"


def test_turn_limit_truncates_with_outcome(env):
    for _ in range(3):
        env.step("<peek>0</peek>")
    obs, reward, terminated, truncated, info = env.step("<peek>1</peek>")
    assert (terminated, truncated) == (False, True)
    assert info["outcome"] == {"status": "turn_limit", "reward": 0.0}


def test_reset_with_task_option_and_seed_draw():
    e = SumEnv()
    _, info = e.reset(options={"task": {"id": "fixed", "numbers": [1, 2]}})
    assert info["task_id"] == "fixed" and info["role"] == "solver" and info["turn"] == 0
    assert info["tools"] == e.tools
    _, a = e.reset(seed=7)
    _, b = e.reset(seed=7)
    assert a["task"] == b["task"]


def test_check_env_through_gym_make():
    gym.register("sparring-test/Sum-v0", entry_point=SumEnv, max_episode_steps=5, nondeterministic=True)
    try:
        env = gym.make("sparring-test/Sum-v0", render_mode="ansi")
        check_env(env.unwrapped)
        env.reset(seed=0)
        env.step("<peek>0</peek>")
        assert "number 0 is" in env.render()
    finally:
        gym.registry.pop("sparring-test/Sum-v0")


def test_episode_record_round_trips():
    ep = Episode("e", "solver", "toy", "t", {"id": "t"}, "p", turns=[Turn("a", "o", 1.0, tool="peek")])
    assert Episode.from_dict(ep.to_dict()) == ep
    assert ep.turn_rewards == [1.0]


def test_importing_sparring_envs_does_not_import_torch():
    code = "import sparring, sparring.envs.core, sys; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_observation_that_asks_for_an_action_ends_with_the_budget(env):
    obs, _ = env.reset(seed=1)
    assert obs.endswith(f"[{env.max_turns} turns left]")
    obs, *_ = env.step("<peek>0</peek>")
    assert obs.endswith(f"[{env.max_turns - 1} turns left]")


def test_reason_name_drops_the_detail_only():
    assert reason_name("too_few_searches: 1 distinct search, 2 needed") == "too_few_searches"
    assert reason_name("answer_in_question") == "answer_in_question"
    assert reason_name("solver_answered_other: a: b") == "solver_answered_other"
    assert reason_name(None) == "None"
