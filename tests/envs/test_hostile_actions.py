"""Hostile actions against every registered env: ``step`` is total and what it returns is storable.

The policy is an adversary: any text may be its action. For each env (the two search envs on the
real corpus, the two SWE envs in real containers) a list of hostile actions is played: JSON that
``json`` itself refuses (``Infinity``, numbers past ``int``'s 4,300 digits, 50,000 nested arrays),
arguments of the wrong type, lone surrogates, NUL bytes, binary garbage, non-BMP characters, huge
and unclosed or deeply nested tags, several calls at once, and (in SWE) file names that are not
UTF-8. None may make ``reset`` or ``step`` raise; every observation and every string in ``info``
must encode as UTF-8 (strictly), ``info`` must be plain JSON, and the episodes must survive the
episode writer.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import sparring  # noqa: F401  (registers the envs)
from sparring.agents.episodes import read_jsonl, write_jsonl
from sparring.agents.evaluation.records import RecordLog
from sparring.envs.core import Episode, Turn
from sparring.envs.tools import ToolCall, ToolCallError, parse_tool_call
from tests.conftest import require
from tests.envs.swe.bugs import REPO, repo_image
from tests.toy_env import SumEnv

#: Argument values as raw JSON: each either refused by the parser or a hostile string a tool runs with.
REFUSED_VALUES = [
    "Infinity",
    "-Infinity",
    "NaN",
    "1e400",
    "-1e400",
    "9" * 5000,  # past int's 4,300 digits: json itself raises ValueError
    "1" + "0" * 45,
    "[" * 50_000 + "]" * 50_000,  # json itself raises RecursionError
    '{"a": ' * 20_000 + "1" + "}" * 20_000,
]
STRING_VALUES = [
    '"\\ud800"',  # a lone surrogate, from a JSON escape
    '"\\udcff\\udcfe.py"',  # what a file name that is not UTF-8 decodes to
    '"a\\u0000b"',
    '"\\ud83d\\ude00 \U0001d518"',  # non-BMP characters, as an escaped pair and as themselves
    "true",
    "null",
    "[1, [2, [3]]]",
    '{"x": 1}',
    "0.5",
    "-1",
    "99999999999999999999",
    '"' + "a" * 300_000 + '"',  # a huge string: past Linux's 128 KiB for one argument of a command
]
#: One hostile string for the tools that end an episode (each of those may grade a repair).
ENDING_VALUE = '"\\ud800 \\u0000 \\ud83d\\ude00 \\udcff"'
ENDING_TOOLS = {"answer", "question", "submit"}

SWE_ACTIONS = [
    # file names that are not UTF-8, listed by bash and by the view tool
    "<bash>touch $'\\xff' inflection/$'\\xfe'.py && mkdir -p $'\\xfd' && ls</bash>",
    '<tool_call>{"name": "view", "arguments": {"path": "."}}</tool_call>',
    "<bash>printf '\\xff\\xfe\\x00\\xc3'</bash>",
]


def _raw_call(name: str, arguments: dict[str, str]) -> str:
    """A ``<tool_call>`` whose argument values are raw JSON text."""
    body = ", ".join(f"{json.dumps(k)}: {v}" for k, v in arguments.items())
    return f'<tool_call>{{"name": {json.dumps(name)}, "arguments": {{{body}}}}}</tool_call>'


def hostile_actions(tools: list[dict[str, Any]]) -> list[str]:
    """Hostile actions against an env offering ``tools`` (JSON schemas, as in ``info["tools"]``)."""
    rng = random.Random(0)
    garbage = bytes(rng.getrandbits(8) for _ in range(4096))
    actions = [
        "",
        "\x00" * 1000,
        "\ud800 lone surrogate \udfff",
        garbage.decode("utf-8", errors="surrogateescape"),  # binary, with lone surrogates where it is not UTF-8
        bytes(range(256)).decode("latin-1"),
        "\U0001f600\U0001d518\U00010348" * 200,
        "x" * (2 << 20),  # past the 1 MiB characters an env reads by default
        "<tool_call>" * 50_000,
        "<t>" * 50_000 + "</t>" * 50_000,
        '<tool_call>{"name": "\\ud800", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "x' + "y" * 100_000 + '", "arguments": {}}</tool_call>',
        '<tool_call>{"name": 1e400}</tool_call>',
        '<tool_call>{"name": "a", "arguments": "' + "[" * 50_000 + '"}</tool_call>',
    ]
    for schema in tools:
        fn = schema["function"]
        name, properties = fn["name"], fn["parameters"]["properties"]
        example = {k: json.dumps(p["examples"][0]) for k, p in properties.items() if p.get("examples")}
        actions.append(f"<{name}>" * 100_000)  # unclosed: once quadratic to scan
        actions.append(_raw_call(name, example | {"\udcff" * 3: "1"}))  # an unknown argument named by a surrogate
        if name in ENDING_TOOLS:
            actions += [_raw_call(name, example | {k: v}) for k in properties for v in REFUSED_VALUES]
            continue
        actions.append(f"<{name}>" * 3000 + "x" + f"</{name}>" * 3000)
        actions.append(f"<{name}>a</{name}><{name}>b</{name}>" + "<tool_call>{}</tool_call>")
        for key in properties:
            actions += [_raw_call(name, example | {key: v}) for v in REFUSED_VALUES + STRING_VALUES]
    ending = next(t["function"] for t in tools if t["function"]["name"] in ENDING_TOOLS)
    example = {k: json.dumps(p["examples"][0]) for k, p in ending["parameters"]["properties"].items()}
    return actions + [_raw_call(ending["name"], example | {k: ENDING_VALUE}) for k in example][:1]


def _check_storable(obs: Any, reward: Any, info: dict[str, Any]) -> None:
    assert isinstance(obs, str)
    obs.encode("utf-8")  # strict: a lone surrogate raises
    assert isinstance(reward, float | int) and math.isfinite(reward)
    json.dumps(info, ensure_ascii=False, allow_nan=False).encode("utf-8")  # plain JSON, valid UTF-8


def play_hostile(env: Any, actions: list[str], tmp_path: Path, seed: int = 0) -> list[Episode]:
    """Play ``actions`` in episodes of ``env`` (a new one whenever one ends); check each step's output."""
    episodes: list[Episode] = []
    obs, info = env.reset(seed=seed)
    _check_storable(obs, 0.0, info)
    episode = Episode(info["task_id"], info["role"], info["domain"], info["task_id"], info["task"], obs)
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        _check_storable(obs, reward, info)
        episode.turns.append(Turn(action, obs, float(reward), info.get("tool"), info.get("error")))
        if action.startswith(('<tool_call>{"name": "x', "x")):  # a huge name or action comes back short
            assert len(obs) < 2000, obs[:200]
        if terminated or truncated:
            episode.outcome, episode.terminated, episode.truncated = info["outcome"], terminated, truncated
            episodes.append(episode)
            obs, info = env.reset(seed=seed)
            _check_storable(obs, 0.0, info)
            episode = Episode(info["task_id"], info["role"], info["domain"], info["task_id"], info["task"], obs)
    episodes.append(episode)
    # the episode writer stores every one of them, raw hostile actions included, and reads them back
    path = write_jsonl(episodes, tmp_path / "episodes.jsonl")
    path.read_bytes().decode("utf-8")
    back = read_jsonl(path)
    assert [len(e.turns) for e in back] == [len(e.turns) for e in episodes]
    return episodes


# ------------------------------------------------------------------------------ the parser alone


@pytest.mark.parametrize(
    "value",
    ["Infinity", "-Infinity", "NaN", "1e400", "9" * 5000, "[" * 50_000 + "]" * 50_000, "true", "1.5", '"1e3"', "[1]"],
)
def test_an_integer_argument_that_is_no_sane_integer_is_one_error(value: str) -> None:
    env = SumEnv()
    env.reset(seed=0)
    call = parse_tool_call(_raw_call("peek", {"index": value}), env._tool_specs)
    assert isinstance(call, ToolCallError), call
    assert call.message.startswith("Error: ") and "<peek>0</peek>" in call.message


@pytest.mark.parametrize(("value", "expected"), [("2", 2), ("2.0", 2), ('" 7 "', 7), ("-3", -3), ('"12"', 12)])
def test_an_integer_argument_becomes_a_python_int(value: str, expected: int) -> None:
    env = SumEnv()
    env.reset(seed=0)
    call = parse_tool_call(_raw_call("peek", {"index": value}), env._tool_specs)
    assert call == ToolCall("peek", {"index": expected}) and type(call.arguments["index"]) is int


def test_string_arguments_are_valid_utf8() -> None:
    env = SumEnv()
    env.reset(seed=0)
    call = parse_tool_call(_raw_call("answer", {"answer": '"1\\ud800 \\ud83d\\ude00"'}), env._tool_specs)
    assert call == ToolCall("answer", {"answer": "1\ufffd \U0001f600"})


def test_the_toy_env_survives_the_hostile_actions(tmp_path: Path) -> None:
    env = SumEnv(max_turns=1000)
    env.reset(seed=0)
    play_hostile(env, hostile_actions(env.tools), tmp_path)


def test_reset_on_a_task_holding_lone_surrogates_returns_valid_utf8() -> None:
    """A task may carry what a policy wrote (a proposed question becomes a solver's task)."""
    env = SumEnv()
    obs, info = env.reset(options={"task": {"id": "sum-\ud800", "numbers": [1, 2], "note": ["\udcff"]}})
    _check_storable(obs, 0.0, info)
    assert info["task_id"] == "sum-\ufffd" and info["task"]["note"] == ["\ufffd"]


def test_the_episode_writer_stores_what_it_is_given(tmp_path: Path) -> None:
    """Actions are the agent's own text, recorded by the runner: lone surrogates and bytes included."""
    episode = Episode("e", "solver", "toy", "t", {"id": "t", "name": "\udcff"}, "p\ud800")
    episode.turns.append(Turn("\ud800\x00", "obs", 0.0))
    episode.outcome = {"files": ["\udcff.py"], "raw": b"\xff", "set": {"b", "a"}}
    back = read_jsonl(write_jsonl([episode], tmp_path / "e.jsonl"))[0]
    assert back.turns[0].action == "\ufffd\x00" and back.prompt == "p\ufffd" and back.task["name"] == "\ufffd"
    assert back.outcome == {"files": ["\ufffd.py"], "raw": "\ufffd", "set": ["a", "b"]}
    # characters str.splitlines splits at, kept raw inside a line's strings
    episode.turns[0].action = "a\x85b\u2028c\x1cd\x0be"
    assert read_jsonl(write_jsonl([episode], tmp_path / "e.jsonl"))[0].turns[0].action == "a\x85b\u2028c\x1cd\x0be"
    log = RecordLog(tmp_path / "records.jsonl")
    log.append({"id": "1", "actions": ["\ud800\x85\u2029"]})
    assert log.load() == {"1": {"id": "1", "actions": ["\ufffd\x85\u2029"]}}


# ------------------------------------------------------------------------------ every registered env


@pytest.mark.parametrize("env_id", ["sparring/SearchAnswer-v0", "sparring/SearchPropose-v0"])
def test_search_envs_survive_hostile_actions(corpus: Any, env_id: str, tmp_path: Path) -> None:
    env = gym.make(env_id, max_turns=10_000).unwrapped
    try:
        _, info = env.reset(seed=0)
        episodes = play_hostile(env, hostile_actions(info["tools"]), tmp_path)
        assert any(e.terminated for e in episodes)  # the ending tool ran on a hostile string
    finally:
        env.close()


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("env_id", ["sparring/SWERepair-v0", "sparring/SWEInject-v0"])
def test_swe_envs_survive_hostile_actions(env_id: str, tmp_path: Path) -> None:
    """Repair plays the bug store's inflection bugs (``sparring setup --for test`` validates them)."""
    from sparring.envs.swe.bugs.store import load_repair_tasks

    repo_image(REPO)
    require(bool(load_repair_tasks(split="train")), "the bug store's validated bugs")
    kwargs: dict[str, Any] = {"repos": [REPO]} if env_id.endswith("Inject-v0") else {}
    env = gym.make(env_id, max_turns=10_000, **kwargs).unwrapped
    try:
        _, info = env.reset(seed=0)
        actions = SWE_ACTIONS + hostile_actions(info["tools"])
        episodes = play_hostile(env, actions, tmp_path)
        listing = episodes[0].turns[0].observation
        assert "\ufffd" in listing and "[exit code 0]" in listing, listing  # the odd names, replaced
    finally:
        env.close()
