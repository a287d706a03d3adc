"""Export validated bugs as SWE-bench instances (JSONL and a Hugging Face dataset).

One instance per stored bug, with SWE-bench's fields in SWE-bench's meaning::

    instance_id               "OWNER__NAME-DIGEST" (SWE-bench's "owner__name-number" form)
    repo                      the upstream repository, "owner/name" (the catalog's ``github``;
                              "pypi/NAME" for a user project without one)
    base_commit               the buggy state: the bug and the weakened tests applied, one commit
                              in ``/repo`` of ``image`` (:mod:`.export_image`)
    patch                     the gold fix (the reversed bug_inject.diff); applies to base_commit
    test_patch                the tests that catch the bug (the reversed test_weaken.diff); applies
                              to base_commit
    problem_statement         the bug's symptom: how the FAIL_TO_PASS tests fail on the buggy code
                              (their short tracebacks, read in the instance image), never the tests' diff
    hints_text                "" (a generated bug has no issue thread)
    created_at                when the bug was validated into its store (ISO 8601, UTC)
    version                   the release the repository image holds
    environment_setup_commit  the release commit the environment (the repository image's Python
                              and dependencies) was installed from; in ``repo_image``, not in
                              ``image``, whose ``/repo`` has no history that holds the fix
    FAIL_TO_PASS, PASS_TO_PASS  JSON-encoded lists of pytest ids, as SWE-bench stores them

and Sparring's own: ``split`` (``train`` / ``heldout``, the catalog's split by repository),
``image`` (the instance image: SWE-bench's "instance environment"), ``repo_image`` and
``repo_name`` (the repository image and catalog name), and what replays the bug in the envs
(``sparring eval swe --instances``): ``bug_patch`` (bug_inject.diff), ``test_weaken_patch``
(test_weaken.diff), ``test_script``, ``test_files``, ``test_parser``, ``order``, ``origin``.

The Hugging Face dataset needs ``datasets`` (the ``train`` extra); without it the export stops before
writing anything and says so, unless only the JSONL is asked for (``hf=False``, ``--no-dataset``).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sparring import SparringError
from sparring.envs.swe.bugs.artifact import BugArtifact, reverse_diff
from sparring.envs.swe.bugs.export_image import build_instance_image, probe_instance
from sparring.envs.swe.validation import ValidationResult

__all__ = ["INSTANCE_FIELDS", "SWE_BENCH_FIELDS", "export_instances", "instance_id", "release_commit", "swe_instance"]

#: SWE-bench's columns, in its dataset's order.
SWE_BENCH_FIELDS = (
    "instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement", "hints_text", "created_at",
    "version", "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit",
)  # fmt: skip

#: Columns of an exported instance, in order: SWE-bench's, then Sparring's.
INSTANCE_FIELDS = SWE_BENCH_FIELDS + (
    "split", "image", "repo_image", "repo_name", "bug_patch", "test_weaken_patch", "test_script", "test_files",
    "test_parser", "order", "origin",
)  # fmt: skip


def instance_id(owner_name: str, artifact: BugArtifact) -> str:
    """SWE-bench's ``owner__name-N`` form, with the digest of the bug's id for the number."""
    return f"{owner_name.replace('/', '__')}-{artifact.bug_id.rsplit('-', 1)[-1]}"


def release_commit(image: str, repo: str = "") -> str:
    """The commit of ``/repo`` in a repository image: the last release commit of the manifest it carries.

    The image's own label is read first; without a reachable engine, the manifest the build wrote
    to ``sparring_home()/repos/REPO/manifest.json`` (the commits are deterministic, so the same
    releases give the same id). "" when neither can be read.
    """
    from sparring import sparring_home
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


def problem_statement(owner_name: str, version: str, failures: str, fail_to_pass: list[str]) -> str:
    """The bug as an issue would report it: what fails, and how; never the tests' diff."""
    head = f"There is a bug in {owner_name} (release {version}): the code no longer does what its tests expect."
    if not failures:  # the tests did not fail when probed (a slow or flaky run): name them at least
        named = ", ".join(fail_to_pass[:3])
        return f"{head}\nThese tests of the project fail on it: {named}.\nFix the code, not the tests."
    return (
        f"{head}\nThe project's complete tests catch it (the tests in this repository miss it); they fail like this:"
        f"\n\n```\n{failures}\n```\n\nFix the code, not the tests."
    )


def _created_at(artifact: BugArtifact) -> str:
    """When the bug was stored (its validation file's time), ISO 8601 in UTC; "" when unknown."""
    from sparring.envs.swe.bugs.store import bug_store_dir

    path = bug_store_dir(artifact.repo) / artifact.bug_id / "validation.json"
    if not path.is_file():
        return ""
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def swe_instance(artifact: BugArtifact, validation: ValidationResult, repo_image: str) -> dict[str, Any]:
    """One SWE-bench instance of a validated bug: builds its instance image and probes it (see the module docstring).

    Raises:
        SparringError: The repository is not in the catalog, the engine refuses the build, or the
            image does not hold the state the patches apply to.
    """
    from sparring.envs.swe.repos.catalog import get_repo

    spec = get_repo(artifact.repo)
    iid = instance_id(spec.owner_name, artifact)
    patch, test_patch = reverse_diff(artifact.bug_inject_diff), reverse_diff(artifact.test_weaken_diff)
    image = build_instance_image(artifact, repo_image, iid)
    probe = probe_instance(image, patch, test_patch, validation.fail_to_pass)
    statement = problem_statement(spec.owner_name, artifact.version, probe.failures, validation.fail_to_pass)
    row = {
        "instance_id": iid,
        "repo": spec.owner_name,
        "base_commit": probe.base_commit,
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": statement,
        "hints_text": "",
        "created_at": _created_at(artifact),
        "version": artifact.version,
        "FAIL_TO_PASS": json.dumps(validation.fail_to_pass),
        "PASS_TO_PASS": json.dumps(validation.pass_to_pass),
        "environment_setup_commit": release_commit(repo_image, artifact.repo),
        "split": spec.split,
        "image": image,
        "repo_image": repo_image,
        "repo_name": artifact.repo,
        "bug_patch": artifact.bug_inject_diff,
        "test_weaken_patch": artifact.test_weaken_diff,
        "test_script": artifact.test_script,
        "test_files": json.dumps(artifact.test_files),
        "test_parser": artifact.test_parser or "",
        "order": artifact.order,
        "origin": artifact.origin,
    }
    return {k: row[k] for k in INSTANCE_FIELDS}


def export_instances(out: Path, repos: list[str] | None = None, split: str = "all", hf: bool = True) -> dict[str, Any]:
    """Write every stored valid bug as ``instances.jsonl`` and (``hf``) a ``datasets`` dataset.

    Builds each bug's instance image (the build cache makes a second export quick) and probes it
    in a container, one line on stderr per instance.

    Args:
        out: Output folder (created).
        repos: Repositories to export; every repository of ``split`` with a store when None.
        split: Catalog split (``train``, ``heldout`` or ``all``) when ``repos`` is None.
        hf: Also save a Hugging Face dataset with ``save_to_disk`` into ``out/dataset``.

    Returns:
        A summary: instances written, per repository and per split, and the paths.

    Raises:
        SparringError: A named repository has no bug store, ``hf`` is asked for without
            ``datasets``, or an instance image cannot be built (nothing is written then).
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
    rows = []
    for i, (artifact, validation, image) in enumerate(bugs, 1):
        rows.append(swe_instance(artifact, validation, image))
        print(f"  [{i}/{len(bugs)}] {rows[-1]['instance_id']}: {rows[-1]['image']}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / "instances.jsonl"
    with jsonl.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    summary: dict[str, Any] = {"instances": len(rows), "jsonl": str(jsonl), "per_repo": {}, "per_split": {}}
    for row in rows:
        summary["per_repo"][row["repo"]] = summary["per_repo"].get(row["repo"], 0) + 1
        summary["per_split"][row["split"]] = summary["per_split"].get(row["split"], 0) + 1
    if hf:
        import datasets

        columns = {k: [row[k] for row in rows] for k in INSTANCE_FIELDS}
        features = datasets.Features(
            {k: datasets.Value("int32" if k == "order" else "string") for k in INSTANCE_FIELDS}
        )
        datasets.Dataset.from_dict(columns, features=features).save_to_disk(str(out / "dataset"))
        summary["dataset"] = str(out / "dataset")
    return summary
