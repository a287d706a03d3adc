"""The warm start's demonstrations: scripted agents play every role, the successful episodes are kept.

A model that cannot yet call a tool (SmolLM2-135M: 0 of 100 held-out search episodes) gets every
reward equal and learns nothing from RL, so training begins with supervised learning on episodes
the project's scripted agents (:mod:`sparring.agents.demonstrators`) played through the same envs.
Only episodes that succeeded are kept (solver: solved; proposer: a proposal that passes the filters
with its seed answer in a retrieved document; validator: see :func:`validator_demonstrations`; judge, when
``judge_episodes`` > 0: see :func:`judge_demonstrations`), and each is
tokenised exactly as the runner tokenises a policy's episode (the chat template once, then the
actions and the template's deltas), so the loss sees the policy's own token format. The
demonstrations are made at run time, never stored in the repository.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sparring.agents.chat import ChatFormat, append_tokens
from sparring.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
from sparring.envs.core import Episode
from sparring.training.config import JUDGE_TEACHERS, TrainConfig
from sparring.training.game import GAMES, end_reason, solved
from sparring.training.judging import sample_for_judging, scripted_judgement

__all__ = [
    "DemoStats", "demonstrations", "judge_demonstrations", "judge_teachers", "tokenize_episode",
    "validator_demonstrations",
]


@dataclass
class DemoStats:
    """How many demonstrations each role played and kept."""

    played: dict[str, int] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)
    failed: dict[str, dict[str, int]] = field(default_factory=dict)
    """Why the episodes that were not kept failed, per ``domain/role``: end reason or outcome status."""

    def success_rate(self) -> dict[str, float]:
        """Kept over played, per ``domain/role``."""
        return {k: self.kept.get(k, 0) / n for k, n in self.played.items() if n}


def tokenize_episode(chat: ChatFormat, episode: Episode, tools: list[dict[str, Any]]) -> Episode:
    """Give a scripted (text-only) episode the token buffer the runner builds for a policy's episode.

    Action tokens carry behaviour logprob 0 (no model sampled them); supervised learning ignores it.
    """
    episode.token_ids, episode.token_turn, episode.action_mask, episode.logprobs = [], [], [], []
    messages = chat.prompt_messages(episode.prompt, tools)
    append_tokens(episode, chat.encode(chat.prompt_text(messages, tools)), -1, action=False)
    for t, turn in enumerate(episode.turns):
        append_tokens(episode, chat.encode(turn.action), t, action=True)
        if t < len(episode.turns) - 1:
            text = chat.observation_text(turn.observation, action_closed_by=None)
            append_tokens(episode, chat.encode(text), t + 1, action=False)
    return episode


def validator_demonstrations(tokenizer: Any, proposer_episodes: list[Episode]) -> list[Episode]:
    """RAG validation demonstrations from search proposer episodes: the evidence, and the seed answer.

    In the search game the policy itself validates a proposal (SSP): shown the documents the
    proposer retrieved and a few distractors, without search, it must answer the seed answer. An
    untrained small model copies the prompt's example answer instead (SmolLM2-135M: 110 of 160
    demonstrated proposals), so no proposal is valid and the proposer gets no signal. Each
    proposal that reached validation with its seed answer in a retrieved document becomes one
    demonstration, whatever the untrained validator said: the validation prompt as
    :func:`~sparring.agents.answering.generator_answer_fn` tokenises it (documents in the same
    shuffled order) and the seed answer as the action.
    """
    from sparring.agents.answering import ANSWER_PREFILL, ANSWER_STOP, chat_prompt_ids
    from sparring.agents.scripted import copied_title
    from sparring.envs.search.scoring import answer_in_text
    from sparring.envs.search.validation import Proposal, validation_prompt

    demos = []
    for ep in proposer_episodes:
        o = ep.outcome
        question, answer = o.get("question"), o.get("answer")
        if ep.error or "validator_answer" not in o or not question or not isinstance(answer, str):
            continue  # never reached validation (filtered, or no question)
        documents, noise = list(o.get("documents") or []), list(o.get("noise") or [])
        if not any(answer_in_text(answer, str(d.get("contents", ""))) for d in documents):
            continue  # not grounded: the evidence does not hold the answer
        seed = o.get("order_seed")  # the order validation read the documents in (drawn by the env)
        prompt = validation_prompt(Proposal(question, answer, documents, noise, order_seed=seed))
        demo = Episode(env_id="rag-validation", role="validator", domain="search", task_id=ep.task_id, task={},
                       prompt=prompt)  # fmt: skip
        append_tokens(demo, chat_prompt_ids(tokenizer, [{"role": "user", "content": prompt}], ANSWER_PREFILL), -1,
                      action=False)  # fmt: skip
        action = copied_title(answer) + ANSWER_STOP  # the title's tokens as the documents show them
        append_tokens(demo, tokenizer.encode(action, add_special_tokens=False), 0, action=True)
        demos.append(demo)
    return demos


def judge_demonstrations(
    config: TrainConfig, chat: ChatFormat, sources: list[list[Episode]], count: int, rng: np.random.Generator
) -> tuple[list[Episode], int]:
    """Judge demonstrations over solver attempts of both outcomes: right by construction.

    ``sources`` are the attempts of different solvers (the warm start's demonstrator first, then
    ``warm_start_judge_teachers``). Each gives an equal share of ``count``, half solved and half failed where it
    holds both (:func:`~sparring.training.judging.sample_for_judging`), so that a verdict cannot be read off a
    solver's style. A scripted judge is handed each judged attempt's real outcome as its verdict and, per turn, the
    rule of :func:`~sparring.training.judging.scripted_judgement` (a search turn that newly retrieved the gold entry is
    good; the submission is good when it solved, bad when not; the rest neutral). It plays them through the judge
    env like any role, and a judgement is kept only when the env took it as valid with that verdict.

    Returns:
        The tokenised demonstrations and how many judge episodes played.
    """
    import gymnasium as gym

    from sparring.agents.demonstrators import KnownJudgementAgent

    finished = [[ep for ep in source if end_reason(ep) in ("done", "turn_limit") and ep.turns] for source in sources]
    finished = [source for source in finished if source]
    if not finished or count <= 0:
        return [], 0
    game = GAMES[finished[0][0].domain]
    picked: list[Episode] = []
    for k, source in enumerate(finished):
        share = count // len(finished) + (k < count % len(finished))
        picked += [source[i] for i in sample_for_judging([solved(ep) for ep in source], share, rng)]
    tasks = [game.judge_task(ep) for ep in picked]
    right = {
        str(task["id"]): scripted_judgement(ep, solved(ep), game.gold_turns)
        for task, ep in zip(tasks, picked, strict=True)
    }
    runner = EpisodeRunner(lambda spec: KnownJudgementAgent(right), RunnerConfig(concurrency=4, progress=False))
    make = lambda: gym.make(game.judge_env)  # noqa: E731
    played = runner.run([EpisodeSpec(make, seed=0, options={"task": t}, env_id=game.judge_env) for t in tasks])
    env: Any = gym.make(game.judge_env)
    tools = list(env.unwrapped.tools)
    env.close()
    kept = [tokenize_episode(chat, ep, tools) for ep in played
            if ep.outcome.get("valid") and ep.outcome.get("verdict") == right[ep.task_id][0]]  # fmt: skip
    return kept, len(played)


def judge_teachers(config: TrainConfig, domain: str) -> list[str]:
    """The scripted solvers (by ``sparring eval`` name) whose attempts at ``domain`` the judge demonstrations judge
    besides the demonstrator's (``warm_start_judge_teachers``: None gives the game's :data:`JUDGE_TEACHERS`), the
    demonstrator itself left out."""
    from sparring.agents.evaluation.specs import SCRIPTED

    given = config.warm_start_judge_teachers
    names = list(JUDGE_TEACHERS[domain]) if given is None else [n for n in given if domain in SCRIPTED[n][1]]
    return [n for n in dict.fromkeys(names) if n != _demonstrator(config, domain)]  # its attempts are a source


def _teacher_attempts(
    config: TrainConfig, domain: str, env_id: str, make: Callable[[], Any], seeds: np.ndarray
) -> list[list[Episode]]:
    """Each of :func:`judge_teachers`' attempts at the demonstrator's first ``warm_start_judge_demos`` tasks (by
    their seeds): enough for its share of the judge demonstrations, both outcomes where it has them."""
    from sparring.agents.evaluation.specs import SCRIPTED

    attempts = []
    for name in judge_teachers(config, domain):

        def player(spec: EpisodeSpec, agent: type = SCRIPTED[name][0]) -> Any:
            return agent()

        runner = EpisodeRunner(player, RunnerConfig(config.concurrency, progress=False))
        specs = [EpisodeSpec(make, seed=int(s), env_id=env_id) for s in seeds[: config.warm_start_judge_demos]]
        attempts.append(runner.run(specs))
    return attempts


def _proposal_ok(episode: Episode) -> bool:
    return episode.error is None and bool(episode.outcome.get("valid"))


def _stored_bugs(split: str = "train") -> dict[str, list[dict[str, Any]]]:
    """Validated bugs of the stored repositories, as artifact dicts, by repository."""
    from sparring.envs.swe.bugs.store import load_repair_tasks

    bugs: dict[str, list[dict[str, Any]]] = {}
    for task in load_repair_tasks(split=split):
        bugs.setdefault(task["repo"], []).append(task["artifact"])
    return bugs


def _demonstrator(config: TrainConfig, domain: str) -> str:
    """The scripted solver (by ``sparring eval`` name) whose successful attempts are ``domain``'s solver
    demonstrations: search's ``search_teacher``, SWE's oracle."""
    return config.search_teacher if domain == "search" else "oracle"


def _plans(config: TrainConfig, policy: Any) -> list[tuple[str, str, str, Callable[[Any], Any], dict, Callable]]:
    """(game, role, env id, agent factory, env kwargs, success test) of every role to demonstrate."""
    from sparring.agents.demonstrators import DefinitionProposerAgent, StoredBugAgent
    from sparring.agents.evaluation.specs import SCRIPTED

    plans: list[tuple[str, str, str, Callable[[Any], Any], dict[str, Any], Callable[[Episode], bool]]] = []
    if "search" in config.games:
        game = GAMES["search"]
        teacher = SCRIPTED[_demonstrator(config, "search")][0]  # the scripted agent `sparring eval` knows by that name
        plans.append(("search", "solver", game.solver_env, lambda spec: teacher(), {}, solved))
        # validated by grounding (the seed answer in a retrieved document), not by the policy: the model
        # the warm start begins from cannot answer yet (untrained SmolLM2 copied the prompt's example for
        # 110 of 160 demonstrated proposals, leaving 6 proposer demonstrations); the validator
        # demonstrations made from these proposals teach it to
        plans.append(
            ("search", "proposer", game.proposer_env, lambda spec: DefinitionProposerAgent(), {}, _proposal_ok)
        )
    if "swe" in config.games:
        game = GAMES["swe"]
        oracle = SCRIPTED[_demonstrator(config, "swe")][0]
        plans.append(("swe", "solver", game.solver_env, lambda spec: oracle(), {}, solved))
        bugs = _stored_bugs()
        if bugs:
            repos = sorted(bugs)
            plans.append(
                ("swe", "proposer", game.proposer_env, lambda spec: StoredBugAgent(bugs, seed=spec.seed or 0),
                 {"repos": repos, "strategies": ("direct",)}, _proposal_ok)
            )  # fmt: skip
    return plans


def demonstrations(
    config: TrainConfig, policy: Any, rng: np.random.Generator, episodes: int | None = None
) -> tuple[list[Episode], DemoStats]:
    """Play the scripted demonstrators of every role of ``config.games``; keep and tokenise the successes.

    Args:
        config: The run's settings (games, turn limits, ``warm_start_episodes``).
        policy: The generator, whose tokenizer and chat template the demonstrations are written in.
        rng: Draws the tasks.
        episodes: Episodes per role (default: ``config.warm_start_episodes`` for solvers,
            ``config.warm_start_proposer_episodes`` for proposers; SWE roles play a quarter, or
            ``config.warm_start_swe_episodes`` each: they cost container time and long sequences).
    """
    import gymnasium as gym

    chat = ChatFormat(policy.tokenizer)
    stats = DemoStats()
    kept: list[Episode] = []
    n = episodes if episodes is not None else config.warm_start_episodes
    proposer = config.warm_start_proposer_episodes
    n_proposer = n if episodes is not None or proposer is None else proposer
    for domain, role, env_id, agent, kwargs, ok in _plans(config, policy):
        turns = GAMES[domain].max_turns(config)
        count = n_proposer if role == "proposer" else n
        if count <= 0:
            continue
        if domain == "swe":
            swe = config.warm_start_swe_episodes
            count = swe if episodes is None and swe is not None else max(1, count // 4)
            if count <= 0:
                continue

        def make(env_id: str = env_id, turns: int = turns, kwargs: dict = kwargs) -> Any:
            return gym.make(env_id, max_turns=turns, **kwargs)

        validating = (domain, role) == ("search", "proposer") and config.warm_start_validator_demos > 0
        # The RAG validation demonstrations come from proposer episodes too (about nine in ten reach
        # validation with their answer in the evidence): more of them play when more are asked for,
        # and only the first ``count`` are proposer demonstrations.
        extra = max(0, config.warm_start_validator_demos * 5 // 4 - count) if validating else 0
        seeds = rng.integers(0, 2**31 - 1, size=count + extra)
        runner = EpisodeRunner(agent, RunnerConfig(concurrency=config.concurrency, progress=False))
        everything = runner.run([EpisodeSpec(make, seed=int(s), env_id=env_id) for s in seeds])
        played = everything[:count]
        env = make()
        try:
            tools = list(env.unwrapped.tools)
        finally:
            env.close()
        good = [tokenize_episode(chat, ep, tools) for ep in played if ok(ep)]
        stats.played[f"{domain}/{role}"] = len(played)
        stats.kept[f"{domain}/{role}"] = len(good)
        why: dict[str, int] = {}
        for ep in played:
            if not ok(ep):
                reason = ep.error or ",".join(map(str, ep.outcome.get("reasons") or [])) or end_reason(ep)
                reason = f"{reason[:60]} ({ep.outcome.get('status')})" if ep.outcome.get("status") else reason[:60]
                why[reason] = why.get(reason, 0) + 1
        stats.failed[f"{domain}/{role}"] = why
        kept += good
        if role == "solver" and config.judge_episodes > 0:  # the judge learns from this game's attempts, both outcomes
            sources = [played] + _teacher_attempts(config, domain, env_id, make, seeds[:count])
            judges, n_played = judge_demonstrations(config, chat, sources, config.warm_start_judge_demos, rng)
            stats.played[f"{domain}/judge"], stats.kept[f"{domain}/judge"] = n_played, len(judges)
            kept += judges
        if validating:
            rag = validator_demonstrations(policy.tokenizer, everything)[: config.warm_start_validator_demos]
            stats.played["search/validator"] = sum("validator_answer" in ep.outcome for ep in everything)
            stats.kept["search/validator"] = len(rag)
            kept += rag
    return kept, stats
