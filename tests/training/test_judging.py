"""The judge role: its class-balanced reward, its turn rewards through credit, its demonstrations, a run with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from sparring import SparringError
from sparring.agents.chat import ChatFormat
from sparring.agents.demonstrators import DefinitionMatchAgent, DefinitionProposerAgent, KnownJudgementAgent
from sparring.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
from sparring.agents.scripted import ReplayAgent, _call
from sparring.envs.core import Episode
from sparring.training import demos as demos_module
from sparring.training.config import load_config
from sparring.training.demos import demonstrations, judge_demonstrations, judge_teachers
from sparring.training.game import GAMES, ReplayBuffer, Rollout, play_iteration, solved
from sparring.training.judging import judge_rewards, judge_stats, sample_for_judging
from sparring.training.metrics import read_log
from tests.agents.vllm_fixtures import require_vllm
from tests.conftest import default_corpus_built, require
from tests.envs.swe.bugs import BUGGY_LINE, ORIGINAL_LINE, SOURCE, repo_image
from tests.training.conftest import tiny_vllm_model
from tests.training.test_trainer import _episode, _trainer

NOT_SOLVED = {"valid": True, "verdict": "not solved", "assessments": []}
SOLVED = {"valid": True, "verdict": "solved", "assessments": []}


def test_the_judge_reward_is_balanced_over_the_batchs_two_classes() -> None:
    """1 solved, 3 failed: a solved verdict weighs 4/2 = 2, a failed one 4/6; right +, wrong or invalid −."""
    labels = [True, False, False, False]
    judged = [SOLVED, NOT_SOLVED, SOLVED, {"valid": False, "reason": "x"}]
    assert judge_rewards(labels, judged) == pytest.approx([2.0, 2 / 3, -2 / 3, -2 / 3])
    # the format term goes to valid judgements only
    assert judge_rewards(labels, judged, 0.1) == pytest.approx([2.1, 2 / 3 + 0.1, -2 / 3 + 0.1, -2 / 3])
    # a perfect judge earns 1 on average; a batch of one class cannot tell a judge from a constant: no reward
    assert np.mean(judge_rewards(labels, [SOLVED, NOT_SOLVED, NOT_SOLVED, NOT_SOLVED])) == pytest.approx(1.0)
    assert all(np.isnan(judge_rewards([False, False], [NOT_SOLVED, NOT_SOLVED])))


@pytest.mark.parametrize("solve_rate", [0.05, 0.2, 0.5, 0.9])
def test_always_not_solved_and_a_coin_earn_nothing_in_expectation(solve_rate: float) -> None:
    """At any solve rate a constant verdict earns exactly 0 over the batch, and a random one 0 in expectation."""
    rng = np.random.default_rng(0)
    labels = [bool(y) for y in rng.random(200) < solve_rate]
    assert np.mean(judge_rewards(labels, [NOT_SOLVED] * 200)) == pytest.approx(0.0, abs=1e-12)
    assert np.mean(judge_rewards(labels, [SOLVED] * 200)) == pytest.approx(0.0, abs=1e-12)
    coins = [
        np.mean(judge_rewards(labels, [SOLVED if c else NOT_SOLVED for c in rng.random(200) < 0.5])) for _ in range(400)
    ]
    assert abs(np.mean(coins)) < 0.02


def test_the_sample_judged_holds_both_outcomes_even_at_a_low_solve_rate() -> None:
    labels = [False] * 30 + [True] * 2
    picked = sample_for_judging(labels, 8, np.random.default_rng(0))
    assert len(picked) == 8 and sum(labels[i] for i in picked) == 2
    stats = judge_stats(
        [True, False], [{**SOLVED, "assessments": ["good", "bad"]}, {**SOLVED, "assessments": ["good", "good"]}],
        [[True, None], [False, None]],
    )  # fmt: skip
    assert stats["judge/balanced_accuracy"] == 0.5 and stats["judge/good_share_failed"] == 1.0
    assert stats["judge/good_share_solved"] == 0.5 and stats["judge/good_share_other_search_turns"] == 1.0


def _two_turn(reward: float, actions: tuple[list[int], list[int]]) -> Episode:
    from sparring.agents.chat import append_tokens

    ep = _episode([1, 2], actions[0], reward)
    append_tokens(ep, [90, 91], 1, action=False)  # the first turn's observation
    append_tokens(ep, actions[1], 1, action=True, logprobs=[-10.0] * len(actions[1]))
    ep.turns.append(ep.turns[0])
    return ep


def test_turn_rewards_change_the_token_advantages_of_their_groups_turns_by_hand(
    smol_tokenizer: Any, tmp_path: Path
) -> None:
    """λ·A^T, return-to-go centred over the group's pooled turns (std off), on action tokens; other groups unchanged.

    Group A: outcomes 1/0, episode 0 earns 0.2 at its last turn: returns [0.2, 0.2] and [0, 0], pooled mean 0.1.
    Group C: outcomes 0/0 (no outcome signal), episode 0 earns −0.2 at turn 0: returns [−0.2, 0], [0, 0]; kept,
    where equal outcomes alone would drop it. Group B: outcomes 1/0 and no turn reward: untouched.
    """
    trainer = _trainer(smol_tokenizer, tmp_path, "lam=0.5", "std_scale=false")
    a, b, c = ("search", "solver", "A"), ("search", "solver", "B"), ("search", "solver", "C")
    eps = [_two_turn(r, ([3, 4], [5])) for r in (1.0, 0.0, 1.0, 0.0, 0.0, 0.0)]
    turns = [[0.0, 0.2], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [-0.2, 0.0], [0.0, 0.0]]
    groups = [a, a, b, b, c, c]
    rollouts = [Rollout(ep, ep.outcome["reward"], t, g, "done") for ep, t, g in zip(eps, turns, groups, strict=True)]
    kept, advantages, dropped = trainer.credit(rollouts)
    assert dropped == 0 and [r.group for r in kept] == groups
    # tokens: prompt 1 2 | turn 0: 3 4 | observation 90 91 | turn 1: 5
    expected = {
        0: [0, 0, 0.55, 0.55, 0, 0, 0.55], 1: [0, 0, -0.55, -0.55, 0, 0, -0.55],
        2: [0, 0, 0.5, 0.5, 0, 0, 0.5], 3: [0, 0, -0.5, -0.5, 0, 0, -0.5],
        4: [0, 0, -0.075, -0.075, 0, 0, 0.025], 5: [0, 0, 0.025, 0.025, 0, 0, 0.025],
    }  # fmt: skip
    for i, adv in enumerate(advantages):
        assert adv.tolist() == pytest.approx(expected[i]), i
    # without the turn rewards: A and B alike, C no signal and dropped
    plain = [Rollout(r.episode, r.reward, [0.0, 0.0], r.group, "done") for r in rollouts]
    kept0, advantages0, dropped0 = trainer.credit(plain)
    assert dropped0 == 1 and [r.group for r in kept0] == groups[:4]
    assert [x.tolist() for x in advantages0[2:4]] == [x.tolist() for x in advantages[2:4]]


def _agents(good: bool) -> Any:
    """Proposer and judge demonstrators; solvers alternately right (the definition matcher) and blind."""
    blind = ["<search>zebra stripe pattern</search>", "<answer>zebra</answer>"]
    count = iter(range(10**6))

    def agents(spec: EpisodeSpec) -> Any:
        if "Propose" in spec.env_id:
            return DefinitionProposerAgent()
        if "Judge" in spec.env_id:
            n = len(spec.options["task"]["turns"])  # type: ignore[index]
            return KnownJudgementAgent({spec.options["task"]["id"]: ("solved", ["good" if good else "neutral"] * n)})  # type: ignore[index]
        return DefinitionMatchAgent() if next(count) % 2 else ReplayAgent(blind)

    return agents


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_search_game_plays_judges_and_their_assessments_become_the_judged_solvers_turn_rewards(
    corpus: Any,
) -> None:
    config = load_config(None, ["games=search", "proposals=1", "search_group=2", "drawn_tasks=2", "search_max_turns=3",
                                "judge_episodes=4", "judge_turn_weight=0.25"])  # fmt: skip
    result = play_iteration(GAMES["search"], _agents(True), config, 0, np.random.default_rng(3), ReplayBuffer())
    judges = [r for r in result.rollouts if r.role == "judge"]
    solvers = [r for r in result.rollouts if r.role == "solver"]
    assert len(judges) == 4 and {r.group for r in judges} == {("search", "judge", "it0:judge")}
    labels = [solved(ep) for ep in (r.episode for r in solvers)]
    assert True in labels and False in labels
    # "solved" for every attempt: right on the solved half, wrong on the failed half of the balanced sample
    assert sorted(r.reward for r in judges) == pytest.approx([-1.0, -1.0, 1.0, 1.0])
    assert result.stats["judge/balanced_accuracy"] == 0.5 and result.stats["judge/episodes"] == 4
    judged = [r for r in solvers if any(r.turn_rewards)]
    assert len(judged) == 4 and all(r.turn_rewards == [0.25] * len(r.episode.turns) for r in judged)
    assert all(not any(r.turn_rewards) for r in solvers if r not in judged)
    # off by default: no judge plays, no judge metric is logged
    config = load_config(None, ["games=search", "proposals=1", "search_group=2", "drawn_tasks=1", "search_max_turns=3"])
    result = play_iteration(GAMES["search"], _agents(True), config, 0, np.random.default_rng(3), ReplayBuffer())
    assert not [r for r in result.rollouts if r.role == "judge"]
    assert not any(k.startswith("judge/") for k in result.stats)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_gold_retrieval_turn_reward_pays_the_search_that_found_the_entry(corpus: Any) -> None:
    config = load_config(None, ["games=search", "proposals=0", "search_group=2", "drawn_tasks=2", "search_max_turns=3",
                                "search_gold_turn_reward=0.3"])  # fmt: skip
    result = play_iteration(GAMES["search"], _agents(False), config, 0, np.random.default_rng(3), ReplayBuffer())
    for r in (r for r in result.rollouts if r.role == "solver"):
        labels = GAMES["search"].gold_turns(r.episode)  # type: ignore[misc]
        assert r.turn_rewards == [0.3 if label else 0.0 for label in labels]
    assert any(any(r.turn_rewards) for r in result.rollouts)
    turns = [x for r in result.rollouts if r.role == "solver" for x in r.turn_rewards]  # and what the run logs of them
    assert result.stats["solver/rewarded_turn_share"] == pytest.approx(sum(x == 0.3 for x in turns) / len(turns))
    assert result.stats["solver/turn_reward_mean"] == pytest.approx(sum(turns) / len(turns)) and sum(turns) > 0


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_swe_visible_test_turn_reward_reaches_the_solvers_turn_rewards(bug_verdicts: Any) -> None:
    """The SWE game's turn signal through the game: the env's turn reward of the pytest run after the fix is
    the solver's turn reward (the outcome taken off the last turn), so credit turns it into A^T; an attempt
    that never fixes earns none. The bug has visible failures (only test_ordinal weakened)."""
    from sparring.envs.swe.tasks import repair_task

    art, result = bug_verdicts.get("partly_weakened")
    assert result.valid, result.reason
    replay = ReplayBuffer()
    replay.add_higher_order([repair_task(art, result.fail_to_pass, result.pass_to_pass, repo_image(), result)])
    config = load_config(None, ["games=swe", "swe_tasks=policy", "proposals=0", "swe_group=2", "swe_max_turns=4",
                                "swe_test_turn_reward=0.3", "concurrency=1"])  # fmt: skip
    pytest_run = "<bash>python -m pytest -q test_inflection.py</bash>"
    fix = _call("str_replace", path=SOURCE, old_str=BUGGY_LINE, new_str=ORIGINAL_LINE)
    plays = iter([[pytest_run, fix, pytest_run, "<submit>13 takes th</submit>"], [pytest_run] * 4])
    agents = lambda spec: ReplayAgent(next(plays))  # noqa: E731
    played = play_iteration(GAMES["swe"], agents, config, 0, np.random.default_rng(0), replay)
    solvers = sorted((r for r in played.rollouts if r.role == "solver"), key=lambda r: -r.reward)
    assert [r.reward for r in solvers] == [1.0, -1.0]
    assert solvers[0].turn_rewards == pytest.approx([0.0, 0.0, 0.3, 0.0]) and solvers[1].turn_rewards == [0.0] * 4


def test_scripted_judge_demonstrations_are_right_by_construction(corpus: Any, smol_tokenizer: Any) -> None:
    """Over real attempts of both outcomes: every verdict is the real outcome, the gold search good, a failed
    answer bad; each is tokenised with the judge's call as its only action."""
    make = lambda: gym.make("sparring/SearchAnswer-v0", max_turns=3)  # noqa: E731
    played = EpisodeRunner(_agents(False), RunnerConfig(concurrency=1, progress=False)).run(
        [EpisodeSpec(make, seed=s) for s in range(8)]
    )
    config = load_config(None, ["games=search", "judge_episodes=4"])
    demos, n = judge_demonstrations(config, ChatFormat(smol_tokenizer), [played], 8, np.random.default_rng(0))
    assert n == 8 and len(demos) == 8
    by_task = {GAMES["search"].judge_task(ep)["id"]: ep for ep in played}
    verdicts = []
    for demo in demos:
        ep = by_task[demo.task_id]
        verdicts.append(demo.outcome["verdict"])
        assert demo.outcome["verdict"] == ("solved" if solved(ep) else "not solved")
        words = demo.outcome["assessments"]
        gold = GAMES["search"].gold_turns(ep)  # type: ignore[misc]
        assert all(w == "good" for w, g in zip(words, gold, strict=True) if g)
        assert words[-1] == ("good" if solved(ep) else "bad")
        assert sum(demo.action_mask) > 0 and set(demo.token_turn) == {-1, 0}
    assert set(verdicts) == {"solved", "not solved"}


def test_each_solvers_attempts_give_an_equal_share_of_judge_demonstrations_both_outcomes_alike(
    corpus: Any, smol_tokenizer: Any
) -> None:
    """The demonstrator solves nearly everything; a second source of attempts (half right, half blind) gives the
    failed ones, and each source is sampled half solved, half failed: the verdict is not its solver's style."""
    make = lambda: gym.make("sparring/SearchAnswer-v0", max_turns=3)  # noqa: E731
    specs = [EpisodeSpec(make, seed=s) for s in range(16)]  # other tasks for each: an attempt's judge task is its id
    matcher = EpisodeRunner(lambda spec: DefinitionMatchAgent(), RunnerConfig(concurrency=4, progress=False)).run(
        specs[:8]
    )
    mixed = EpisodeRunner(_agents(False), RunnerConfig(concurrency=1, progress=False)).run(specs[8:])
    config = load_config(None, ["games=search", "judge_episodes=4"])
    demos, n = judge_demonstrations(config, ChatFormat(smol_tokenizer), [matcher, mixed], 8, np.random.default_rng(1))
    assert n == 8 and len(demos) == 8
    source = {GAMES["search"].judge_task(ep)["id"]: (k, solved(ep)) for k, eps in enumerate((matcher, mixed))
              for ep in eps}  # fmt: skip
    drawn = [source[demo.task_id] for demo in demos]
    assert [k for k, _ in drawn].count(0) == 4 and [k for k, _ in drawn].count(1) == 4
    mixed_labels = [solved(ep) for ep in mixed]
    assert 2 <= sum(mixed_labels) <= 6  # the blind half fails, the matcher's half solves (nearly always)
    assert sorted(label for k, label in drawn if k == 1) == [False, False, True, True]
    for demo in demos:  # right by construction, whichever solver played the attempt
        assert demo.outcome["verdict"] == ("solved" if source[demo.task_id][1] else "not solved")


def test_the_warm_start_judges_the_teachers_attempts_at_the_demonstrators_tasks(
    corpus: Any, smol_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``demonstrations`` hands the judge demonstrations the demonstrator's attempts, then each default teacher's at
    the demonstrator's first ``warm_start_judge_demos`` tasks; ``warm_start_judge_teachers=`` names none."""
    seen: list[list[list[Episode]]] = []
    real = demos_module.judge_demonstrations

    def spy(config: Any, chat: Any, sources: list[list[Episode]], count: int, rng: Any) -> Any:
        seen.append(sources)
        return real(config, chat, sources, count, rng)

    monkeypatch.setattr(demos_module, "judge_demonstrations", spy)
    base = ["games=search", "judge_episodes=2", "warm_start_episodes=6", "warm_start_proposer_episodes=0",
            "warm_start_validator_demos=0", "warm_start_judge_demos=4", "search_max_turns=3"]  # fmt: skip
    policy = type("Policy", (), {"tokenizer": smol_tokenizer})()
    kept, stats = demonstrations(load_config(None, base), policy, np.random.default_rng(0))
    (sources,) = seen
    assert [len(s) for s in sources] == [6, 4, 4] and judge_teachers(load_config(None, base), "search") == [
        "definition-search", "retrieval-floor"]  # fmt: skip
    for teacher in sources[1:]:  # the same tasks as the demonstrator's first four, played by another solver
        assert [ep.task_id for ep in teacher] == [ep.task_id for ep in sources[0][:4]]
    assert [ep.turns[0].action for ep in sources[2]] != [ep.turns[0].action for ep in sources[0][:4]]  # the question
    assert stats.played["search/judge"] == 4 and sum(ep.role == "judge" for ep in kept) == stats.kept["search/judge"]
    assert judge_teachers(load_config(None, [*base, "warm_start_judge_teachers="]), "search") == []  # no other source


def test_judge_teachers_are_checked_against_the_games_scripted_solvers() -> None:
    config = load_config(None, ["games=search,swe", "warm_start_judge_teachers=retrieval-floor,decoy-fix,oracle"])
    assert judge_teachers(config, "search") == ["retrieval-floor", "oracle"]
    assert judge_teachers(config, "swe") == ["decoy-fix"]  # the oracle is SWE's demonstrator: a source already
    assert judge_teachers(load_config(None, ["games=swe"]), "swe") == ["decoy-fix", "do-nothing"]
    assert load_config(None, ["warm_start_judge_teachers="]).warm_start_judge_teachers == []
    with pytest.raises(SparringError, match="'decoy-fix', which is no scripted solver of search; use some of"):
        load_config(None, ["games=search", "warm_start_judge_teachers=decoy-fix"])
    with pytest.raises(SparringError, match="'never-solved', which is no scripted solver"):  # a judge, not a solver
        load_config(None, ["games=swe", "warm_start_judge_teachers=never-solved"])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_short_run_with_judges_plays_and_trains_all_three_roles(smol_tokenizer: Any, tmp_path: Path) -> None:
    """``sparring train`` with judge_episodes > 0 on the default backend (vLLM): a warm start with judge
    demonstrations, then an iteration of proposers, solvers and judges whose metrics are logged; the process ends
    with nothing printed after its summary (vLLM's teardown once met a process group already ended)."""
    require(default_corpus_built(), "the default corpus")
    require_vllm()
    model = tiny_vllm_model(smol_tokenizer, tmp_path / "model")
    out = tmp_path / "run"
    command = [
        str(Path(sys.executable).with_name("sparring")), "train", f"model={model}", f"out={out}",
        "games=search", "backend=vllm", "vllm_dtype=float32", "iterations=1", "proposals=1", "search_group=2",
        "drawn_tasks=2", "search_max_turns=2",
        "max_new_tokens=8", "concurrency=4", "threads=1", "warm_start_episodes=4", "warm_start_proposer_episodes=1",
        "warm_start_validator_demos=0", "warm_start_epochs=1", "judge_episodes=2", "lam=0.5",
        "search_gold_turn_reward=0.2", "overlong=score",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "search/judge" in done.stdout + done.stderr  # the warm start's judge demonstrations
    row = read_log(out)[-1]
    assert row["search/judge/episodes"] == 2 and row["search/solver/episodes"] >= 4
    assert row["search/proposer/episodes"] == 1
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
