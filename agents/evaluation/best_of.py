"""``sparring eval judge --best-of N --solver SPEC``: the judge picks one of N attempts; the pick's solve rate.

For each of the first ``--limit`` held-out questions, ``--solver`` makes N attempts through
``SearchAnswer-v0``: attempt ``j`` is played by the j-th SPEC of ``--solver`` (several take the
attempts in turn), sampled at ``--solver-temperature`` (1.0 by default; a scripted solver is
deterministic) with seed ``--seed + j``, into ``a<j>/`` (an ``eval search`` folder) of ``--episodes DIR``
(default ``OUT/attempts``: give two judges the same DIR to compare them on the same attempts).
The judge (``--model``) judges every attempt through ``SearchJudge-v0`` (``OUT/judged/``, a judge
report of its own), and picks per question:

* the attempt ranked first by (verdict "solved", P(solved), earlier attempt): among the attempts it
  judged solved, the one it is surest of; if it judged none solved, the one it gave the highest
  P(solved) (see :mod:`~.judge`: a scripted judge's P(solved) is its verdict, an invalid judgement's
  0.5); a tie goes to the earlier attempt.

The per-question score is whether the pick solved it (exact match). A random pick's solve rate is
the mean outcome of the question's attempts (the expectation over a uniform pick, so no draw adds
noise); ``pick − random`` is their paired difference over questions, with a paired-bootstrap 95%
interval; ``any`` (some attempt solved: the ceiling of any picker) is reported beside them.

``--game swe``: the tasks are the bugs of ``sparring eval swe``'s seeded instance set (``--limit`` bugs,
``--seed``, ``--repos``), each attempt a ``SWERepair-v0`` episode graded by the env (``a<j>/`` an
``eval swe`` folder), judged through ``SWEJudge-v0``; a bug scores 1 when the picked attempt solved it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from sparring import SparringError
from sparring.agents.episodes import Episode
from sparring.agents.evaluation.config import out_dir, run_identity, slug
from sparring.agents.evaluation.judge import (
    JudgeEvalConfig,
    check_game,
    judge_instances,
    judge_policy,
    judge_records,
    judge_run,
    record_solver,
    solved_episode,
    solver_list,
)
from sparring.agents.evaluation.reports import headline, write_report
from sparring.agents.evaluation.search import question_kind, question_source

__all__ = ["DOMAIN", "evaluate_best_of", "pick", "run_best_of_eval"]

DOMAIN = "best-of-n"


def pick(attempts: list[dict[str, Any]]) -> int:
    """The index of the attempt the judge picks: verdict "solved" first, then P(solved), then the earlier.

    Example:
        >>> pick([{"verdict": "not solved", "p_solved": 0.4}, {"verdict": "solved", "p_solved": 0.6},
        ...       {"verdict": "solved", "p_solved": 0.6}])
        1
    """
    return min(
        range(len(attempts)),
        key=lambda j: (attempts[j].get("verdict") != "solved", -float(attempts[j]["p_solved"]), j),
    )


def evaluate_best_of(config: JudgeEvalConfig) -> dict[str, Any]:
    """Play the attempts, judge each, pick per question; write the best-of-n report (score: the pick solved)."""
    check_game(config)  # a malformed judge SPEC, too, is one sentence before any attempt plays
    if not config.best_of or config.best_of < 2 or not config.solver:
        raise SparringError("best-of-n needs --best-of N (at least 2) and --solver SPEC (the attempts' solver).")
    solvers = solver_list(config.solver, "--solver", config.game)
    temperature = 1.0 if config.solver_temperature is None else config.solver_temperature
    game = config.game if config.game != "search" else None
    out = out_dir(config, DOMAIN, game, f"n{config.limit}", f"best{config.best_of}", slug(config.solver))
    folder = Path(config.episodes) if config.episodes else out / "attempts"
    cache: dict[str, Any] = {}
    attempts = []  # per attempt j: (solver, question id, episode) of every question
    for j in range(config.best_of):
        spec = solvers[j % len(solvers)]
        played = record_solver(
            spec, config, folder / f"a{j}", temperature=temperature, seed=config.seed + j, cache=cache
        )
        attempts.append([(f"a{j}-{spec}", qid, ep) for qid, ep in played])
    episodes = [item for attempt in attempts for item in attempt]
    instances = judge_instances(episodes, config)
    judged_out = out / "judged"
    judged_config = replace(config, out=str(judged_out))
    judged_run = judge_run(judged_config, folder)
    judged = judge_records(judge_policy(config.model, instances, config, cache), instances, config, judged_out,
                           judged_run)  # fmt: skip
    write_report(judged_out, judged_run, judged, plots=False)
    by_id = {r["id"]: r for r in judged}
    records = []
    for q, (_, qid, first) in enumerate(attempts[0]):
        tries = []
        for j, attempt in enumerate(attempts):
            solver, _, episode = attempt[q]
            record = by_id[f"{slug(solver)}/{qid}"]
            tries.append({"attempt": j, "solver": solver.split("-", 1)[1], "solved": solved_episode(episode),
                          "verdict": record["verdict"], "p_solved": record["p_solved"]})  # fmt: skip
        chosen = pick(tries)
        solved = [t["solved"] for t in tries]
        records.append({
            "id": qid,
            **_task_fields(first),
            "score": 1.0 if solved[chosen] else 0.0,
            "solved": solved[chosen],
            "random": sum(solved) / len(solved),
            "any": 1.0 if any(solved) else 0.0,
            "picked": chosen,
            "attempts_detail": tries,
            "turns": len(attempts[chosen][q][2].turns),
            "tokens": None,
            "seconds": 0.0,
            "reason": None if solved[chosen] else ("none_solved" if not any(solved) else "wrong_pick"),
            "error": None,
        })  # fmt: skip
    where = {"corpus": config.corpus} if config.game == "search" else {"game": "swe", "repos": config.repos}
    run = run_identity(config, DOMAIN, solver=config.solver, best_of=config.best_of, **where,
                       solver_temperature=temperature, seed=config.seed)  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    return write_report(Path(out), run | {"instances": [r["id"] for r in records]}, records, plots=config.plots)


def _task_fields(episode: Episode) -> dict[str, Any]:
    """A task's group and kind (a question's source and kind; a bug's repository and kind) and its text."""
    if episode.domain == "swe":
        from sparring.agents.evaluation.swe import bug_kind

        return {"group": str(episode.task.get("repo", "")), "kind": bug_kind(episode.task), "question": None}
    task = episode.task
    return {"group": question_source(task), "kind": question_kind(task), "question": task.get("question")}


def run_best_of_eval(config: JudgeEvalConfig) -> dict[str, Any]:
    """``sparring eval judge --best-of N --solver SPEC``: best-of-n; prints the summary as JSON."""
    report = evaluate_best_of(config)
    print(json.dumps(headline(report)))
    return report
