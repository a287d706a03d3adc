"""Grade only a fix: which of a solver's changes grading carries onto a clean copy of the bug state.

Grading never runs the solver's repository. It carries over, as a set of file changes onto a
fresh container holding the bug state, only what a fix consists of:

* changes to (and deletions of) the repository's **existing non-test Python source files**;
* **new modules inside an existing package folder** (one that has an ``__init__.py`` when the
  solver started and is not a test folder), with a plain module name that is not named like
  anything Python, ``site`` or pytest loads on its own and does not shadow a standard-library or
  installed module;
* **any path the original tree had**: a file the bug deleted is, for these rules, an existing file
  (a package's ``__init__.py``, a module in a place or under a name new modules may not take), and
  a folder whose ``__init__.py`` the bug deleted is a package folder. Without this, a bug that
  deletes one would be valid and no repair, the original code included, could be graded solved.

Everything else is dropped and listed with the reason (:attr:`CarryPlan.dropped`): the oracle
test files (grading restores them), any other test file (the solver's own regression tests are
welcome but not graded), ``conftest.py``, ``sitecustomize``/``usercustomize`` (module or package),
``*.pth``, pytest configuration files of any name (``pytest.ini``, ``pytest.toml``,
``pyproject.toml``, ``tox.ini``, ``setup.cfg``, ...), ``*.dist-info``/``*.egg-info`` metadata
(entry points), archives, data files, new folders and top-level modules. Dropping is not
punished: a fix plus its own test is graded on the fix.

So nothing that Python or pytest would load implicitly can reach the graded run by a name the
harness did not foresee: only ``.py`` files the repository already had, or plain modules in its
packages, are carried, and the harness's run (:mod:`~sparring.envs.swe.harness`) ignores the
repository's configuration and site hooks besides.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any

from sparring.envs.swe.bugs.artifact import BugArtifact, diff_files, split_diff
from sparring.envs.swe.repos.sdists import TEST_FILE  # the catalog's own notion of a test file

__all__ = ["CarryPlan", "carry_plan", "code_files", "deleted_by_bug", "protected_paths", "test_paths"]

#: File names Python, site or pytest load from a folder on their own.
IMPLICIT_NAMES = frozenset({"conftest.py", "sitecustomize.py", "usercustomize.py", "__main__.py"})

#: Folder names that hold package metadata (entry points, which pytest can autoload as plugins).
_METADATA = re.compile(r"\.(dist-info|egg-info|egg)$")

#: Top-level modules of the images besides the standard library, which a new module must not shadow.
INSTALLED = frozenset(
    {"pytest", "_pytest", "pluggy", "py", "iniconfig", "packaging", "pygments", "pytest_timeout",
     "setuptools", "pkg_resources", "_distutils_hack", "pip", "sitecustomize", "usercustomize", "conftest"}
)  # fmt: skip

#: Folder names that mark tests wherever they are.
_TEST_FOLDERS = frozenset({"test", "tests", "testing"})


@dataclass
class CarryPlan:
    """The solver's changes grading carries, and the ones it drops.

    Attributes:
        written: Path -> new content of every carried changed or new file.
        deleted: Carried deletions of existing source files.
        dropped: Path -> why grading left that change out.
    """

    written: dict[str, bytes] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)


def _test_dir(artifact: BugArtifact) -> str:
    from sparring import SparringError
    from sparring.envs.swe.repos.catalog import get_repo

    if not artifact.repo:
        return ""
    try:
        test_dir = get_repo(artifact.repo).test_dir.strip("/").removeprefix("./")
    except SparringError:
        return ""  # a repository outside the catalog: names alone decide
    return "" if test_dir == "." else test_dir


def code_files(artifact: BugArtifact, paths: list[str]) -> list[str]:
    """Which of ``paths`` are code, not tests: not named like a test file nor under the repository's ``test_dir``.

    Test files are recognised as the catalog recognises them in an sdist (``test_*.py``, ``*_test.py``,
    ``tests/*.py``), plus everything under the catalog's ``test_dir`` of ``artifact.repo`` when it is
    known (validation's check 4 counts the code files a bug changes with it).
    """
    test_dir = _test_dir(artifact)
    return [
        p
        for p in paths
        if not TEST_FILE.search(p) and not (test_dir and (p == test_dir or p.startswith(test_dir + "/")))
    ]


def test_paths(artifact: BugArtifact, paths: list[str]) -> list[str]:
    """Which of ``paths`` are tests: the oracle files, test-named files, test folders, the catalog's ``test_dir``."""
    oracle = set(artifact.test_files) | set(diff_files(artifact.test_weaken_diff))
    test_dir = _test_dir(artifact)
    found = []
    for p in paths:
        parts = p.split("/")
        if (
            p in oracle
            or TEST_FILE.search(p)
            or any(part in _TEST_FOLDERS for part in parts[:-1])
            or (test_dir and (p == test_dir or p.startswith(test_dir + "/")))
        ):
            found.append(p)
    return found


def _existing_reason(path: str, tests: set[str], oracle: set[str]) -> str | None:
    """Why a change to an existing file is dropped, or None when it is carried."""
    parts = path.split("/")
    if path in oracle:
        return "an oracle test file: grading restores it"
    if path in tests:
        return "a test file: only code is graded"
    if not path.endswith(".py"):
        return "not a Python source file"
    if parts[-1] in IMPLICIT_NAMES or parts[0] in ("sitecustomize", "usercustomize"):
        return "a file Python or pytest loads on its own"
    if any(_METADATA.search(part) for part in parts[:-1]):
        return "package metadata"
    return None


def _new_reason(path: str, tests: set[str], packages: set[str], shadowed: frozenset[str]) -> str | None:
    """Why a new file is dropped, or None when it is an ordinary module of an existing package."""
    folder, _, name = path.rpartition("/")
    stem = name[:-3] if name.endswith(".py") else ""
    if not stem:
        return "a new file that is not a Python module"
    if path in tests:
        return "a new test file: only code is graded"
    if name in IMPLICIT_NAMES or stem in ("__init__", "__main__"):
        return "a file Python or pytest loads on its own"
    if folder not in packages:
        return "a new file outside the repository's existing packages"
    if not stem.isidentifier() or not stem.isascii():
        return "not a plain module name"
    if stem in shadowed or stem.startswith(("pytest", "_pytest")):
        return "named like a standard-library or installed module"
    return None


def _shadowed(artifact: BugArtifact) -> frozenset[str]:
    names = set(INSTALLED) | set(getattr(sys, "stdlib_module_names", ()))
    if artifact.repo:
        from sparring import SparringError
        from sparring.envs.swe.repos.catalog import get_repo

        try:
            deps = get_repo(artifact.repo).deps
        except SparringError:
            deps = ()
        names.update(re.split(r"[^\w.-]", d, maxsplit=1)[0].lower().replace("-", "_") for d in deps)
    return frozenset(names)


def deleted_by_bug(artifact: BugArtifact) -> list[str]:
    """The files ``bug_inject.diff`` deletes: paths of the original tree a repair may write back."""
    return [p for p, part in split_diff(artifact.bug_inject_diff).items() if "\n+++ /dev/null" in "\n" + part]


def carry_plan(artifact: BugArtifact, changes: Any) -> CarryPlan:
    """Split a solver's changes (:class:`~sparring.envs.swe.grading.SolverChanges`) into carried and dropped.

    A path is an existing file when the solver's starting point had it (``changes.replaced`` or
    ``changes.deleted``) or the original tree did (the bug deleted it); package folders are the
    starting point's (``changes.package_dirs``) and those whose ``__init__.py`` the bug deleted.
    """
    oracle = set(artifact.test_files) | set(diff_files(artifact.test_weaken_diff))
    tests = set(test_paths(artifact, changes.paths))
    restorable = set(deleted_by_bug(artifact))
    folders = set(changes.package_dirs) | {p.rpartition("/")[0] for p in restorable if p.endswith("/__init__.py")}
    packages = folders - {d for d in folders if test_paths(artifact, [d + "/x.py"])}
    shadowed = _shadowed(artifact)
    plan = CarryPlan()
    for path, data in sorted(changes.written.items()):
        existing = path in changes.replaced or path in restorable
        why = _existing_reason(path, tests, oracle) if existing else _new_reason(path, tests, packages, shadowed)
        if why is None:
            plan.written[path] = data
        else:
            plan.dropped[path] = why
    for path in changes.deleted:
        why = _existing_reason(path, tests, oracle)
        if why is None:
            plan.deleted.append(path)
        else:
            plan.dropped[path] = f"deleted, but {why}"
    return plan


def protected_paths(artifact: BugArtifact, paths: list[str]) -> list[str]:
    """Which of ``paths`` (existing files) grading drops a solver's changes to.

    Validation refuses a bug that changes one of them (check 4): its repair could never be graded.
    """
    oracle = set(artifact.test_files) | set(diff_files(artifact.test_weaken_diff))
    tests = set(test_paths(artifact, paths))
    return [p for p in paths if _existing_reason(p, tests, oracle) is not None]
