"""Stores of validated bugs per repository, and procedural bug generation (docs/swe.md).

A store is a folder per repository under ``sparring_home()/bugs/<repo>/``; each bug is a folder
with the five artifact files, ``artifact.json`` and ``validation.json``. :func:`generate_bugs`
fills it with procedural bugs: an AST mutation of the code (:mod:`~sparring.envs.swe.bugs.mutations`)
gives ``bug_inject.diff``; running the whole suite on the mutant finds the tests that now fail,
whose files become ``test_files.txt``; replacing those tests' bodies with ``pass`` gives
``test_weaken.diff``; and the artifact goes through the same seven checks as an injector's.
The repair env draws its tasks from the stores (:func:`load_repair_tasks`).
"""

from __future__ import annotations

import ast
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sparring import SparringError, pyast, sparring_home
from sparring.containers.pools import PoolSet
from sparring.envs.swe.bugs.artifact import DEFAULT_TEST_SCRIPT, BugArtifact, file_diff
from sparring.envs.swe.bugs.mutations import Mutation, sample_mutations
from sparring.envs.swe.grading import snapshot
from sparring.envs.swe.runs import GIT, TestRun, _tar
from sparring.envs.swe.tasks import repair_task
from sparring.envs.swe.validation import ValidationConfig, ValidationResult, validate_artifact

logger = logging.getLogger(__name__)

__all__ = [
    "GenerationReport",
    "available_repos",
    "bug_store_dir",
    "generate_bugs",
    "load_bugs",
    "load_repair_tasks",
    "save_bug",
    "stored_repos",
    "weaken_tests",
]


def bug_store_dir(repo: str, root: Path | None = None) -> Path:
    """The store folder of one repository, under ``root`` (default: ``sparring_home()/bugs``)."""
    return (root if root is not None else sparring_home() / "bugs") / repo


def stored_repos(root: Path | None = None) -> list[str]:
    """Repositories that have a bug store under ``root`` (see :func:`bug_store_dir`), sorted."""
    folder = bug_store_dir("", root)
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def save_bug(artifact: BugArtifact, validation: ValidationResult, image: str, root: Path | None = None) -> Path:
    """Add a validated bug to its repository's store (under ``root``, see :func:`bug_store_dir`); returns its folder."""
    folder = artifact.save(bug_store_dir(artifact.repo, root) / artifact.bug_id)
    (folder / "validation.json").write_text(json.dumps(validation.to_dict() | {"image": image}, indent=1))
    return folder


def load_bugs(repo: str) -> list[tuple[BugArtifact, ValidationResult, str]]:
    """The valid bugs in a repository's store: (artifact, validation, image), in a stable order."""
    bugs = []
    root = bug_store_dir(repo)
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        try:
            artifact = BugArtifact.load(folder)
            data = json.loads((folder / "validation.json").read_text())
        except (OSError, ValueError, TypeError):
            continue  # a half-written bug (interrupted generation) is skipped, not fatal
        image = data.pop("image", "")
        try:
            validation = ValidationResult.from_dict(data)
        except (ValueError, TypeError) as e:  # a hand-edited validation.json: said, then skipped
            logger.warning("skipping the bug in %s: its validation.json is malformed (%s)", folder, e)
            continue
        if validation.valid:
            bugs.append((artifact, validation, image))
    return bugs


def available_repos(split: str = "train", names: list[str] | None = None) -> list[Any]:
    """Catalog specs (of ``names``, or of ``split``) whose repository image is built."""
    from sparring.envs.swe.repos.catalog import get_repo, load_catalog

    specs = [get_repo(n) for n in names] if names else list(load_catalog(split).values())
    return [s for s in specs if _image_built(s)]


def _image_built(spec: Any) -> bool:
    from sparring.envs.swe.repos.images import image_status

    return image_status(spec)[0] in ("built", "stale")


def load_repair_tasks(split: str = "train", repos: list[str] | None = None) -> list[dict[str, Any]]:
    """Repair tasks for every stored bug of the split's repositories (or of ``repos``)."""
    from sparring.envs.swe.repos.catalog import load_catalog

    names = repos or sorted(load_catalog(split))
    return [
        repair_task(a, v.fail_to_pass, v.pass_to_pass, image, v) for name in names for a, v, image in load_bugs(name)
    ]


# --------------------------------------------------------------------------- weakening


def _test_functions(tree: ast.Module) -> dict[tuple[str, ...], ast.FunctionDef | ast.AsyncFunctionDef]:
    """Test functions by their node-id path: ("test_f",) or ("TestC", "test_m")."""
    found: dict[tuple[str, ...], ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found[(node.name,)] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[(node.name, item.name)] = item
    return found


def weaken_tests(path: str, text: str, test_ids: list[str]) -> str:
    """The file with the body of each named test replaced by ``pass`` (so it passes whatever the code does).

    Args:
        path: The test file's repository-relative path.
        text: Its source.
        test_ids: Node ids (``path::Class::test[param]``); those of other files are ignored.

    Returns:
        The weakened source ("" when none of the ids names a function of this file).
    """
    tree = pyast.parse(text)
    functions = _test_functions(tree)
    lines = text.splitlines(keepends=True)
    targets = set()
    for test_id in test_ids:
        parts = test_id.split("::")
        if parts[0] != path or len(parts) < 2:
            continue
        key = tuple(parts[1:-1]) + (parts[-1].split("[")[0],)
        if key in functions:
            targets.add(key)
    if not targets:
        return ""
    for key in sorted(targets, key=lambda k: functions[k].lineno, reverse=True):
        fn = functions[key]
        first, last = fn.body[0], fn.body[-1]
        start = first.lineno - 1
        if first.lineno == fn.lineno:  # one-line def: `def test(): assert x`
            return ""
        indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
        lines[start : (last.end_lineno or last.lineno)] = [f"{indent}pass\n"]
    return "".join(lines)


# --------------------------------------------------------------------------- generation


@dataclass
class GenerationReport:
    """What :func:`generate_bugs` did.

    Attributes:
        repo: The repository.
        tried: Mutations tried.
        saved: Folders of the bugs added to the store.
        rejected: Reason -> count (``no_failing_test``, a validation check's name, ...).
        seconds: Wall time.
        validation_seconds: Seconds each validation took.
        valid_seconds: Seconds of the validations of the saved bugs, in the order of ``saved``.
        baseline_seconds: Seconds of the suite's run on the original code.
    """

    repo: str
    tried: int = 0
    saved: list[str] = field(default_factory=list)
    rejected: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    validation_seconds: list[float] = field(default_factory=list)
    valid_seconds: list[float] = field(default_factory=list)
    baseline_seconds: float = 0.0


def _source_files(files: dict[str, bytes], spec: Any) -> dict[str, str]:
    src = spec.source_dir.strip("/")
    test_dir = spec.test_dir.strip("/")
    out = {}
    for path, data in files.items():
        name = path.rsplit("/", 1)[-1]
        if not path.endswith(".py") or path.startswith(test_dir) or name.startswith(("test_", "conftest", "setup")):
            continue
        if src not in ("", ".") and not path.startswith(src + "/"):
            continue
        if "/tests/" in f"/{path}" or "/test/" in f"/{path}" or name.endswith("_test.py"):
            continue
        out[path] = data.decode("utf-8", errors="replace")
    return out


def _mutant_failures(pools: PoolSet, spec: Any, mutation: Mutation, passed: set[str], timeout: float) -> list[str]:
    from sparring.envs.swe.testing import run_tests

    sandbox = pools.acquire(spec.image)
    try:
        sandbox.put_archive("/tmp", _tar({"sparring-mutation.diff": mutation.diff.encode()}))
        r = sandbox.exec(f"{GIT} apply /tmp/sparring-mutation.diff", workdir="/repo", user="root", timeout=60)
        if not r.ok:
            return []
        run = run_tests(sandbox, spec.test_command, timeout=timeout)
    finally:
        sandbox.close()
    if run.status == "timeout":
        return []
    return sorted(t for t in passed if run.tests.get(t) != "passed")


def build_procedural_artifact(
    spec: Any, mutation: Mutation, failing: list[str], files: dict[str, bytes], max_test_files: int = 3
) -> BugArtifact | None:
    """The artifact of a mutation from the tests it breaks; None when no test can be weakened."""
    by_file: dict[str, list[str]] = {}
    for test_id in failing:
        by_file.setdefault(test_id.split("::")[0], []).append(test_id)
    test_files, weaken = [], ""
    for path in sorted(by_file, key=lambda p: -len(by_file[p]))[:max_test_files]:
        if path not in files:
            continue
        text = files[path].decode("utf-8", errors="replace")
        weakened = weaken_tests(path, text, by_file[path])
        if weakened:
            test_files.append(path)
            weaken += file_diff(path, text, weakened)
    if not test_files:
        return None
    return BugArtifact(
        test_script=DEFAULT_TEST_SCRIPT.format(files=" ".join(test_files)),
        test_files=test_files,
        bug_inject_diff=mutation.diff,
        test_weaken_diff=weaken,
        repo=spec.name,
        version=spec.version,
        origin=f"procedural:{mutation.operator}",
        meta={"mutation": mutation.description, "path": mutation.path, "line": mutation.line},
    )


def _reliable_passing(pools: PoolSet, spec: Any, timeout: float, report: GenerationReport) -> set[str]:
    """Tests that pass on the original code: the image manifest's (two clean runs), else one run now."""
    from sparring.envs.swe.repos.images import load_manifest
    from sparring.envs.swe.testing import run_tests

    manifest = load_manifest(spec)
    if manifest is not None and manifest.passed:
        report.baseline_seconds = min(manifest.suite_seconds or [0.0])
        return set(manifest.passed)
    sandbox = pools.acquire(spec.image)
    try:
        base = run_tests(sandbox, spec.test_command, timeout=timeout)
    finally:
        sandbox.close()
    report.baseline_seconds = round(base.seconds, 3)
    passed = {t for t, s in base.tests.items() if s == "passed" and t not in spec.flaky}
    if not passed:
        raise SparringError(f"no test of {spec.name} passes on the original code ({base.status}: {base.detail}).")
    return passed


def generate_bugs(
    repo: str,
    n: int,
    seed: int = 0,
    max_tries: int | None = None,
    config: ValidationConfig | None = None,
    progress: Callable[[str], None] | None = None,
    store: Path | None = None,
) -> GenerationReport:
    """Add up to ``n`` validated procedural bugs to ``repo``'s store.

    Args:
        repo: Catalog name; its image must be built.
        n: Bugs to add.
        seed: Seed of the mutation draw.
        max_tries: Mutations tried at most (``10 * n`` when None).
        config: Validation thresholds.
        progress: Called with a line per tried mutation.
        store: Root of the stores to add to (default: the user's, ``sparring_home()/bugs``).
    """
    from sparring.envs.swe.repos.catalog import get_repo

    spec = get_repo(repo)
    if not _image_built(spec):
        raise SparringError(f"the image {spec.image} is not built; run `sparring build repos {repo}` first.")
    config = config or ValidationConfig()
    report = GenerationReport(repo=repo)
    t0 = time.perf_counter()
    # a validation's containers (the weakened code, the buggy code, one per further re-run) plus the
    # next mutant's, all ready: a validation then starts no container (SandboxPool.quiet)
    pools = PoolSet(size=config.reruns + 2)
    try:
        passed = _reliable_passing(pools, spec, config.test_timeout, report)
        sandbox = pools.acquire(spec.image)
        try:
            files = snapshot(sandbox)
        finally:
            sandbox.close()
        rng = np.random.default_rng(seed)
        candidates = sample_mutations(_source_files(files, spec), rng, max_tries or 10 * n)
        for mutation in candidates:
            if len(report.saved) >= n:
                break
            report.tried += 1
            failing = _mutant_failures(pools, spec, mutation, passed, config.test_timeout)
            artifact = build_procedural_artifact(spec, mutation, failing, files) if failing else None
            if artifact is None:
                reason = "no_failing_test" if not failing else "no_weakenable_test"
            else:
                # the original code's results are known: the harness recorded them on this very image (its
                # clean runs), so checks 2-3 use them instead of a new run (docs/swe.md, "fast path")
                baseline = TestRun(statuses={t: "passed" for t in passed if t.split("::")[0] in artifact.test_files})
                result = validate_artifact(artifact, spec.image, pools.pool(spec.image), config, baseline=baseline)
                report.validation_seconds.append(result.seconds)
                reason = "valid" if result.valid else str(result.reason)
                if result.valid:
                    report.saved.append(str(save_bug(artifact, result, spec.image, store)))
                    report.valid_seconds.append(result.seconds)
            if reason != "valid":
                report.rejected[reason] = report.rejected.get(reason, 0) + 1
            if progress:
                progress(f"{mutation.operator} {mutation.path}:{mutation.line}: {reason}")
    finally:
        pools.close()
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


def clear_store(repo: str) -> None:
    """Remove a repository's store."""
    shutil.rmtree(bug_store_dir(repo), ignore_errors=True)
