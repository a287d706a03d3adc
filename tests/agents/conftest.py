"""Fixtures of the agent tests: the default model behind the HF backend, transcripts, a raising env."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparring.agents.chat import ChatFormat, token_roles
from sparring.agents.model import default_model_present
from sparring.envs.core import Episode
from sparring.envs.tools import tool
from tests.conftest import require
from tests.containers.sandbox_helpers import docker_ready
from tests.toy_env import SumEnv


@pytest.fixture(scope="session")
def hf_generator(smollm2: Any) -> Any:
    """The default SmolLM2 checkpoint on the HF backend: the session's one copy (``smollm2``)."""
    return smollm2


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    """The default model's tokenizer."""
    require(default_model_present(), "the default model (SmolLM2-135M-Instruct)")
    from sparring.agents.model import load_tokenizer

    return load_tokenizer()


def transcript(chat: ChatFormat, episode: Episode, tools: list[dict[str, Any]]) -> str:
    """The whole conversation of an episode rendered by the chat template in one go."""
    messages = chat.prompt_messages(episode.prompt, tools)
    for i, turn in enumerate(episode.turns):
        messages.append({"role": "assistant", "content": turn.action})
        if i < len(episode.turns) - 1:
            messages.append({"role": chat.observation_role, "content": turn.observation})
    return chat.render(messages, tools=tools if chat.supports_tools else None)


def assert_token_exact(tokenizer: Any, recompute: Any, episode: Episode, turns: int = 3) -> None:
    """The buffer decodes to the template's transcript; logprobs recomputed by ``recompute`` match."""
    tools = SumEnv().tools
    chat = ChatFormat(tokenizer)
    assert len(episode.turns) == turns and episode.error is None
    n = len(episode.token_ids)
    assert len(episode.token_turn) == len(episode.action_mask) == len(episode.logprobs) == n
    decoded = tokenizer.decode(episode.token_ids, skip_special_tokens=False)
    expected = transcript(chat, episode, tools)
    # The buffer ends with the last action; the template closes that message with what remains.
    assert expected.startswith(decoded), (decoded[-200:], expected[len(decoded) - 200 : len(decoded) + 50])
    rest = expected[len(decoded) :]
    assert rest in {chat.assistant_close, chat.assistant_close[len(tokenizer.eos_token) :]}
    # Every turn's action tokens decode to the action text the env received.
    for t, turn in enumerate(episode.turns):
        ids = [
            i
            for i, tt, a in zip(episode.token_ids, episode.token_turn, episode.action_mask, strict=True)
            if tt == t and a
        ]
        assert ids and tokenizer.decode(ids, skip_special_tokens=True) == turn.action
    roles = token_roles(episode)
    assert roles[0] == "prompt" and roles.count("action") == sum(episode.action_mask)
    assert {"prompt", "action", "observation"} <= set(roles)
    # Trainer-side recomputation over the whole buffer, one forward pass.
    first_action = episode.action_mask.index(True)
    recomputed = recompute.logprobs([episode.token_ids], [first_action])[0]
    for pos in range(first_action, n):
        if episode.action_mask[pos]:
            assert abs(recomputed[pos - first_action] - episode.logprobs[pos]) < 1e-3, pos
        else:
            assert episode.logprobs[pos] == 0.0


class FlakySumEnv(SumEnv):
    """A :class:`SumEnv` whose ``peek`` raises on the task with ``numbers[0] == crash_on``."""

    def __init__(self, *, crash_on: int = -1, **kwargs: Any):
        """Remember which first number makes ``peek`` raise."""
        super().__init__(**kwargs)
        self.crash_on = crash_on

    @tool(example={"index": 0})
    def peek(self, index: int) -> str:
        """Show one hidden number.

        Args:
            index: Position of the number, from 0.
        """
        if self.task and self.task["numbers"][0] == self.crash_on:
            raise RuntimeError("the backing service went away")
        return super().peek(index)


class ShownSumEnv(SumEnv):
    """A :class:`SumEnv` whose prompt shows the numbers, so every seed gives a different episode."""

    def _begin(self, task: dict[str, Any]) -> str:
        super()._begin(task)
        numbers = ", ".join(map(str, task["numbers"]))
        return f"Add up these numbers: {numbers}. Reply with <answer>the sum</answer>."


def private_home(tmp_path_factory: pytest.TempPathFactory, repo: str, bugs: int) -> Path:
    """A private ``SPARRING_HOME`` holding a copy of ``repo``'s bug store (at least ``bugs`` bugs)."""
    docker_ready()
    from sparring.envs.swe.bugs.store import bug_store_dir, load_bugs

    require(len(load_bugs(repo)) >= bugs, f"the {repo} bug store ({bugs} bugs)")
    home = tmp_path_factory.mktemp("home")
    shutil.copytree(bug_store_dir(repo), home / "bugs" / repo)
    return home


def sparring(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m sparring.cli ARGS`` under the private ``home``, output captured, at most 10 minutes."""
    env = {**os.environ, "SPARRING_HOME": str(home), "COLUMNS": "250"}
    cmd = [sys.executable, "-m", "sparring.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
