"""``sparring eval swe``: repair validated bugs of held-out repositories through the runner, graded by the env.

Every bug of the instance set (:mod:`~sparring.agents.evaluation.swe_instances`) is one greedy
:class:`~sparring.envs.swe.repair_env.SWERepairEnv` episode: the solver's repository in a fresh
container, the tools, and on ``submit`` the env's grading in another fresh container (oracle tests
restored, every expected test id must pass). An instance is solved only if grading says so; the
turn or time limit, a grading error or an env failure make it unsolved, with the reason recorded.
``--predictions FILE`` grades a SWE-bench predictions file the same way, each patch one episode
(:mod:`~sparring.agents.evaluation.swe_predictions`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sparring import SparringError
from sparring.agents.episodes import Episode
from sparring.agents.evaluation.config import (
    EvalConfig,
    check_ranges,
    check_split,
    out_dir,
    run_identity,
    runner_config,
)
from sparring.agents.evaluation.records import Instance, check_run, play
from sparring.agents.evaluation.reports import headline, write_report
from sparring.agents.evaluation.specs import load_policy, parse_spec
from sparring.agents.evaluation.swe_instances import build_instance_set, load_instance_file
from sparring.agents.runner import EpisodeSpec

__all__ = ["SWEEvalConfig", "bug_kind", "evaluate_swe", "grade_predictions", "run_swe_eval", "swe_instances"]


@dataclass
class SWEEvalConfig(EvalConfig):
    """What ``sparring eval swe`` runs."""

    repos: str | None = None
    """Comma-separated repositories of the split (default: every one whose image is built)."""
    n_bugs: int = 20
    """Bugs in the instance set, spread evenly over the repositories."""
    seed: int = 0
    """Seed of the instance set: the same seed gives the same bugs."""
    instances: str | None = None
    """Replay this set instead: an instances.json, a JSONL of repair tasks, or the JSONL of
    `sparring export swe-instances`."""
    predictions: str | None = None
    """Grade this SWE-bench predictions file (JSONL of instance_id, model_name_or_path, model_patch) instead of
    playing --model: the instances come from --instances (an export's instances.jsonl), else the bug stores."""
    generate: bool = True
    """Generate procedural bugs where a store holds fewer than the set needs (first use only)."""
    command_timeout: float = 120.0
    """Seconds one bash call of the solver may run."""
    test_timeout: float = 300.0
    """Seconds the tests may run when a repair is graded."""


def bug_kind(task: dict[str, Any]) -> str:
    """A bug's kind: how it was made (``procedural:off_by_one``, ``agent:...``), or ``order-N`` past the first."""
    order = int(task.get("order") or 1)
    if order > 1:
        return f"order-{order}"
    return str(task.get("artifact", {}).get("origin") or "unknown")


def instance_tasks(config: SWEEvalConfig) -> tuple[list[dict[str, Any]], str]:
    """The repair tasks to play and where they come from (the set's file, or the predictions file)."""
    check_ranges(config)
    if config.predictions:
        from sparring.agents.evaluation.swe_predictions import load_predictions, prediction_tasks

        instances = Path(config.instances) if config.instances else None
        return prediction_tasks(load_predictions(Path(config.predictions)), instances), str(config.predictions)
    if config.instances:
        return load_instance_file(Path(config.instances)), str(Path(config.instances))
    check_split(config.split)
    repos = [r.strip() for r in (config.repos or "").split(",") if r.strip()] or None
    tasks, path = build_instance_set(config.split, repos, config.n_bugs, config.seed, generate=config.generate)
    return tasks, str(path)


def swe_instances(config: SWEEvalConfig, tasks: list[dict[str, Any]]) -> list[Instance]:
    """One repair-env episode per task."""
    from sparring.envs.swe.repair_env import SWERepairEnv

    def make_env() -> SWERepairEnv:
        return SWERepairEnv(
            max_turns=config.max_turns, command_timeout=config.command_timeout, test_timeout=config.test_timeout
        )

    return [
        Instance(str(t["id"]), EpisodeSpec(make_env, seed=i, options={"task": t}), str(t.get("repo", "")), bug_kind(t))
        for i, t in enumerate(tasks)
    ]


def record_of(instance: Instance, episode: Episode) -> dict[str, Any]:
    """The SWE fields of a finished instance's record."""
    outcome = dict(episode.outcome)
    solved = bool(outcome.get("solved")) and not episode.error
    changed = list(outcome.get("changed_files") or [])
    if solved:
        reason = None
    elif episode.error:
        reason = "error"
    elif outcome.get("status") in ("turn_limit", "time_limit", "context_limit"):
        reason = str(outcome["status"])
    elif outcome.get("tampering"):
        reason = "tampering"
    elif outcome.get("error"):
        reason = "grading_error"
    elif not changed:
        reason = "no_change"
    else:
        reason = "tests_fail"
    return {
        "solved": solved,
        "score": 1.0 if solved else 0.0,
        "changed_files": changed,
        "failing": len(outcome.get("failing") or {}),
        "missing": len(outcome.get("missing") or []),
        "reason": reason,
        "outcome": outcome,
    }


def evaluate_swe(
    policy: Any, config: SWEEvalConfig, record: Callable[[Instance, Episode], dict[str, Any]] = record_of
) -> dict[str, Any]:
    """Play ``policy`` on the instance set into the evaluation folder and write the report.

    Args:
        policy: A generator, or a factory of scripted agents (see :func:`load_policy`).
        config: The evaluation.
        record: The SWE fields of a finished instance's record.

    Returns:
        The report (``report.json``'s content).
    """
    tasks, source = instance_tasks(config)
    instances = swe_instances(config, tasks)
    if config.predictions:
        out = out_dir(config, "swe", "predictions", Path(config.predictions).stem)
    elif config.instances:
        out = out_dir(config, "swe", Path(config.instances).stem)
    else:
        out = out_dir(
            config, "swe", config.repos and config.repos.replace(",", "+"), f"n{config.n_bugs}", f"s{config.seed}"
        )
    given = bool(config.instances or config.predictions)
    settings = {
        "instances_from": config.instances,
        "predictions_from": config.predictions,
        "n_bugs": None if given else config.n_bugs,
        "seed": None if given else config.seed,
        "repos": sorted({i.group for i in instances}),
    }
    run = run_identity(config, "swe", **settings)
    # checked before instances.json is written, so another run's folder keeps its own
    check_run(out, run | {"instances": [i.id for i in instances]})
    (out / "instances.json").write_text(json.dumps({"source": source, "instances": tasks}))
    records = play(instances, policy, runner_config(config), out, run, record)
    return write_report(out, run, records, plots=config.plots)


def grade_predictions(config: SWEEvalConfig) -> dict[str, Any]:
    """Grade ``config.predictions`` into the evaluation folder; the report names its model_name_or_path.

    Raises:
        SparringError: --model is given too, or the file or its instances are refused
            (:mod:`~sparring.agents.evaluation.swe_predictions`).
    """
    from sparring.agents.evaluation.swe_predictions import PredictionAgent, load_predictions, prediction_tasks
    from sparring.envs.swe.repos.catalog import get_repo

    if config.model != "default":
        raise SparringError("--predictions grades the patches of a file, not a model; leave out --model.")
    predictions = load_predictions(Path(config.predictions or ""))
    tasks = prediction_tasks(predictions, Path(config.instances) if config.instances else None)
    # the report's split is the instances' (their repositories'), whatever --split says
    split = "+".join(sorted({get_repo(str(t["repo"])).split for t in tasks}))
    names = sorted({p["model_name_or_path"] for p in predictions})
    patches = {p["instance_id"]: p["model_patch"] for p in predictions}

    def policy(spec: EpisodeSpec) -> PredictionAgent:
        return PredictionAgent(patches[(spec.options or {})["task"]["id"]])

    def record(instance: Instance, episode: Episode) -> dict[str, Any]:
        fields = record_of(instance, episode)
        if fields["reason"] == "no_change" and patches[instance.id].strip():
            fields["reason"] = "patch_does_not_apply"  # a patch that changed nothing did not apply
        return fields

    return evaluate_swe(policy, replace(config, model=",".join(names), split=split), record)


def run_swe_eval(config: SWEEvalConfig) -> dict[str, Any]:
    """``sparring eval swe``: load the SPEC (or read the predictions), evaluate, write the report, print its summary."""
    if config.n_bugs < 1:
        raise SparringError(f"--n-bugs must be at least 1, not {config.n_bugs}.")
    check_split(config.split)
    if config.predictions:
        report = grade_predictions(config)
        print(json.dumps(headline(report)))
        return report
    spec = parse_spec(config.model)
    instance_tasks(config)  # the set is built (or refused) before a model loads
    policy = load_policy(
        spec, "swe", chat_only=config.chat_only, timeout_s=config.request_timeout, device=config.device
    )
    report = evaluate_swe(policy, config)
    print(json.dumps(headline(report)))
    return report
