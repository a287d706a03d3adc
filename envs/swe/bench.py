"""``sparring bench validate``: how fast procedural bugs are made, validated and graded.

Figures, from one run on one repository:

* ``validate_seconds`` — median wall time to validate one procedural bug (all checks, the
  determinism re-runs included) as :func:`generate_bugs` does it: the original code's results come
  from the image's two clean runs; the buggy and weakened code, then two re-runs of the failing
  tests, run in parallel fresh containers;
* ``test_run_seconds`` — median time of one run of that bug's test files on the original code,
  the harness's way (what each of validation's runs is);
* ``validate_to_run_ratio`` — their ratio, per bug, median (target ≤ 3);
* ``validate_cold_seconds`` / ``cold_ratio`` — the same for a validation that also runs the
  original code and re-runs its passing tests (as for an injector's artifact), median over the bugs;
* ``grade_seconds`` — median wall time of grading one submission (the reference fix of each bug,
  through the real grading function; ``graded_solved`` counts those graded solved, which should
  be all);
* ``bugs_per_minute`` — validated procedural bugs added per minute of :func:`generate_bugs`
  (mutation, whole-suite run on the mutant, weakening, validation; the one baseline run included).

The bugs go to a temporary store, removed afterwards, so a benchmark never changes the store the
repair env draws its tasks from; ``keep_bugs`` (``--keep-bugs``) adds them to the real one instead.
"""

from __future__ import annotations

import shlex
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sparring import SparringError, bench_machine
from sparring.containers.pools import PoolSet
from sparring.envs.swe.bugs.artifact import BugArtifact, diff_files
from sparring.envs.swe.bugs.store import available_repos, generate_bugs
from sparring.envs.swe.runs import ORIGINAL, SharedIni, harness_state
from sparring.envs.swe.validation import ValidationResult, validate_artifact

__all__ = ["bench_validate"]


@contextmanager
def _bug_store(keep: bool) -> Iterator[Path | None]:
    """The root of the stores to add to: the user's (None) with ``keep``, else a temporary one, removed on exit."""
    if keep:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="sparring-bench-bugs-") as tmp:
        yield Path(tmp)


def bench_validate(repo: str | None = None, n: int = 4, seed: int = 0, keep_bugs: bool = False) -> dict[str, Any]:
    """Generate ``n`` procedural bugs in ``repo`` (the first built train repository when None) and time them.

    Args:
        repo: Catalog name; the first train repository with a built image when None.
        n: Procedural bugs to make.
        seed: Seed of the mutation draw.
        keep_bugs: Add the bugs to the real bug store; by default they go to a temporary one.
    """
    specs = available_repos("train", [repo] if repo else None)
    if not specs:
        raise SparringError("no repository image is built; run `sparring setup --for test` first.")
    spec = specs[0]
    with _bug_store(keep_bugs) as store:
        return _bench(spec, n, seed, store) | {"bugs_kept": keep_bugs}


def _bench(spec: Any, n: int, seed: int, store: Path | None) -> dict[str, Any]:
    report = generate_bugs(spec.name, n, seed=seed, store=store)
    if not report.saved:
        raise SparringError(f"no procedural bug of {spec.name} validated in {report.tried} tries: {report.rejected}.")
    pools = PoolSet(size=3)
    ratios, runs, cold, cold_ratios, grades, solved = [], [], [], [], [], 0
    try:
        pool = pools.pool(spec.image)
        for folder, seconds in zip(report.saved, report.valid_seconds, strict=True):
            artifact = BugArtifact.load(Path(folder))
            run = harness_state(pool, artifact, ORIGINAL, ini=SharedIni(artifact), timeout=300.0).harness
            assert run is not None
            runs.append(run.seconds)
            ratios.append(seconds / run.seconds)
            verdict = validate_artifact(artifact, spec.image, pool)
            cold.append(verdict.seconds)
            cold_ratios.append(verdict.seconds / run.seconds)
            grade, ok = _grade_reference_fix(pool, artifact, verdict)
            grades.append(grade)
            solved += ok
    finally:
        pools.close()
    return {
        "bench": "validate",
        **bench_machine(),
        "repo": spec.name,
        "bugs": len(report.saved),
        "tried": report.tried,
        "rejected": report.rejected,
        "validate_seconds": round(statistics.median(report.valid_seconds), 2),
        "test_run_seconds": round(statistics.median(runs), 2),
        "validate_to_run_ratio": round(statistics.median(ratios), 2),
        "validate_cold_seconds": round(statistics.median(cold), 2),
        "cold_ratio": round(statistics.median(cold_ratios), 2),
        "grade_seconds": round(statistics.median(grades), 2),
        "graded_solved": solved,
        "bugs_per_minute": round(len(report.saved) / (report.seconds / 60), 2),
        "generate_seconds": report.seconds,
        "baseline_suite_seconds": report.baseline_seconds,
    }


def _grade_reference_fix(pool: Any, artifact: BugArtifact, verdict: ValidationResult) -> tuple[float, bool]:
    """Seconds to grade the bug's reference fix as a solver's submission (reading it back included), and the grade."""
    from sparring.envs.swe.grading import changes_between, grade_repair, setup_solver_repo, snapshot

    clean = pool.acquire()
    try:
        original = snapshot(clean)
    finally:
        clean.close()
    sandbox = pool.acquire()
    try:
        setup_solver_repo(sandbox, artifact)
        start = snapshot(sandbox)
        for path in diff_files(artifact.bug_inject_diff):  # the solver restores each file the bug changed
            if path in original:
                sandbox.put_file(path, original[path])
            else:
                sandbox.exec(f"rm -f -- {shlex.quote(path)}")
        t0 = time.perf_counter()
        changes = changes_between(start, snapshot(sandbox))
    finally:
        sandbox.close()
    grade = grade_repair(pool, artifact, verdict.expected, changes, fail_to_pass=verdict.fail_to_pass)
    return time.perf_counter() - t0, grade.solved
