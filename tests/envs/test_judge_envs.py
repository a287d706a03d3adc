"""The judge envs: check_env, the strict judgement format, and that no judge ever reads the grade.

The search ones run on the real default corpus with real searches; SWEJudge draws its standalone
attempts from the real bug store (no container is needed to judge a recorded attempt).
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import sparring  # noqa: F401  (registers the envs)
from sparring.agents.demonstrators import DefinitionMatchAgent
from sparring.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
from sparring.agents.scripted import ReplayAgent, RetrievalFloorAgent
from sparring.envs.core import Episode, Turn
from sparring.envs.search.judge_env import gold_turns, search_judge_task
from sparring.envs.search.scoring import answer_in_text
from sparring.envs.swe.judge_env import swe_judge_task


def _call(verdict: str, assessments: str) -> str:
    arguments = {"verdict": verdict, "assessments": assessments}
    return f"<tool_call>{json.dumps({'name': 'judge', 'arguments': arguments})}</tool_call>"


def test_search_judge_passes_check_env_and_judges_a_drawn_attempt(corpus: Any) -> None:
    env = gym.make("sparring/SearchJudge-v0")
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=3)
    turns = info["task"]["turns"]
    assert len(turns) == 2 and "<information>" in turns[0]["observation"] and "Turn 2 action: <answer>" in obs
    _, reward, terminated, _, step = env.step(_call("Solved", "good, neutral"))
    assert terminated and reward == 0.0
    assert step["outcome"] == {"valid": True, "verdict": "solved", "assessments": ["good", "neutral"], "reward": 0.0}


def test_swe_judge_passes_check_env_without_containers() -> None:
    from sparring.envs.swe.bugs.store import load_repair_tasks

    if not load_repair_tasks(split="train"):
        pytest.skip("no stored bugs; run `sparring setup --for test`")
    env = gym.make("sparring/SWEJudge-v0")
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert info["task"]["turns"] == [] and "changed files: none; no submission" in obs
    _, _, terminated, _, step = env.step(_call("not solved", ""))
    assert terminated and step["outcome"]["valid"] and step["outcome"]["verdict"] == "not solved"


def test_the_swe_judge_may_run_tests_first_yet_a_message_without_a_call_is_an_invalid_judgement() -> None:
    """Four turns, so test runs fit before the verdict, but no retry of a malformed message (no container needed)."""
    from sparring.envs.swe.bugs.store import load_repair_tasks

    if not load_repair_tasks(split="train"):
        pytest.skip("no stored bugs; run `sparring setup --for test`")
    env = gym.make("sparring/SWEJudge-v0")
    obs, info = env.reset(seed=0)
    assert env.unwrapped.max_turns == 4 and "<run_tests>" in obs and obs.endswith("[4 turns left]")
    assert "run_tests" in {t["function"]["name"] for t in info["tools"]}
    assert info["task"]["sandbox"]["final"] == {"written": {}, "deleted": [], "left_out": []}  # the starting tree
    obs, reward, terminated, _, step = env.step("It looks solved to me.")
    assert terminated and reward == 0.0 and "no tool call found" in obs
    assert step["outcome"]["valid"] is False and env.unwrapped._sandbox is None


@pytest.mark.parametrize(
    ("action", "why"),
    [
        (_call("maybe", "good good"), 'the verdict must be "solved" or "not solved"'),
        (_call("solved", "good"), "assessments must be 2 word(s)"),
        (_call("solved", "good great"), "assessments must be 2 word(s)"),
        ("<judge>solved</judge>", "'judge' takes 2 arguments"),
        ("It looks solved to me.", "no tool call found"),
    ],
)
def test_a_malformed_judgement_is_invalid_with_one_sentence_and_reward_0(corpus: Any, action: str, why: str) -> None:
    """No fallback parse: a verdict in prose or a wrong count of assessments is no judgement."""
    env = gym.make("sparring/SearchJudge-v0")
    env.reset(seed=3)
    obs, reward, terminated, truncated, step = env.step(action)
    assert why in obs and reward == 0.0 and (terminated or truncated)
    assert step["outcome"]["valid"] is False and "verdict" not in step["outcome"]


def _solver_episodes() -> list[Episode]:
    """Real search attempts: right ones (the definition matcher), first-result ones, and blind wrong ones."""
    make = lambda: gym.make("sparring/SearchAnswer-v0", max_turns=3)  # noqa: E731
    blind = ["<search>zebra stripe pattern</search>", "<answer>zebra</answer>"]
    played: list[Episode] = []
    for agent in (lambda s: DefinitionMatchAgent(), lambda s: RetrievalFloorAgent(), lambda s: ReplayAgent(blind)):
        played += EpisodeRunner(agent, RunnerConfig(progress=False)).run([EpisodeSpec(make, seed=s) for s in range(6)])
    return played


def test_no_judge_observation_holds_the_gold_answer_or_the_outcome(corpus: Any) -> None:
    """Every judge prompt of real attempts: no gold answer unless the solver's own transcript showed it, no grade."""
    episodes = _solver_episodes()
    assert {ep.outcome["em"] for ep in episodes} == {0.0, 1.0}  # both outcomes are judged
    env = gym.make("sparring/SearchJudge-v0")
    unseen = 0
    for ep in episodes:
        task = search_judge_task(ep)
        assert set(task) == {"id", "domain", "statement", "turns", "final"}
        obs, info = env.reset(options={"task": task})
        assert "Answer recorded" not in obs  # the submission's own observation is left out
        assert json.dumps(ep.outcome["answers"]) not in json.dumps(info["task"])
        solver_saw = " ".join([ep.prompt] + [t.action + " " + t.observation for t in ep.turns])
        for gold in ep.outcome["answers"]:
            if not answer_in_text(gold, solver_saw):
                unseen += 1
                assert not answer_in_text(gold, obs), (gold, obs)
    assert unseen >= 6  # the check bit on attempts that never saw their answer


def test_a_swe_judge_never_reads_the_grade_of_the_submission() -> None:
    """SWE's submit answers "graded solved": that observation, the hidden tests and the outcome stay out."""
    turns = [
        Turn("<bash>pytest -q</bash>", "1 failed, 3 passed", 0.0, tool="bash"),
        Turn("<submit>fixed parse</submit>", "Submitted; graded solved: every test passes.", 1.0, tool="submit"),
    ]
    ep = Episode("sparring/SWERepair-v0", "solver", "swe", "bug1",
                 {"id": "bug1", "fail_to_pass": ["test_hidden_case"], "artifact": {"bug_inject.diff": "SECRET"}},
                 "Fix the bug.", turns, 1.0,
                 {"solved": True, "fail_to_pass": ["test_hidden_case"], "changed_files": ["a.py"],
                  "summary": "fixed parse", "reward": 1.0}, terminated=True)  # fmt: skip
    obs, _ = gym.make("sparring/SWEJudge-v0").reset(options={"task": swe_judge_task(ep)})
    for secret in ("graded", "test_hidden_case", "SECRET", "every test passes"):
        assert secret not in obs
    assert "1 failed, 3 passed" in obs and "changed files: a.py; summary: fixed parse" in obs


def test_gold_turns_label_the_search_that_newly_retrieved_the_gold_entry() -> None:
    """A search showing the gold title is good once; a query naming the answer earns nothing; answers: no label."""
    hit = "<information>Doc 1 (Title: motor hotel) a hotel for motorists</information>"
    miss = "<information>Doc 1 (Title: inn) a small hotel</information>"
    turns = [
        Turn("<search>hotel</search>", miss, 0.0, tool="search"),
        Turn("<search>a hotel for motorists</search>", hit, 0.0, tool="search"),
        Turn("<search>hotel for motorists again</search>", hit, 0.0, tool="search"),
        Turn("<answer>motor hotel</answer>", "Answer recorded.", 1.0, tool="answer"),
    ]
    assert gold_turns(["motor hotel"], turns) == [False, True, False, None]
    named = [Turn("<search>motor hotel</search>", hit, 0.0, tool="search")]
    assert gold_turns(["motor hotel"], named) == [False]
