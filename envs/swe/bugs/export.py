"""Export validated bugs as SWE-bench-style instances (JSONL and a Hugging Face dataset).

One instance per stored bug, with SWE-bench's fields and a few of our own::

    instance_id     "<repo>-<version>-<hash>"
    repo            catalog name of the repository
    version         release the image holds
    base_commit     the commit of /repo in the image (its newest release); the bug state is that
                    commit with bug_patch and test_weaken_patch applied ("" when neither the
                    image nor its manifest can be read)
    patch           the fix: the reversed bug_inject.diff
    test_patch      the oracle tests: the reversed test_weaken.diff
    FAIL_TO_PASS    JSON list of test ids the fix must make pass
    PASS_TO_PASS    JSON list of test ids that must keep passing
    image           Docker image with the original repository at /repo
    bug_patch       bug_inject.diff, test_weaken_patch: test_weaken.diff; the task's starting
                    state is the image's /repo with both applied (what the solver sees)
    test_script, test_files, test_parser, problem_statement, order, origin

``FAIL_TO_PASS`` and ``PASS_TO_PASS`` are JSON-encoded strings, as in SWE-bench's datasets.

The Hugging Face dataset needs ``datasets`` (the ``train`` extra); without it the export stops before
writing anything and says so, unless only the JSONL is asked for (``hf=False``, ``--no-dataset``).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from sparring import SparringError, sparring_home
from sparring.envs.swe.bugs.artifact import BugArtifact, reverse_diff
from sparring.envs.swe.tasks import REPAIR_PROMPT
from sparring.envs.swe.validation import ValidationResult

__all__ = ["INSTANCE_FIELDS", "base_commit", "export_instances", "swe_instance"]

#: Columns of an exported instance, in order.
INSTANCE_FIELDS = (
    "instance_id", "repo", "version", "base_commit", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS",
    "image", "bug_patch", "test_weaken_patch", "test_script", "test_files", "test_parser", "problem_statement",
    "order", "origin",
)  # fmt: skip


def base_commit(image: str, repo: str = "") -> str:
    """The commit of ``/repo`` in ``image``: the last release commit of the manifest the image carries.

    The image's own label is read first; without a reachable engine, the manifest the build wrote
    to ``sparring_home()/repos/REPO/manifest.json`` (the commits are deterministic, so the same
    releases give the same id). "" when neither can be read.
    """
    from sparring.containers.images import image_labels
    from sparring.envs.swe.repos.images import MANIFEST_LABEL

    text = None
    try:
        labels = image_labels(image)
        text = (labels or {}).get(MANIFEST_LABEL)
    except SparringError:  # no engine: fall back to the build's copy of the manifest
        path = sparring_home() / "repos" / (repo or image.split("/")[-1].split(":")[0]) / "manifest.json"
        text = path.read_text() if path.is_file() else None
    if not text:
        return ""
    try:
        history = json.loads(text).get("history") or []
        return str(history[-1]["sha"]) if history else ""
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):  # a manifest of another format
        return ""


def swe_instance(
    artifact: BugArtifact, validation: ValidationResult, image: str, commit: str | None = None
) -> dict[str, Any]:
    """One SWE-bench-style instance for a validated bug (``commit``: the image's, see :func:`base_commit`)."""
    return {
        "instance_id": artifact.bug_id,
        "repo": artifact.repo,
        "version": artifact.version,
        "base_commit": base_commit(image, artifact.repo) if commit is None else commit,
        "patch": reverse_diff(artifact.bug_inject_diff),
        "test_patch": reverse_diff(artifact.test_weaken_diff),
        "FAIL_TO_PASS": json.dumps(validation.fail_to_pass),
        "PASS_TO_PASS": json.dumps(validation.pass_to_pass),
        "image": image,
        "bug_patch": artifact.bug_inject_diff,
        "test_weaken_patch": artifact.test_weaken_diff,
        "test_script": artifact.test_script,
        "test_files": json.dumps(artifact.test_files),
        "test_parser": artifact.test_parser or "",
        "problem_statement": REPAIR_PROMPT.format(tests_diff=reverse_diff(artifact.test_weaken_diff)),
        "order": artifact.order,
        "origin": artifact.origin,
    }


def export_instances(out: Path, repos: list[str] | None = None, split: str = "all", hf: bool = True) -> dict[str, Any]:
    """Write every stored valid bug as ``instances.jsonl`` and (``hf``) a ``datasets`` dataset.

    Args:
        out: Output folder (created).
        repos: Repositories to export; every repository of ``split`` with a store when None.
        split: Catalog split (``train``, ``heldout`` or ``all``) when ``repos`` is None.
        hf: Also save a Hugging Face dataset with ``save_to_disk`` into ``out/dataset``.

    Returns:
        A summary: instances written, per repository, and the paths.

    Raises:
        SparringError: A named repository has no bug store, or ``hf`` is asked for without ``datasets``.
    """
    from sparring.envs.swe.bugs.store import load_bugs, stored_repos
    from sparring.envs.swe.repos.catalog import load_catalog

    if hf and importlib.util.find_spec("datasets") is None:
        raise SparringError(
            "the Hugging Face dataset needs the `datasets` package: `pip install 'sparring[train]'`, "
            "or pass --no-dataset to write instances.jsonl only."
        )
    known = stored_repos()
    unknown = [name for name in repos or [] if name not in known]
    if unknown:
        raise SparringError(
            f"no bug store for {', '.join(map(repr, unknown))}; stores exist for: {', '.join(known) or 'none'} "
            "(`sparring bugs generate --repo NAME` makes one)."
        )
    names = repos or sorted(load_catalog(split))
    bugs = [bug for name in names for bug in load_bugs(name)]
    commits = {image: base_commit(image, a.repo) for a, _, image in bugs}  # one look-up per image
    rows = [swe_instance(a, v, image, commits[image]) for a, v, image in bugs]
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / "instances.jsonl"
    with jsonl.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    summary: dict[str, Any] = {"instances": len(rows), "jsonl": str(jsonl), "per_repo": {}}
    for row in rows:
        summary["per_repo"][row["repo"]] = summary["per_repo"].get(row["repo"], 0) + 1
    if hf:
        import datasets

        columns = {k: [row[k] for row in rows] for k in INSTANCE_FIELDS}
        features = datasets.Features(
            {k: datasets.Value("int32" if k == "order" else "string") for k in INSTANCE_FIELDS}
        )
        datasets.Dataset.from_dict(columns, features=features).save_to_disk(str(out / "dataset"))
        summary["dataset"] = str(out / "dataset")
    return summary
