"""The SWE side of ``sparring eval judge --game swe``: repair attempts to judge, and their judge episodes.

**The set.** Each solver SPEC repairs every bug of the seeded SWE instance set that ``sparring eval swe``
evaluates (:func:`~sparring.agents.evaluation.swe_instances.build_instance_set`: ``--split``, ``--repos``,
``--limit`` bugs, ``--seed``) through ``SWERepair-v0``, graded by the env (hidden tests restored in a
fresh container). Each solver's attempts are one ``eval swe`` folder whose records also keep the whole
episode (its task, turns and outcome, the final tree included; no token fields), so the set is
recorded once and read back. The default solvers are the game's scripted ones: ``scripted:oracle``
(solves every bug), ``scripted:decoy-fix`` (the oracle's moves, a comment-only diff: never solves) and
``scripted:do-nothing`` (submits at once).

**The judgement.** Each attempt is one ``SWEJudge-v0`` episode on :func:`~sparring.envs.swe.judge_env.swe_judge_task`
(the repair prompt, each command and its output, the changed files and summary; never the grade, the
submission's own observation, the bug's diff or the hidden tests). The judge may run the visible tests
on the attempt's final tree in a fresh container, up to three runs, then judges: four turns at most.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparring.agents.episodes import Episode
from sparring.agents.evaluation.config import run_identity, runner_config
from sparring.agents.evaluation.records import Instance, play
from sparring.agents.evaluation.reports import write_report

if TYPE_CHECKING:
    from sparring.agents.evaluation.swe import SWEEvalConfig

#: What the functions here take as ``config``: a ``judge.JudgeEvalConfig`` (named, not imported: ``judge``
#: imports this module).
JudgeEvalConfig = Any

__all__ = ["JUDGE_TURNS", "SWE_SOLVERS", "record_swe_solver", "swe_judge_env", "swe_settings"]

#: The SWE game's scripted solvers: every bug solved, none solved with a change, none solved without one.
SWE_SOLVERS = "scripted:oracle,scripted:decoy-fix,scripted:do-nothing"
#: Turns of a SWE judge: up to three test runs, then the judgement (SWEJudge-v0's limit).
JUDGE_TURNS = 4


def swe_settings(config: JudgeEvalConfig) -> SWEEvalConfig:
    """The ``eval swe`` settings the solvers play under: the instance set (``--limit`` bugs), turns, timeouts."""
    from sparring.agents.evaluation.swe import SWEEvalConfig

    fields = ("split", "max_turns", "max_new_tokens", "max_seconds", "concurrency", "request_timeout", "device",
              "threads", "chat_only", "repos", "seed", "command_timeout", "test_timeout")  # fmt: skip
    return SWEEvalConfig(**{k: getattr(config, k) for k in fields}, n_bugs=config.limit or 0, plots=False)


def record_swe_solver(
    spec_text: str,
    config: JudgeEvalConfig,
    out: Path,
    load: Callable[[], Any],
    stored: Callable[[Episode], dict[str, Any]],
    *,
    temperature: float,
    seed: int,
) -> list[tuple[str, Episode]]:
    """Play one solver on the SWE instance set into ``out`` (resumable); (bug id, episode) of each bug.

    Args:
        spec_text: The solver's SPEC.
        config: The judge evaluation (its SWE settings).
        out: The solver's folder of the set (an ``eval swe`` folder).
        load: Loads the solver's policy; called only when an attempt is missing.
        stored: What a record keeps of the episode.
        temperature: The solver's sampling temperature (0: greedy).
        seed: The seed of its sampling.
    """
    from sparring.agents.evaluation.records import RECORDS_FILE, RecordLog
    from sparring.agents.evaluation.swe import instance_tasks, record_of, swe_instances

    settings = replace(swe_settings(config), model=spec_text, out=str(out))
    tasks, source = instance_tasks(settings)
    instances = swe_instances(settings, tasks)

    def record(instance: Instance, episode: Episode) -> dict[str, Any]:
        return record_of(instance, episode) | {"episode": stored(episode)}

    # greedy play draws nothing, so its seed is no part of the attempt: best-of's greedy attempt j is the set's
    sampling = {"temperature": temperature, "seed": seed} if temperature > 0 else {"temperature": 0.0}
    run = run_identity(settings, "swe", instances_from=source, n_bugs=settings.n_bugs, set_seed=settings.seed,
                       repos=sorted({i.group for i in instances}), sampling=sampling)  # fmt: skip
    rc = runner_config(settings)
    if temperature > 0:
        rc.sampling = replace(rc.sampling, temperature=temperature, seed=seed)
    done = RecordLog(out / RECORDS_FILE).load()
    policy = None if all(i.id in done for i in instances) else load()
    records = play(instances, policy, rc, out, run, record)
    write_report(out, run, records, plots=False)
    return [(str(r["id"]), Episode.from_dict(r["episode"])) for r in records]


def swe_judge_env(config: JudgeEvalConfig) -> tuple[Callable[[], Any], Callable[[Episode], dict[str, Any]]]:
    """The SWE judge's env factory (``SWEJudge-v0``: up to three test runs, then the judgement) and its task of an
    attempt (:func:`~sparring.envs.swe.judge_env.swe_judge_task`)."""
    from sparring.envs.swe.judge_env import SWEJudgeEnv, swe_judge_task

    return partial(SWEJudgeEnv, max_turns=JUDGE_TURNS, command_timeout=config.command_timeout), swe_judge_task
