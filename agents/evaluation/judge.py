"""``sparring eval judge``: the judge role on held-out solver episodes, against their real outcomes.

**The judge set** (``--episodes DIR``) is held-out solver episodes recorded from several policies
(``--solvers``, comma-separated SPECs): each solver answers the first ``--limit`` held-out questions
of the corpus (never trained on) through ``SearchAnswer-v0``, greedy unless ``--solver-temperature``
is set (then sampled, seeded by ``--seed``). Each solver's episodes are one ``eval search`` folder
``DIR/<solver>/`` whose records also keep the whole episode; the set is recorded on first use and
read back afterwards (an interrupted recording resumes; a folder of another set is refused), so the
same command evaluates every judge on the same episodes. ``--game swe`` builds the set of SWE repair
attempts instead (:mod:`~.judge_swe`: the bugs of ``sparring eval swe``'s seeded instance set, judged
through ``SWEJudge-v0``, which may run the visible tests on each attempt's final tree).

**The evaluation** plays the judge role of ``--model`` through the real ``SearchJudge-v0`` env on each
episode (its view is :func:`~sparring.envs.search.judge_env.search_judge_task`: the question, the
turns and the submitted answer, never the gold answers or the grade), greedy, one instance per
episode, and scores its verdict against the episode's real outcome (exact match; in SWE, the env's
grading by the hidden tests):

* accuracy: the share of verdicts that are right (an invalid judgement counts as wrong);
* balanced accuracy: the mean of the accuracy on solved and on failed episodes (a constant verdict
  gets 0.5 whatever the solve rate);
* AUROC of P(solved): for a model, the probability it gave the first token of its verdict's value
  (the token where "solved" and "not solved" part), as the runner recorded it, taken as P(solved)
  for a "solved" verdict and 1 − it for "not solved"; for a policy with no token logprobs (a scripted
  agent, a chat-only API) the verdict itself (1 or 0). An invalid judgement scores 0.5;
* the share of invalid judgements.

Each figure has a 95% bootstrap interval over episodes (:mod:`~.stats`). Instances are named
``<solver>/<question id>``, so two judges on the same set compare with ``sparring eval compare``
(accuracy, balanced accuracy and AUROC, paired). ``scripted:oracle`` is the judge that knows the
outcome (the ceiling), ``scripted:never-solved`` a constant one (the floor), ``scripted:visible-tests``
(SWE) a rule: "solved" when the attempt changed a file and the visible tests pass on it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from sparring import SparringError
from sparring.agents.episodes import Episode
from sparring.agents.evaluation.config import check_ranges, check_split, out_dir, run_identity, runner_config, slug
from sparring.agents.evaluation.records import Instance, play
from sparring.agents.evaluation.reports import headline, write_report
from sparring.agents.evaluation.search import SearchEvalConfig, SearchSettings, search_instances
from sparring.agents.evaluation.specs import load_policy, parse_spec
from sparring.agents.runner import EpisodeSpec, RunnerConfig

__all__ = [
    "DEFAULT_SOLVERS",
    "GAMES",
    "JudgeEvalConfig",
    "check_game",
    "evaluate_judge",
    "judge_instances",
    "judge_policy",
    "judge_records",
    "judge_run",
    "record_solver",
    "run_judge_eval",
    "set_episodes",
    "solved_episode",
    "solver_list",
    "stored_episode",
    "verdict_probability",
]

DOMAIN = "judge"
#: Solvers of the default judge set: the search teachers, from the best to the floor (docs/experiments.md),
#: named ``teachers`` in a solver list (in the SWE game, ``teachers`` names its scripted solvers).
DEFAULT_SOLVERS = "scripted:definition-match,scripted:definition-search,scripted:retrieval-floor"
#: The games a judge set can be built from.
GAMES = ("search", "swe")
_VALUE = re.compile(r'"verdict"\s*:\s*"')
_TOKEN_FIELDS = ("token_ids", "token_turn", "action_mask", "logprobs")


@dataclass
class JudgeEvalConfig(SearchSettings):
    """What ``sparring eval judge`` runs."""

    game: str = "search"
    """search (held-out questions, SearchJudge-v0) or swe (repair attempts at the bugs of eval swe's instance set,
    SWEJudge-v0)."""
    max_turns: int = 4
    """The solvers' turn limit (searches plus the answer; SWE commands plus the submission); a search judge has
    one turn, a SWE judge up to three test runs and its judgement."""
    max_new_tokens: int = 64
    """Tokens generated per turn at most, by a model solver and by the judge (a judge call on an attempt of 3 turns
    is 39 SmolLM2 tokens)."""
    model: str = "default"
    """The judge's SPEC: default, a hub id or local folder, a training checkpoint folder, openai:URL#MODEL,
    vllm:MODEL, scripted:oracle (knows each outcome: the ceiling), scripted:never-solved (a constant) or
    scripted:visible-tests (SWE: "solved" when the attempt changed a file and its visible tests pass)."""
    episodes: str | None = None
    """The judge set's folder: recorded there on first use, read back afterwards (default: a folder under evals/
    named after the solvers, --limit and --seed)."""
    solvers: str = "teachers"
    """Comma-separated SPECs of the solvers whose held-out episodes make the judge set; ``teachers`` stands for
    the three scripted search teachers (definition-match, definition-search, retrieval-floor), in SWE for
    scripted:oracle, scripted:decoy-fix and scripted:do-nothing."""
    solver_temperature: float | None = None
    """Sampling temperature of the solvers (None: greedy in the judge set, 1.0 for --best-of's attempts)."""
    seed: int = 0
    """Seed of the solvers' sampling (attempt j of --best-of samples with seed + j)."""
    best_of: int | None = None
    """Best-of-n: n attempts of --solver per question, the judge picks one; the pick's solve rate against a
    random pick's, paired (None: evaluate the judge on the judge set)."""
    solver: str | None = None
    """--best-of's solver SPEC; several, comma-separated, take the attempts in turn."""
    repos: str | None = None
    """SWE: comma-separated repositories of the split whose bugs make the set (default: every one whose image is
    built); --limit counts the bugs and --seed draws them, as eval swe's --n-bugs and --seed do."""
    command_timeout: float = 120.0
    """SWE: seconds one bash call of a solver, or one test run of the judge, may take."""
    test_timeout: float = 300.0
    """SWE: seconds the hidden tests may run when an attempt is graded."""


def solver_settings(config: JudgeEvalConfig) -> SearchEvalConfig:
    """The ``eval search`` settings the solvers play under (the questions, turns, tokens, corpus)."""
    fields = ("split", "max_turns", "max_new_tokens", "max_seconds", "concurrency", "request_timeout", "device",
              "threads", "corpus", "retriever", "limit", "topk", "chat_only")  # fmt: skip
    return SearchEvalConfig(**{k: getattr(config, k) for k in fields}, plots=False)


def _policy(spec_text: str, domain: str, config: JudgeEvalConfig, cache: dict[str, Any]) -> Any:
    """The policy of a SPEC, loaded once per command (a model that solves and judges is loaded once)."""
    spec = parse_spec(spec_text)
    key = spec.text if spec.kind != "scripted" else f"{spec.text}:{domain}"
    if key not in cache:
        cache[key] = load_policy(
            spec, domain, chat_only=config.chat_only, timeout_s=config.request_timeout, device=config.device
        )
    return cache[key]


def stored_episode(episode: Episode) -> dict[str, Any]:
    """What a judge set's record keeps of a solver episode: all but the token fields (the judge reads text, and
    they would make the set large)."""
    return {k: v for k, v in episode.to_dict().items() if k not in _TOKEN_FIELDS}


def record_solver(
    spec_text: str, config: JudgeEvalConfig, out: Path, *, temperature: float, seed: int, cache: dict[str, Any]
) -> list[tuple[str, Episode]]:
    """Play one solver on the held-out tasks into ``out`` (resumable), keeping each whole episode; (task id, episode).

    The tasks are the questions (search) or the instance set's bugs (SWE, :mod:`~.judge_swe`). The solver's
    model is loaded only when an episode is missing.
    """
    from sparring.agents.evaluation.records import RECORDS_FILE, RecordLog
    from sparring.agents.evaluation.search import record_fn

    if config.game == "swe":
        from sparring.agents.evaluation.judge_swe import record_swe_solver

        return record_swe_solver(spec_text, config, out, lambda: _policy(spec_text, "swe", config, cache),
                                 stored_episode, temperature=temperature, seed=seed)  # fmt: skip
    settings = replace(solver_settings(config), model=spec_text, out=str(out))
    instances = search_instances(settings)
    record_search = record_fn(None)

    def record_of(instance: Instance, episode: Episode) -> dict[str, Any]:
        return record_search(instance, episode) | {"episode": stored_episode(episode)}

    sampling = {"temperature": temperature, "seed": seed}
    run = run_identity(settings, "search", corpus=config.corpus, topk=config.topk, judged=False, sampling=sampling)
    rc = runner_config(settings)
    if temperature > 0:
        rc.sampling = replace(rc.sampling, temperature=temperature, seed=seed)
    done = RecordLog(out / RECORDS_FILE).load()
    policy = None if all(i.id in done for i in instances) else _policy(spec_text, "search", config, cache)
    records = play(instances, policy, rc, out, run, record_of)
    write_report(out, run, records, plots=False)
    return [(str(r["id"]), Episode.from_dict(r["episode"])) for r in records]


def solver_list(text: str, option: str, game: str = "search") -> list[str]:
    """The SPECs of a comma-separated option, each checked (a malformed one is one sentence before anything plays);
    ``teachers`` stands for the game's default solvers."""
    from sparring.agents.evaluation.judge_swe import SWE_SOLVERS

    teachers = (SWE_SOLVERS if game == "swe" else DEFAULT_SOLVERS).split(",")
    named = [s.strip() for s in text.split(",") if s.strip()]
    solvers = [spec for s in named for spec in (teachers if s == "teachers" else [s])]
    if not solvers:
        raise SparringError(f"{option} names no solver; give comma-separated SPECs (e.g. scripted:definition-match).")
    for spec in solvers:
        parse_spec(spec)
    return solvers


def set_episodes(config: JudgeEvalConfig, cache: dict[str, Any]) -> tuple[Path, list[tuple[str, str, Episode]]]:
    """The judge set: its folder and (solver, question id, episode) of each episode, recording what is missing."""
    solvers = solver_list(config.solvers, "--solvers", config.game)
    temperature = config.solver_temperature or 0.0
    where = config.corpus if config.game == "search" else ["swe", config.repos]
    key = hashlib.sha256(json.dumps([solvers, temperature, where]).encode()).hexdigest()[:8]
    game = "" if config.game == "search" else f"{config.game}-"
    folder = Path(
        config.episodes or Path("evals") / f"judge-set-{game}{config.split}-n{config.limit}-s{config.seed}-{key}"
    )
    episodes: list[tuple[str, str, Episode]] = []
    for text in solvers:
        played = record_solver(
            text, config, folder / slug(text), temperature=temperature, seed=config.seed, cache=cache
        )
        # an episode whose env failed, or that made no turn, is no attempt to judge (training judges none either)
        episodes += [(text, qid, ep) for qid, ep in played if ep.error is None and ep.turns]
    return folder, episodes


def judge_instances(episodes: list[tuple[str, str, Episode]], config: JudgeEvalConfig) -> list[Instance]:
    """One judge episode per solver episode: id ``<solver>/<task id>``, by solver and outcome.

    Search: ``SearchJudge-v0``; SWE: ``SWEJudge-v0`` (:func:`~.judge_swe.swe_judge_env`).
    """
    from sparring.envs.search.judge_env import SearchJudgeEnv, search_judge_task

    make_env: Callable[[], Any]
    if config.game == "swe":
        from sparring.agents.evaluation.judge_swe import swe_judge_env

        make_env, task_of = swe_judge_env(config)
    else:
        make_env, task_of = partial(SearchJudgeEnv, corpus=config.corpus), search_judge_task
    return [
        Instance(
            f"{slug(solver)}/{qid}",
            EpisodeSpec(make_env, seed=0, options={"task": task_of(ep)}),
            solver,
            "solved" if solved_episode(ep) else "failed",
        )
        for solver, qid, ep in episodes
    ]


def solved_episode(episode: Episode) -> bool:
    """Whether a solver episode solved its task, the label a judge is scored against: exact match (search), the
    env's grading (SWE), and no error."""
    if episode.domain == "swe":
        return bool(episode.outcome.get("solved")) and episode.error is None
    return float(episode.outcome.get("em", 0.0)) == 1.0 and episode.error is None


def verdict_probability(episode: Episode, tokenizer: Any) -> float | None:
    """The probability the judge gave the first token of its verdict's value, or None without token logprobs.

    That token is where "solved" and "not solved" part; the runner recorded its logprob under the raw
    (untempered) distribution when decoding greedily. The verdict is in the last turn (a SWE judge's test
    runs come before it).
    """
    if tokenizer is None or not episode.logprobs:
        return None
    last = max(episode.token_turn)
    index = [i for i, (turn, act) in enumerate(zip(episode.token_turn, episode.action_mask, strict=True))
             if act and turn == last]  # fmt: skip
    ids = [episode.token_ids[i] for i in index]
    match = _VALUE.search(tokenizer.decode(ids))
    if match is None:
        return None
    for k in range(len(ids)):  # the first token whose text reaches past the value's start
        if len(tokenizer.decode(ids[: k + 1])) > match.end():
            return math.exp(episode.logprobs[index[k]])
    return None


def _judge_record(labels: dict[str, bool], tokenizer: Any) -> Any:
    def record_of(instance: Instance, episode: Episode) -> dict[str, Any]:
        label = labels[instance.id]
        outcome = episode.outcome
        valid = bool(outcome.get("valid")) and episode.error is None
        verdict = outcome.get("verdict") if valid else None
        right = valid and (verdict == "solved") == label
        p = verdict_probability(episode, tokenizer) if valid else None
        if not valid:
            p_solved = 0.5  # no verdict: it ranks every episode alike
        elif p is None:
            p_solved = 1.0 if verdict == "solved" else 0.0
        else:
            p_solved = p if verdict == "solved" else 1.0 - p
        return {
            "label": label,
            "solved": right,
            "score": 1.0 if right else 0.0,
            "valid": valid,
            "verdict": verdict,
            "p_solved": p_solved,
            "p_from": "token" if p is not None else "verdict",
            "assessments": outcome.get("assessments"),
            "reason": None if right else ("error" if episode.error else ("wrong_verdict" if valid else "invalid")),
            "invalid_reason": None if valid else (outcome.get("reason") or episode.error),
        }

    return record_of


def judge_policy(spec_text: str, instances: list[Instance], config: JudgeEvalConfig, cache: dict[str, Any]) -> Any:
    """The runner policy of the judge SPEC; ``scripted:oracle`` answers each episode's real outcome.

    Args:
        spec_text: The judge's SPEC.
        instances: The judge instances (the oracle's answers are looked up by their judge task).
        config: The evaluation.
        cache: Policies already loaded by this command (a solver's model is reused, not loaded twice).
    """
    from sparring.agents.demonstrators import KnownJudgementAgent

    spec = parse_spec(spec_text)
    if spec.kind == "scripted" and spec.target == "oracle":
        table = {
            str(i.spec.options["task"]["id"]): (  # type: ignore[index]
                "solved" if i.kind == "solved" else "not solved",
                ["neutral"] * len(i.spec.options["task"]["turns"]),  # type: ignore[index]
            )
            for i in instances
        }
        return lambda _spec: KnownJudgementAgent(table)
    return _policy(spec_text, DOMAIN, config, cache)


def judge_records(
    policy: Any, instances: list[Instance], config: JudgeEvalConfig, out: Path, run: dict[str, Any]
) -> list[dict[str, Any]]:
    """Play the judge on the instances into ``out`` (resumable, greedy; one turn each, in SWE up to three test runs
    and the judgement); the records."""
    from sparring.agents.evaluation.judge_swe import JUDGE_TURNS

    labels = {i.id: i.kind == "solved" for i in instances}
    rc: RunnerConfig = runner_config(config)
    rc.max_turns = JUDGE_TURNS if config.game == "swe" else 1
    return play(instances, policy, rc, out, run, _judge_record(labels, getattr(policy, "tokenizer", None)))


def check_game(config: JudgeEvalConfig) -> None:
    """Refuse, in one sentence, an unknown game, an option out of range, ``--limit all`` for SWE (a set of N
    bugs) or a judge SPEC that cannot judge the game."""
    if config.game not in GAMES:
        raise SparringError(f"unknown game {config.game!r}; use --game search or --game swe.")
    check_ranges(config)
    check_split(config.split)
    if config.game == "swe" and config.limit is None:
        raise SparringError("--game swe judges a set of N bugs; give --limit N, not all.")
    if parse_spec(config.model).text == "scripted:visible-tests" and config.game != "swe":
        raise SparringError("scripted:visible-tests judges SWE attempts only (it runs their tests); add --game swe.")


def judge_run(config: JudgeEvalConfig, folder: Path, **settings: Any) -> dict[str, Any]:
    """What makes two judge evaluations the same (``run.json``): the set's folder and the game's settings."""
    from sparring.agents.evaluation.judge_swe import JUDGE_TURNS

    if config.game == "swe":
        return run_identity(config, DOMAIN, game="swe", episodes=str(folder), repos=config.repos,
                            max_turns=JUDGE_TURNS, **settings)  # fmt: skip
    return run_identity(config, DOMAIN, episodes=str(folder), corpus=config.corpus, max_turns=1, **settings)


def evaluate_judge(config: JudgeEvalConfig) -> dict[str, Any]:
    """Record (or read back) the judge set, play the judge on it, write the report."""
    check_game(config)  # a malformed judge SPEC, too, is one sentence before the set is recorded
    cache: dict[str, Any] = {}
    folder, episodes = set_episodes(config, cache)
    instances = judge_instances(episodes, config)
    policy = judge_policy(config.model, instances, config, cache)
    out = out_dir(config, DOMAIN, config.game if config.game != "search" else None, f"n{len(instances)}")
    run = judge_run(config, folder)
    records = judge_records(policy, instances, config, out, run)
    return write_report(out, run, records, plots=config.plots)


def run_judge_eval(config: JudgeEvalConfig) -> dict[str, Any]:
    """``sparring eval judge``: the judge on the judge set; prints the summary as JSON."""
    report = evaluate_judge(config)
    print(json.dumps(headline(report)))
    return report
