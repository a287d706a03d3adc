"""``sparring eval swe --predictions FILE``: grade a SWE-bench predictions file like the envs grade a repair.

A predictions file is SWE-bench's: JSON lines (or one JSON list) of objects with
``instance_id``, ``model_name_or_path`` and ``model_patch`` (a diff against the instance's
``base_commit``; empty or null when the model made none). The instances are the rows of
``--instances FILE`` (the ``instances.jsonl`` of ``sparring export swe-instances``), else the
stored bugs of every repository, under the ids the export gives them.

Each prediction is one repair-env episode played by :class:`PredictionAgent`: the env builds the
solver's repository (the tree of ``base_commit``) in a fresh container, the agent writes the
patch there and applies it as SWE-bench's harness does (``git apply``, then ``git apply
--reject``, then ``patch --fuzz=5`` where installed; when none succeeds, the tree is reset), and
submits. So a prediction is graded by the env's own grading
(:func:`~sparring.envs.swe.grading.grade_repair`) under the same integrity rules as a policy's
repair: only changes to the code are carried (a patch's edits to the tests are dropped and
listed), capability checks, the oracle tests restored, the harness's own run.
The evaluation folder, its report and its resumption are those of the other eval modes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparring import SparringError

__all__ = ["PATCH_PATH", "PredictionAgent", "load_predictions", "prediction_tasks"]

#: Where the agent writes the patch in the solver's container (outside /repo: not a change).
PATCH_PATH = "/tmp/sparring-prediction.diff"

#: SWE-bench's ways to apply a patch, tried in order (its harness's list; ``patch`` may be absent). When
#: none succeeds, the tree goes back to ``base_commit``, as SWE-bench counts such a patch as not applied
#: (a partly applied one, ``--reject``'s leftovers, must not be graded as the model's repair).
APPLY = (
    f"{{ git apply --verbose {PATCH_PATH} || git apply --verbose --reject {PATCH_PATH} || "
    f"{{ command -v patch >/dev/null && patch --batch --fuzz=5 -p1 -i {PATCH_PATH}; }}; }} || "
    "{ git checkout -q -- . && git clean -fdq; echo 'the patch does not apply' >&2; exit 1; }"
)

_FORMAT = "each line is a JSON object with instance_id, model_name_or_path and model_patch"


def load_predictions(path: Path) -> list[dict[str, str]]:
    """The predictions of a SWE-bench predictions file, in order, each with the three fields as strings.

    Raises:
        SparringError: The file is missing, empty or not JSON, a prediction lacks a field or has
            one of the wrong type, or two predictions name the same instance.
    """
    path = Path(path)
    if not path.is_file():
        raise SparringError(f"no predictions file at {path}; pass the JSONL of SWE-bench predictions.")
    text = path.read_text(encoding="utf-8", errors="replace")
    items: list[tuple[str, Any]] = []
    if text.lstrip().startswith("["):
        try:
            items = [(f"item {i}", row) for i, row in enumerate(json.loads(text), 1)]
        except json.JSONDecodeError as e:
            raise SparringError(f"{path} is not JSON ({e}); {_FORMAT}.") from None
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append((f"line {number}", json.loads(line)))
            except json.JSONDecodeError as e:
                raise SparringError(f"line {number} of {path} is not JSON ({e}); {_FORMAT}.") from None
    if not items:
        raise SparringError(f"{path} holds no predictions; {_FORMAT}.")
    predictions: list[dict[str, str]] = []
    seen: set[str] = set()
    for where, row in items:
        problem = _problem(row)
        if problem:
            raise SparringError(f"{where} of {path} is not a SWE-bench prediction ({problem}); {_FORMAT}.")
        iid = row["instance_id"]
        if iid in seen:
            raise SparringError(f"{where} of {path} predicts {iid} a second time; keep one prediction per instance.")
        seen.add(iid)
        predictions.append(
            {
                "instance_id": iid,
                "model_name_or_path": row["model_name_or_path"],
                "model_patch": row["model_patch"] or "",
            }
        )
    return predictions


def _problem(row: Any) -> str:
    """What keeps ``row`` from being a prediction, or ""."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not an object"
    for key in ("instance_id", "model_name_or_path"):
        if not isinstance(row.get(key), str) or not row[key]:
            return f"no {key} string"
    if "model_patch" not in row:
        return "no model_patch"
    if row["model_patch"] is not None and not isinstance(row["model_patch"], str):
        return "model_patch is not a string"
    return ""


def _stored_tasks() -> dict[str, dict[str, Any]]:
    """Every stored bug's repair task, by the instance id the export gives it."""
    from sparring.envs.swe.bugs.export import instance_id
    from sparring.envs.swe.bugs.store import load_bugs, stored_repos
    from sparring.envs.swe.repos.catalog import load_catalog
    from sparring.envs.swe.tasks import repair_task

    catalog = load_catalog()
    tasks = {}
    for name in stored_repos():
        if name not in catalog:  # a store of a repository no catalog names: nothing exports it either
            continue
        for artifact, validation, image in load_bugs(name):
            task = repair_task(artifact, validation.fail_to_pass, validation.pass_to_pass, image)
            task["id"] = instance_id(catalog[name].owner_name, artifact)
            tasks[task["id"]] = task
    return tasks


def prediction_tasks(predictions: list[dict[str, str]], instances: Path | None) -> list[dict[str, Any]]:
    """The repair task of each prediction, in the predictions' order.

    Raises:
        SparringError: A prediction names an instance that ``instances`` (or, without it, the bug
            stores) does not hold, or ``instances`` is not an instance file.
    """
    from sparring.agents.evaluation.swe_instances import load_instance_file

    if instances is not None:
        known = {str(t["id"]): t for t in load_instance_file(instances)}
        where = str(instances)
    else:
        known = _stored_tasks()
        where = "the bug stores"
    unknown = [p["instance_id"] for p in predictions if p["instance_id"] not in known]
    if unknown:
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        raise SparringError(
            f"{len(unknown)} prediction(s) name instances not in {where} ({', '.join(unknown[:3])}{more}); "
            "pass --instances with the instances.jsonl of `sparring export swe-instances` they were made for."
        )
    return [known[p["instance_id"]] for p in predictions]


def _call(name: str, **arguments: Any) -> str:
    """A tool call in the JSON form, which carries any text (a diff) unharmed."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


class PredictionAgent:
    """Plays one prediction: writes its patch, applies it as SWE-bench's harness does, submits.

    An empty patch is submitted at once (nothing changed). The apply command's failure is the
    episode's business, not the agent's: the repair is graded with whatever got applied.
    """

    name = "predictions"

    def __init__(self, patch: str):
        """Remember the patch (a diff against ``base_commit``)."""
        self.patch = patch
        self._actions: list[str] = []

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Plan the episode."""
        submit = _call("submit", summary="the predicted patch")
        if not self.patch.strip():
            self._actions = [submit]
            return
        patch = self.patch if self.patch.endswith("\n") else self.patch + "\n"
        self._actions = [_call("create", path=PATCH_PATH, content=patch), _call("bash", command=APPLY), submit]

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The next planned action (the last one again if the env asks for more)."""
        return self._actions.pop(0) if len(self._actions) > 1 else self._actions[0]
