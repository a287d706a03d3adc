"""The TRL adapter exposes exactly the env's tools, as TRL and transformers discover them."""

from __future__ import annotations

import inspect

import gymnasium as gym
import pytest

from sparring.envs.trl import trl_environment_factory
from tests.toy_env import SumEnv

transformers_utils = pytest.importorskip("transformers.utils")


@pytest.fixture(scope="module")
def factory():
    gym.register("sparring-test/SumTRL-v0", entry_point=SumEnv, max_episode_steps=5, nondeterministic=True)
    yield trl_environment_factory("sparring-test/SumTRL-v0")
    gym.registry.pop("sparring-test/SumTRL-v0")


def test_public_functions_are_exactly_the_tools(factory):
    instance = factory()
    # TRL's own discovery rule: public functions of the class other than reset/get_reward are tools.
    names = {n for n, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction) if not n.startswith("_")}
    assert names == {"reset", "get_reward", "peek", "answer"}


def test_tool_schemas_match_the_env(factory):
    instance = factory()
    schema = transformers_utils.get_json_schema(instance.peek)
    assert schema["function"]["name"] == "peek"
    assert schema["function"]["parameters"]["properties"]["index"]["type"] == "integer"
    assert schema["function"]["parameters"]["required"] == ["index"]


def test_rollout_through_the_adapter(factory):
    instance = factory()
    prompt = instance.reset(prompt=[{"role": "user", "content": "x"}], task={"id": "t", "numbers": [4, 5]})
    assert "2 hidden numbers" in prompt
    assert instance.peek(1) == "number 1 is 5\n[4 turns left]"  # each call is one env step
    assert instance.peek(index="0").startswith("number 0 is 4")  # typed like a parsed call
    assert instance.get_reward() == 0.0
    assert instance.answer("9") == "correct"
    assert instance.get_reward() == 1.0
    with pytest.raises(RuntimeError, match="episode is over"):  # TRL shows this to the model as the tool's error
        instance.peek(0)
    instance.reset(task={"id": "u", "numbers": [1, 1]})
    assert instance.get_reward() == 0.0 and instance.peek(0).startswith("number 0 is 1")


def test_the_turn_limit_holds_under_trl(factory):
    instance = factory()
    instance.reset(task={"id": "t", "numbers": [4, 5]})
    assert "unknown argument(s) position" in instance.peek(position=0)  # the env's usage message, a turn spent
    for _ in range(4):
        instance.peek(0)
    with pytest.raises(RuntimeError, match="episode is over"):
        instance.peek(0)
    assert instance.get_reward() == 0.0
