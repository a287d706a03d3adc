"""Repair tasks: what the repair env is given for a validated bug, and order-2 bugs from failed repairs.

A task is a plain dict (the env's ``options["task"]`` and ``info["task"]``), so it travels through
JSONL, the bug stores and the SWE-bench export unchanged.
"""

from __future__ import annotations

from typing import Any

from sparring.envs.swe.bugs.artifact import BugArtifact
from sparring.envs.swe.grading import SolverChanges, higher_order_artifact
from sparring.envs.swe.validation import ValidationResult, validate_artifact

__all__ = ["REPAIR_PROMPT", "higher_order_task", "repair_task"]

REPAIR_PROMPT = """You are working in a Python repository at /repo (you can run its tests with pytest).
A bug has been introduced into its code, and the tests that reveal it have been weakened. The diff
below shows how those tests should read; it is NOT applied, and you must not apply it or edit tests:
your task is to fix the code so that tests like these pass.

```diff
{tests_diff}```

Tools: bash, view, str_replace, create, submit. Fix the bug in the code, then call submit with a
one-line summary of your fix, e.g. <submit>fixed the off-by-one in parse()</submit>."""


def repair_task(
    artifact: BugArtifact,
    fail_to_pass: list[str],
    pass_to_pass: list[str],
    image: str,
    validation: ValidationResult | None = None,
) -> dict[str, Any]:
    """A repair task (the env's ``options["task"]`` / ``info["task"]``) for a validated bug.

    With its ``validation``, the task also records how grading must run (``per_test_timeout``, as
    validated) and how long the original code's graded run took (``clean_seconds``, which bounds
    grading's runs); without, grading uses the defaults and the full test timeout.
    """
    task = {
        "id": artifact.bug_id,
        "repo": artifact.repo,
        "image": image,
        "order": artifact.order,
        "artifact": artifact.to_dict(),
        "fail_to_pass": list(fail_to_pass),
        "pass_to_pass": list(pass_to_pass),
    }
    if validation is not None:
        task |= {"clean_seconds": validation.clean_seconds, "per_test_timeout": validation.per_test_timeout}
    return task


def higher_order_task(
    pool: Any, task: dict[str, Any], changes: SolverChanges, config: Any = None
) -> dict[str, Any] | None:
    """Turn a failed repair of ``task`` into a new, validated repair task (or None if it is not a valid bug).

    Args:
        pool: A :class:`SandboxPool` of the task's image.
        task: The repair task the solver failed (``info["task"]`` of the repair env).
        changes: The solver's final changes (``SWERepairEnv.last_changes``).
        config: :class:`ValidationConfig` for the new bug.
    """
    artifact = higher_order_artifact(pool, BugArtifact.from_dict(task["artifact"]), changes)
    if artifact is None:
        return None
    result = validate_artifact(artifact, task["image"], pool, config)
    if not result.valid:
        return None
    return repair_task(artifact, result.fail_to_pass, result.pass_to_pass, task["image"], result) | {
        "validation": result.to_dict()
    }
