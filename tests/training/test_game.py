"""The game on real envs with scripted players: who plays what, and the rewards once the results are in."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from sparring.agents import ReplayAgent
from sparring.agents.demonstrators import DefinitionProposerAgent, DefinitionSearchAgent, KnownJudgementAgent
from sparring.agents.runner import EpisodeSpec
from sparring.envs.swe.rewards import SWERewards, injector_reward
from sparring.training.config import load_config
from sparring.training.game import GAMES, ReplayBuffer, play_iteration
from tests.envs.swe.bugs import BUGGY_LINE, ORIGINAL_LINE, REPO, SOURCE, files, good_artifact, pool  # noqa: F401


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_valid_injected_bug_gets_solvers_judges_and_the_injector_its_reward(files: dict[str, str]) -> None:  # noqa: F811
    inject = [_call("create", path=f"/tmp/bug/{n}", content=t) for n, t in good_artifact(files).files().items()]
    inject.append("<submit>/tmp/bug</submit>")
    fix = _call("str_replace", path=SOURCE, old_str=BUGGY_LINE, new_str=ORIGINAL_LINE)
    lock, fixers = threading.Lock(), []

    def agents(spec: EpisodeSpec) -> ReplayAgent:
        if "Inject" in spec.env_id:
            return ReplayAgent(inject)
        if "Judge" in spec.env_id:
            return KnownJudgementAgent()  # "not solved", every turn neutral
        with lock:  # one of the two attempts at the injected bug repairs it: a solve rate of 1/2
            fixes = not fixers
            fixers.append(fixes)
        return ReplayAgent([fix, "<submit>restored the 13 case</submit>"] if fixes else ["<submit>none</submit>"])

    game = replace(GAMES["swe"], proposer_kwargs=lambda policy, config: {"repos": [REPO]})
    settings = ["swe_alpha=0.5", "swe_solver_unsolved=-0.75"]  # the training config's rewards, not the defaults
    config = load_config(
        None, ["games=swe", "swe_tasks=policy", "proposals=1", "swe_group=2", "swe_max_turns=8", "judge_episodes=2",
               *settings]
    )  # fmt: skip
    result = play_iteration(game, agents, config, 0, np.random.default_rng(0), ReplayBuffer())

    (injector,) = [r for r in result.rollouts if r.role == "proposer"]
    solvers = [r for r in result.rollouts if r.role == "solver"]
    assert injector.episode.outcome["valid"] and injector.reason == "done", injector.episode.outcome
    assert len(solvers) == 2 and {r.episode.task_id for r in solvers} == {injector.episode.outcome["bug_id"]}
    assert sorted(r.reward for r in solvers) == [-0.75, 1.0] and len({r.group for r in solvers}) == 1
    assert injector.reward == pytest.approx(injector_reward(True, 0.5, SWERewards(alpha=0.5))) == pytest.approx(0.25)
    # both attempts judged "not solved" without their grade: right on the failed one, wrong on the repair
    judges = [r for r in result.rollouts if r.role == "judge"]
    assert sorted(r.reward for r in judges) == [-1.0, 1.0] and result.stats["judge/balanced_accuracy"] == 0.5
    for judge in judges:
        assert "graded" not in judge.episode.prompt and "changed files:" in judge.episode.prompt
    assert injector.episode.reward == 0.0  # the finished episode is not patched; the rollout holds the reward
    assert result.stats["proposer/valid_rate"] == 1.0 and result.stats["solver/solve_rate"] == 0.5


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dynamic_sampling_draws_more_tasks_while_the_solver_groups_agree(corpus: Any) -> None:
    """A deterministic solver's attempts at a task all score the same: each top-up round draws more."""

    def agents(spec: EpisodeSpec) -> Any:
        return DefinitionProposerAgent() if "Propose" in spec.env_id else DefinitionSearchAgent()

    base = ["games=search", "proposals=1", "search_group=2", "drawn_tasks=1", "search_max_turns=3"]
    rounds = {}
    for extra in (["min_spread_groups=1", "max_top_ups=2"], ["min_spread_groups=0"]):
        config = load_config(None, base + extra)
        result = play_iteration(GAMES["search"], agents, config, 0, np.random.default_rng(5), ReplayBuffer())
        drawn = {r.group for r in result.rollouts if r.role == "solver" and ":drawn" in r.group[2]}
        rounds[extra[0]] = (result.stats["solver/top_up_rounds"], len(drawn))
        for group in drawn:  # whole groups of G attempts, each group one task
            eps = [r.episode for r in result.rollouts if r.group == group]
            assert len(eps) == 2 and len({ep.task_id for ep in eps}) == 1
    assert rounds == {"min_spread_groups=1": (2, 3), "min_spread_groups=0": (0, 1)}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_search_proposals_become_solver_groups_and_the_replay_buffer_fills_holes(corpus: Any) -> None:
    def agents(spec: EpisodeSpec) -> Any:
        return DefinitionProposerAgent() if "Propose" in spec.env_id else DefinitionSearchAgent()

    config = load_config(None, ["games=search", "proposals=3", "search_group=2", "drawn_tasks=1", "search_max_turns=3"])
    replay = ReplayBuffer()
    replay.add(
        [{"id": "old", "question": 'Which term is described as "a fixed-size unit of data"?', "answers": ["word"]}]
    )
    result = play_iteration(GAMES["search"], agents, config, 0, np.random.default_rng(3), replay)

    proposers = [r for r in result.rollouts if r.role == "proposer"]
    solvers = [r for r in result.rollouts if r.role == "solver"]
    assert len(proposers) == 3 and {r.group for r in proposers} == {("search", "proposer", "it0")}
    groups: dict[Any, list[float]] = {}
    for r in solvers:
        groups.setdefault(r.group, []).append(r.reward)
    assert all(len(rewards) == 2 for rewards in groups.values())  # G attempts per task, one group each
    valid = sum(bool(r.episode.outcome.get("valid")) for r in proposers)
    assert valid >= 1  # the scripted proposer writes valid questions: the checks below have work
    assert len(groups) == valid + min(3 - valid, 1) + 1  # valid proposals, replay for invalid ones, one drawn
    assert result.stats["tasks/replayed"] == min(3 - valid, 1)
    assert not [k for k in result.stats if k.startswith("proposer/invalid/") and ":" in k]  # one series a reason
    for r in proposers:  # 1 - solve rate of its own task for a valid question, 0 for an invalid one
        if r.episode.outcome.get("valid"):
            task = GAMES["search"].solver_task(r.episode.outcome)
            assert task is not None
            task_id = task["id"]
            rate = np.mean([s.reward > 0 for s in solvers if s.episode.task_id == task_id])
            assert r.reward == pytest.approx(1 - rate)
            # its solvers are graded by every answer the seed accepts, as validation was
            mine = [s.episode.task["answers"] for s in solvers if s.episode.task_id == task_id]
            assert mine and all(a == r.episode.outcome["answers"] == r.episode.task["answers"] for a in mine)
        else:
            assert r.reward == 0.0


def test_proposed_search_tasks_that_begin_alike_are_different_groups() -> None:
    # The id was the question's first 80 characters: questions made from one template merged into
    # one solver group, and each proposer was paid by the other's solve rate.
    stem = 'Which word or phrase means "a metallic element that is the most widely used of all the'
    iron = {"valid": True, "question": stem + ' metals"?', "answer": "iron", "answers": ["iron", "Fe"]}
    copper = iron | {"question": stem + ' metals, reddish"?', "answer": "copper", "answers": ["copper", "Cu"]}
    tasks = [GAMES["search"].solver_task(o) for o in (iron, copper, dict(iron), iron | {"answers": ["iron"]})]
    ids = [t["id"] for t in tasks if t]
    assert len(ids) == 4 and ids[0] != ids[1] and ids[0] == ids[2] and ids[0] != ids[3]
    assert GAMES["search"].solver_task(iron | {"valid": False}) is None


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_failed_repair_becomes_a_validated_order2_bug_that_the_next_iteration_plays(
    files: dict[str, str],  # noqa: F811
) -> None:
    # order2 was a config key nothing read. Self-play SWE-RL: a failed repair applied on top of its bug is a
    # new bug; it goes through the same validation and its solvers play it like any task.
    inject = [_call("create", path=f"/tmp/bug/{n}", content=t) for n, t in good_artifact(files).files().items()]
    inject.append("<submit>/tmp/bug</submit>")
    worse = "if number % 100 in (11,):"  # a wrong repair: 12 now fails as well
    lock, attempts = threading.Lock(), []

    def agents(spec: EpisodeSpec) -> ReplayAgent:
        if "Inject" in spec.env_id:
            return ReplayAgent(inject)
        task = (spec.options or {})["task"]
        with lock:
            attempts.append(task["id"])
            first = attempts.count(task["id"]) == 1
        start = BUGGY_LINE if task.get("order", 1) == 1 else worse
        edit = _call("str_replace", path=SOURCE, old_str=start, new_str=ORIGINAL_LINE if first else worse)
        return ReplayAgent([edit, "<submit>the teen case</submit>"])

    game = replace(GAMES["swe"], proposer_kwargs=lambda policy, config: {"repos": [REPO]})
    base = ["games=swe", "swe_tasks=policy", "swe_group=2", "swe_max_turns=6", "order2=true"]
    replay = ReplayBuffer()
    first = play_iteration(game, agents, load_config(None, [*base, "proposals=1"]), 0, np.random.default_rng(0), replay)
    (injector,) = [r for r in first.rollouts if r.role == "proposer"]
    assert injector.episode.outcome["valid"], injector.episode.outcome
    assert first.stats["solver/order2_tried"] == 1 and first.stats["solver/order2_valid"] == 1
    (order2,) = replay.higher_order
    assert order2["order"] == 2 and order2["artifact"]["meta"]["parent"] == injector.episode.outcome["bug_id"]
    assert set(injector.episode.outcome["fail_to_pass"]) < set(order2["fail_to_pass"])  # validated: 12 fails too

    second = play_iteration(
        game, agents, load_config(None, [*base, "proposals=0"]), 1, np.random.default_rng(1), replay
    )
    solvers = [r for r in second.rollouts if r.role == "solver"]
    assert {r.episode.task_id for r in solvers} == {order2["id"]} and len(solvers) == 2
    assert sorted(r.reward for r in solvers) == [-1.0, 1.0]  # repairing the order-2 bug restores the original
    assert replay.higher_order == [] and second.stats["solver/order2_tried"] == 0  # order-2 attempts stop there
