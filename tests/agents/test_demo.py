"""The demo's SWE game on the real inflection image: a valid bug gets solvers, and the injector its reward."""

from __future__ import annotations

import io
import json
import threading
from dataclasses import replace
from typing import Any

import pytest
from rich.console import Console

from sparring.agents import ReplayAgent
from sparring.agents.demo import GAMES, DemoConfig, play_game
from sparring.agents.runner import EpisodeSpec
from sparring.envs.swe.rewards import injector_reward
from tests.envs.swe.bugs import BUGGY_LINE, ORIGINAL_LINE, REPO, SOURCE, files, good_artifact, pool  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_a_valid_injected_bug_gets_solvers_and_the_injector_its_reward(files: dict[str, str]) -> None:  # noqa: F811
    inject = [_call("create", path=f"/tmp/bug/{n}", content=t) for n, t in good_artifact(files).files().items()]
    inject.append("<submit>/tmp/bug</submit>")
    fix = _call("str_replace", path=SOURCE, old_str=BUGGY_LINE, new_str=ORIGINAL_LINE)
    lock, fixers = threading.Lock(), []

    def agents(spec: EpisodeSpec) -> ReplayAgent:
        if "Inject" in spec.env_id:
            return ReplayAgent(inject)
        with lock:  # one of the two attempts at the injected bug repairs it: a solve rate of 1/2
            fixes = spec.options is not None and not fixers
            fixers.append(fixes)
        return ReplayAgent([fix, "<submit>restored the 13 case</submit>"] if fixes else ["<submit>none</submit>"])

    swe = next(game for game in GAMES if game.domain == "swe")
    game = replace(swe, proposer_kwargs=lambda policy: {"repos": [REPO]})
    config = DemoConfig(episodes=1, max_turns=8, solver_attempts=2, concurrency=3)
    proposers, solvers = play_game(game, agents, config, Console(file=io.StringIO()))

    (injector,) = proposers.episodes
    assert injector.error is None and injector.outcome["valid"], injector.outcome
    assert len(solvers.episodes) == 3 and all(ep.error is None for ep in solvers.episodes)
    attempts = solvers.episodes[:2]
    assert {ep.task_id for ep in attempts} == {injector.outcome["bug_id"]}
    assert sorted(ep.reward for ep in attempts) == [-1.0, 1.0]
    assert injector.outcome["solve_rate"] == 0.5 and "reward_pending" not in injector.outcome
    assert injector.reward == injector.turns[-1].reward == pytest.approx(injector_reward(True, 0.5))
