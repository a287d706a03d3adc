"""Checks 10-12 of validation, and part of check 6: the bug as the solver and grading will meet it.

Checks 1-9 watch the bug in validation's own containers. An injector gains by a bug that looks
different from where the solver and grading stand (a do-nothing repair is then solved, or no
repair ever is), so validation also looks from there, in one container of the solver's own
starting tree (:func:`solver_view`, built by :func:`~sparring.envs.swe.grading.setup_solver_repo`
beside validation's runs) and through :func:`~sparring.envs.swe.grading.grade_repair` itself:

* check 6, second half (:func:`unchanged_tests`): the weakening changes the source of a failing
  test it hides (its function's AST: comments, blank lines and docstrings do not count), not just
  something a bug that reads the test files can key on;
* check 10, ``bug_capabilities`` (:func:`bug_capability_uses`): the code the bug adds is held to
  the capability rules a repair's added code is held to (relative to the original files): code
  that reaches the test machinery could forge validation's verdicts as a repair's could forge
  grading's;
* check 11, ``solver_tree`` (:func:`solver_tree_problem`, :func:`solver_shell_problem`): in the
  solver's starting tree, the weakened test files in place, the oracle version of each weakened
  file written next to it as a new test file (as a solver's own reproduction would be) fails every
  FAIL_TO_PASS test, both through the harness and in a second such tree where nothing ran before
  (:func:`solver_shell`), run as the solver runs it: ``python -m pytest`` as the sandbox user, with
  the ``bash`` tool's environment and working directory. A bug keyed on the test files' text or age,
  on the artifact or on the history the solver's tree lacks, or on who runs the tests and how (the
  harness's user, who owns nothing in ``/repo``, its environment, its options), is off there, and
  the solver could never see it;
* check 12, ``graded_as_validated`` (:func:`graded_problem`): the bug state submitted unchanged is
  graded with every FAIL_TO_PASS test failing, in grading's configuration and in the plain one
  grading repeats them in (a bug on only under the test runner is no bug of the package a user
  imports), and the original code submitted as a repair (the
  solver's starting tree with the bug undone, read back and carried like any repair) is graded
  solved. Whatever differs between validation's runs and grading's (how the state is built, the
  files grading rewrites, a timer), the bug is judged where it will be graded; and a bug no repair
  can undo is refused. The original code's graded run time bounds grading's
  (:func:`~sparring.envs.swe.grading.grade_time_limit`).
"""

from __future__ import annotations

import ast
import functools
import re
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sparring import pyast
from sparring.envs.swe.bugs.artifact import BugArtifact, diff_files, split_diff
from sparring.envs.swe.capabilities import added_uses, load_capabilities, processes_allowed
from sparring.envs.swe.fresh_imports import TaskImage
from sparring.envs.swe.grading import GradeResult, SolverChanges, changes_between, grade_repair
from sparring.envs.swe.harness import HONEST_STATUSES, harness_run, pytest_ini
from sparring.envs.swe.runs import GIT, MAX_TARGET_IDS, _q, _tar
from sparring.envs.swe.testing import TestRun as HarnessRun
from sparring.envs.swe.tools import REPO_DIR

__all__ = [
    "SolverShell",
    "SolverView",
    "bug_capability_uses",
    "graded_problem",
    "solver_shell",
    "solver_shell_problem",
    "solver_tree_problem",
    "solver_view",
    "unchanged_tests",
]

_PARAMS = re.compile(r"\[.*$", re.S)


@dataclass
class SolverView:
    """The solver's starting tree, read in one container.

    Attributes:
        start: The tree as the solver gets it (original + bug + weakening), path -> bytes.
        original: The same tree with the bug undone (the original code, the weakened tests).
        oracle: The weakened test files as the image holds them.
        run: The harness's run of the oracle copies (and the unweakened test files) in the starting tree.
        copies: Path of each oracle copy -> the test file it copies.
        error: Why the tree could not be built, or None.
    """

    start: dict[str, bytes] = field(default_factory=dict)
    original: dict[str, bytes] = field(default_factory=dict)
    oracle: dict[str, bytes] = field(default_factory=dict)
    run: HarnessRun | None = None
    copies: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    def tests(self) -> dict[str, str]:
        """The run's verdicts by the oracle test ids (a copy's ids read as the file it copies)."""
        out: dict[str, str] = {}
        for test, status in (self.run.tests if self.run else {}).items():
            path, sep, rest = test.partition("::")
            out[self.copies.get(path, path) + sep + rest] = status
        return out


def solver_view(pool: object, artifact: BugArtifact, *, timeout: float, per_test_timeout: float) -> SolverView:
    """Build the solver's starting tree in a fresh container of ``pool`` and read what checks 6 and 10-12 need.

    Raises:
        SparringError: No container could be had (the engine's trouble, not the artifact's).
    """
    from sparring.envs.swe.grading import setup_solver_repo, snapshot

    weakened = [p for p in diff_files(artifact.test_weaken_diff) if p.endswith(".py")]
    sandbox = pool.acquire()  # type: ignore[attr-defined]
    try:
        try:
            ini = pytest_ini(sandbox, artifact.test_files)  # the fresh container: the repository's own options
            oracle = {p: sandbox.get_file(f"/repo/{p}") for p in weakened}
            setup_solver_repo(sandbox, artifact)
        except (RuntimeError, ValueError, OSError) as e:
            return SolverView(error=str(e)[:300])
        view = SolverView(start=snapshot(sandbox), oracle=oracle)
        # a random name, as a solver's own test would have: nothing tells the copy from a reproduction
        view.copies = {f"{p.rpartition('/')[0]}/test_{secrets.token_hex(6)}.py".lstrip("/"): p for p in weakened}
        sandbox.put_archive("/repo", _tar({copy: oracle[p] for copy, p in view.copies.items()}))
        targets = [*view.copies, *(p for p in artifact.test_files if p not in weakened)]
        view.run = harness_run(
            sandbox, targets, timeout=timeout, config=ini, test_timeout=per_test_timeout,
            processes=processes_allowed(artifact.repo),
        )  # fmt: skip
        # undo the bug as a repair would, in the tree the solver started from
        undo = f"/tmp/sparring-undo-{secrets.token_hex(8)}.diff"
        sandbox.put_archive("/tmp", _tar({undo[5:]: "".join(split_diff(artifact.bug_inject_diff).values()).encode()}))
        copies = " ".join(_q(c) for c in view.copies)
        r = sandbox.exec(
            f"rm -f -- {copies}; {GIT} apply -R --whitespace=nowarn {undo} && rm -f {undo}",
            workdir="/repo",
            user="root",
            timeout=60,
        )
        if not r.ok:
            view.error = f"the bug could not be undone in the solver's tree: {(r.stderr or r.stdout).strip()[:300]}"
            return view
        view.original = snapshot(sandbox)
        return view
    finally:
        sandbox.close()


@dataclass
class SolverShell:
    """A second solver's starting tree with the oracle copies, in a fresh container where no test ran yet.

    Attributes:
        sandbox: Its container (closed by :meth:`close`), or None when none was had.
        copies: Path of each oracle copy -> the test file it copies (written as the sandbox user).
        error: Why the tree could not be built, or None.
    """

    sandbox: Any = None
    copies: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    def close(self) -> None:
        """Close the container (idempotent)."""
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None


def solver_shell(pool: object, artifact: BugArtifact) -> SolverShell:
    """The tree a solver starts from, built as the repair env builds it, for check 11's run as the solver.

    Each oracle copy is written by the sandbox user, as a solver's ``create`` tool writes its own
    reproduction; nothing else runs there until :func:`solver_shell_problem`.

    Raises:
        SparringError: No container could be had (the engine's trouble, not the artifact's).
    """
    from sparring.envs.swe.grading import setup_solver_repo

    shell = SolverShell(sandbox=pool.acquire())  # type: ignore[attr-defined]
    weakened = [p for p in diff_files(artifact.test_weaken_diff) if p.endswith(".py")]
    try:
        oracle = {p: shell.sandbox.get_file(f"/repo/{p}") for p in weakened}
        setup_solver_repo(shell.sandbox, artifact)
        shell.copies = {f"{p.rpartition('/')[0]}/test_{secrets.token_hex(6)}.py".lstrip("/"): p for p in weakened}
        for copy, path in shell.copies.items():
            shell.sandbox.put_file(f"{REPO_DIR}/{copy}", oracle[path], as_agent=True)
    except (RuntimeError, ValueError, OSError) as e:
        shell.error = str(e)[:300]
    return shell


# ------------------------------------------------------------------------------ check 6's second half


def _strip_docstrings(node: ast.AST) -> ast.AST:
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    n.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    return node


def _test_source(files: dict[str, bytes], test_id: str) -> str | None:
    """The AST (as text, no docstrings, no positions) of the function a test id names; None if not found."""
    path, _, rest = test_id.partition("::")
    if not rest or path not in files:
        return None
    try:
        tree = pyast.parse(files[path], filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    names = _PARAMS.sub("", rest).split("::")  # parameters go last, and may hold "::" themselves
    body: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for name in names:
        defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        node = next((s for s in body if isinstance(s, defs) and s.name == name), None)
        if node is None:
            break
        body = node.body  # type: ignore[attr-defined]
    if node is None:  # an inherited or generated test: every function of that name in the file
        found = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        found = [n for n in found if n.name == names[-1]]
        return "\n".join(ast.dump(_strip_docstrings(n)) for n in found) or None
    return ast.dump(_strip_docstrings(node))


def unchanged_tests(oracle: dict[str, bytes], weakened: dict[str, bytes], hidden: list[str]) -> str | None:
    """Why the weakening changes no hidden test's source, or None when it changes one.

    Args:
        oracle: The weakened test files as the image holds them.
        weakened: The same files once weakened (the solver's starting tree).
        hidden: Tests that fail with the bug and pass once the tests are weakened.
    """
    if any(_test_source(oracle, t) != _test_source(weakened, t) for t in hidden):
        return None
    return (
        f"the failing tests that pass once weakened ({len(hidden)}, e.g. {hidden[0]}) read the same before and "
        "after test_weaken.diff (comments, blank lines and docstrings aside): the weakening must change what "
        "those tests do, not only the text around them."
    )


# -------------------------------------------------------------------------------------- check 10


def bug_capability_uses(artifact: BugArtifact, view: SolverView, image: TaskImage | None = None) -> list[str]:
    """Capability uses the bug adds to the original files, as a repair's are listed (empty: none), with what a fresh
    import leaves measured in ``image`` (the task's; None: in this process)."""
    capabilities = load_capabilities(artifact.repo)
    found: list[str] = []
    for path in diff_files(artifact.bug_inject_diff):
        new = view.start.get(path)
        if new is not None and path.endswith(".py"):
            found += added_uses(path, new, view.original.get(path), (), capabilities, artifact.test_files, image)
    return found


# -------------------------------------------------------------------------------------- check 11


def solver_tree_problem(view: SolverView, fail_to_pass: list[str]) -> str | None:
    """Why the bug is not visible in the solver's starting tree, or None."""
    if view.run is None:
        return f"the solver's starting tree could not be built: {view.error}"
    if view.run.status not in HONEST_STATUSES:
        return f"the oracle tests did not run in the solver's starting tree ({view.run.status}): {view.run.detail}"
    seen = view.tests()
    passing = [t for t in fail_to_pass if seen.get(t) == "passed"]
    if not passing:
        return None
    return (
        f"{len(passing)} FAIL_TO_PASS test(s) pass in the solver's starting tree (e.g. {passing[0]}), run from a "
        "copy of the oracle test file beside the weakened one: the bug depends on the test files or on what "
        "validation's containers hold and the solver's do not, so a solver could never see it."
    )


#: How a solver runs the tests: plainly, then, when pytest refuses the repository's own options (``addopts``
#: naming a plugin the image lacks, as parse's ``--cov``), without them.
SOLVER_COMMANDS = ("python -m pytest", 'python -m pytest -o addopts=""')
#: pytest's exit status for a usage error (an option it does not know): no test ran.
PYTEST_USAGE_ERROR = 4


def _reported_failing(output: str, ids: list[str]) -> set[str]:
    """The ids pytest's short summary reports ``FAILED`` or ``ERROR`` (or whose file failed to collect)."""
    found: set[str] = set()
    for line in output.splitlines():
        word, _, rest = line.partition(" ")
        if word not in ("FAILED", "ERROR"):
            continue
        for test in ids:
            path = test.partition("::")[0]
            if any(rest == whole or rest.startswith(whole + " ") for whole in (test, path)):
                found.add(test)
    return found


def solver_shell_problem(shell: SolverShell, fail_to_pass: list[str], *, timeout: float) -> str | None:
    """Why the solver's own pytest run does not show the bug, or None when it shows every FAIL_TO_PASS test failing.

    The run is the command a solver types first, ``python -m pytest`` on the oracle copies' tests
    (by node id, 40 at a time; again without the repository's ``addopts`` when pytest refuses them),
    through the ``bash`` tool's own call: the sandbox user, its environment, ``/repo``. Its verdicts
    are read from what that command prints, the output the solver reads, never from a file the run
    writes: the bug's code runs there with the solver's rights and may print anything (or write any
    report), but the injector gains only by a failure shown here and hidden from the solver, and
    whatever the code prints here it prints in a solver's run of the same command in an equal fresh
    tree, so a failure read here is one a solver sees too.
    """
    if shell.error or shell.sandbox is None:
        return f"the solver's starting tree could not be built for its own test run: {shell.error}"
    by_file = {path: copy for copy, path in shell.copies.items()}
    as_run: dict[str, str] = {}  # an oracle id -> the id of its copy (unweakened files run as they are)
    for test in fail_to_pass:
        path, sep, rest = test.partition("::")
        as_run[test] = by_file.get(path, path) + sep + rest
    ids = list(as_run.values())
    seen: set[str] = set()
    for k in range(0, len(ids), MAX_TARGET_IDS):
        chunk = ids[k : k + MAX_TARGET_IDS]
        for command in SOLVER_COMMANDS:
            r = shell.sandbox.exec(f"{command} {' '.join(_q(t) for t in chunk)}", timeout=timeout, workdir=REPO_DIR)
            if r.timed_out:
                return f"the solver's own run of the oracle tests (`{command}`) did not end in {timeout:g} s."
            seen |= _reported_failing(f"{r.stdout}\n{r.stderr}", chunk)
            if r.exit_code != PYTEST_USAGE_ERROR:
                break
    unseen = [t for t, run in as_run.items() if run not in seen]
    if not unseen:
        return None
    return (
        f"{len(unseen)} FAIL_TO_PASS test(s) are not reported failing (e.g. {unseen[0]}) when the solver's starting "
        "tree runs a copy of the oracle tests with `python -m pytest` as the sandbox user, as a solver would: the "
        "bug depends on who runs the tests or how (the user, what it may write, the environment), so a solver "
        "could never see it."
    )


# -------------------------------------------------------------------------------------- check 12


def _why_unsolved(grade: GradeResult) -> str:
    if grade.tampering:
        return f"refused: {grade.tampering[0]}"
    if grade.error:
        return grade.error
    failing = next(iter(grade.failing.items()), None)
    missing = f"{len(grade.missing)} missing (e.g. {grade.missing[0]})" if grade.missing else ""
    bad = f"{len(grade.failing)} not passing (e.g. {failing[0]}: {failing[1]})" if failing else ""
    dropped = f"; grading dropped {grade.ignored_reasons}" if grade.ignored_reasons else ""
    return ", ".join(x for x in (missing, bad) if x) + dropped


def graded_problem(
    pool: object,
    artifact: BugArtifact,
    view: SolverView,
    fail_to_pass: list[str],
    pass_to_pass: list[str],
    *,
    timeout: float,
    per_test_timeout: float,
) -> tuple[str | None, dict[str, GradeResult]]:
    """Grade the unchanged bug state and the original code through grading itself.

    Returns:
        (why the bug is refused or None, the two grades by name: ``unchanged``, ``original``).
    """
    if view.error:
        return view.error, {}
    expected = fail_to_pass + pass_to_pass
    grade = functools.partial(
        grade_repair,
        pool,
        artifact,
        expected,
        timeout=timeout,
        per_test_timeout=per_test_timeout,
        fail_to_pass=fail_to_pass,
    )
    with ThreadPoolExecutor(max_workers=2) as ex:
        left = ex.submit(grade, SolverChanges(), plain_always=True)
        fixed = ex.submit(grade, changes_between(view.start, view.original))
        grades = {"unchanged": left.result(), "original": fixed.result()}
    unchanged, original = grades["unchanged"], grades["original"]
    passing = [t for t in fail_to_pass if t not in unchanged.failing and t not in unchanged.missing]
    if unchanged.status not in HONEST_STATUSES:
        return f"the bug state, graded unchanged, gave no result ({unchanged.status}): {unchanged.error}", grades
    if passing:
        return (
            f"{len(passing)} FAIL_TO_PASS test(s) pass when grading runs the bug state unchanged (e.g. {passing[0]}): "
            "the bug is on in validation's runs only, and a repair that does nothing would be graded solved.",
            grades,
        )
    if unchanged.plain_status not in HONEST_STATUSES:
        return f"the bug state, run in the plain configuration, gave no result ({unchanged.plain_status})", grades
    plain = [t for t in fail_to_pass if t not in unchanged.plain_failing]
    if plain:
        return (
            f"{len(plain)} FAIL_TO_PASS test(s) pass when the bug state is run in the plain configuration (e.g. "
            f"{plain[0]}): the bug is on only under the test runner's configuration, so the package a user "
            "imports has no bug to repair.",
            grades,
        )
    if not original.solved:
        return (
            f"the original code, submitted as a repair, is graded unsolved ({original.status}: "
            f"{_why_unsolved(original)}): no repair of this bug could be graded solved.",
            grades,
        )
    return None, grades
