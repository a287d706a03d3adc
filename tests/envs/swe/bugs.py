"""A known-good bug in the inflection repository, and variants that break one validation check each.

The bug: ``ordinal()`` stops treating 13 like 11 and 12 (``in (11, 12, 13)`` -> ``in (11, 12)``),
so ``ordinal(13)`` says "rd"; the weakening replaces the bodies of the two ordinal tests with
``pass``. Diffs are made from the files as the image holds them.
"""

from __future__ import annotations

import copy
import fcntl
import pickle
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sparring.envs.swe.bugs.artifact import DEFAULT_TEST_SCRIPT, BugArtifact, file_diff
from sparring.envs.swe.bugs.store import weaken_tests
from tests.conftest import require

REPO = "inflection"
SOURCE = "inflection/__init__.py"
TESTS = "test_inflection.py"
ORIGINAL_LINE = "if number % 100 in (11, 12, 13):"
BUGGY_LINE = "if number % 100 in (11, 12):"
WEAKENED_TESTS = [f"{TESTS}::test_ordinal", f"{TESTS}::test_ordinalize"]


def repo_image(name: str = REPO) -> str:
    """The image of repository ``name``; skips (locally) or fails (CI) when it is not built."""
    from sparring.envs.swe.repos.catalog import get_repo
    from sparring.envs.swe.repos.images import image_status

    spec = get_repo(name)
    require(image_status(spec)[0] in ("built", "stale"), f"the image {spec.image}")
    return spec.image


def repo_files(pool: Any) -> dict[str, str]:
    """The files of /repo as the image holds them (text)."""
    from sparring.envs.swe.grading import snapshot

    sandbox = pool.acquire()
    try:
        return {p: d.decode("utf-8", errors="replace") for p, d in snapshot(sandbox).items()}
    finally:
        sandbox.close()


def good_artifact(files: dict[str, str]) -> BugArtifact:
    """The known-good bug."""
    source, tests = files[SOURCE], files[TESTS]
    assert ORIGINAL_LINE in source
    return BugArtifact(
        test_script=DEFAULT_TEST_SCRIPT.format(files=TESTS),
        test_files=[TESTS],
        bug_inject_diff=file_diff(SOURCE, source, source.replace(ORIGINAL_LINE, BUGGY_LINE)),
        test_weaken_diff=file_diff(TESTS, tests, weaken_tests(TESTS, tests, WEAKENED_TESTS)),
        repo=REPO,
        version="test",
        origin="agent:direct",
    )


def partly_weakened_artifact(files: dict[str, str]) -> BugArtifact:
    """The known bug with only ``test_ordinal`` weakened: ``test_ordinalize`` still fails in the solver's tree.

    Validation asks only that some failing tests pass once weakened, so a solver may start with visible
    failures: what the SWE turn signal pays for bringing to pass.
    """
    return replace(good_artifact(files), test_weaken_diff=file_diff(TESTS, files[TESTS],
                   weaken_tests(TESTS, files[TESTS], WEAKENED_TESTS[:1])))  # fmt: skip


def violating(files: dict[str, str], check: str) -> BugArtifact:
    """The good artifact changed so that it breaks ``check`` (and only what follows from it)."""
    good = good_artifact(files)
    tests, conf = files[TESTS], files["docs/conf.py"]
    if check == "test_files":
        # Covers the weakened file, but names one that does not exist: the existence half of the check.
        return replace(good, test_files=[TESTS, "tests/test_missing.py"])
    if check == "parser":
        return replace(good, test_parser="print('all good!')\n")
    if check == "passing_before":
        # a "test file" with no tests: the harness runs it and nothing passes (a parser can no longer say so)
        weaken = file_diff("docs/conf.py", conf, conf + "# weakened\n")
        return replace(good, test_files=["docs/conf.py"], test_weaken_diff=weaken)
    if check == "changed_files":
        return replace(good, bug_inject_diff="")
    if check == "failing_after_bug":
        return replace(good, bug_inject_diff=file_diff("docs/conf.py", conf, conf + "# a harmless comment\n"))
    if check == "weakening_hides_bug":
        return replace(good, test_weaken_diff=file_diff(TESTS, tests, tests + "\n# weakened? no\n"))
    if check == "inverse_mutation":
        extra = file_diff("docs/conf.py", conf, conf + "# an unrelated edit\n")
        return replace(good, bug_inject_diff=good.bug_inject_diff + extra)
    if check == "deterministic":
        return replace(good, bug_inject_diff=hash_seed_bug(files))
    if check == "harness_agreement":
        # runs the listed file, but not all of its tests: the report misses some the harness ran
        return replace(good, test_script=good.test_script.rstrip("\n") + ' -k "not 13"\n')
    if check == "bug_capabilities":
        # the known bug, plus an import of what forges verdicts: held to a repair's rules
        source = files[SOURCE]
        return replace(
            good,
            bug_inject_diff=file_diff(
                SOURCE, source, _buggy(source).replace("import re\n", "import gc\nimport re\n", 1)
            ),
        )
    if check == "solver_tree":
        # on only while the test file is as old as the image: the weakening (and the solver's tree) rewrite it
        return replace(good, bug_inject_diff=keyed_bug(files, STALE % spelled_apart(TESTS)))
    if check == "graded_as_validated":
        # on only while docs/conf.py is as old as the image: grading restores the listed test files with git,
        # which rewrites them, so the bug is on in validation's runs and off in grading's
        script = DEFAULT_TEST_SCRIPT.format(files=f"{TESTS} docs/conf.py")
        return replace(
            good,
            bug_inject_diff=keyed_bug(files, STALE % repr("docs/conf.py")),
            test_files=[TESTS, "docs/conf.py"],
            test_script=script,
        )
    raise ValueError(check)


def _buggy(source: str) -> str:
    assert ORIGINAL_LINE in source
    return source.replace(ORIGINAL_LINE, BUGGY_LINE)


#: A condition on a file's age: true while it is as old as the image (written a day or more ago); ``%s`` is
#: a Python expression of the file's path.
STALE = "_time.time() - _os.path.getmtime(_os.path.join(_os.path.dirname(_os.path.dirname(__file__)), %s)) > 86400"


def spelled_apart(path: str) -> str:
    """A Python expression of ``path`` in two halves: a bug that names an oracle test file is refused by check 10
    (``oracle_tests``), and these bugs are for the checks after it."""
    half = len(path) // 2
    return f"{path[:half]!r} + {path[half:]!r}"


def keyed_bug(files: dict[str, str], condition: str) -> str:
    """The known bug, on only while ``condition`` (Python, with ``_os``, ``_time`` imported) holds."""
    source = files[SOURCE]
    keyed = source.replace("import re\n", "import os as _os\nimport re\nimport time as _time\n", 1)
    keyed = keyed.replace(ORIGINAL_LINE, f"if number % 100 in ((11, 12) if {condition} else (11, 12, 13)):")
    assert condition in keyed
    return file_diff(SOURCE, source, keyed)


def hash_seed_bug(files: dict[str, str]) -> str:
    """The known bug, but on only under the image's hash seed (0): the kind of bug that is on by chance.

    Every run of validation but its re-runs uses the image's seed, so it looks valid until they
    run; a bug on with probability 1/2 per process, or by the clock, is caught the same way, but
    only with a probability, which a test cannot rely on.
    """
    source = files[SOURCE]
    on = source.replace("import re\n", "import re\nimport sys\n", 1)
    on = on.replace(ORIGINAL_LINE, "if number % 100 in ((11, 12, 13) if sys.flags.hash_randomization else (11, 12)):")
    assert on != source
    return file_diff(SOURCE, source, on)


@pytest.fixture(scope="module")
def pool() -> Any:
    """A sandbox pool of the inflection image."""
    from sparring.containers.sandbox import SandboxPool

    p = SandboxPool(repo_image(), size=2)
    yield p
    p.close()


@pytest.fixture(scope="module")
def files(pool: Any) -> dict[str, str]:
    """The image's /repo files."""
    return repo_files(pool)


class Verdicts:
    """Validation verdicts of this module's bugs, each validated once per test session.

    Validating a bug takes a dozen harness runs, and many test modules start from the same
    validated bug; the session fixture ``bug_verdicts`` (``tests/conftest.py``) holds one of these.
    The tests of validation itself call :func:`~sparring.envs.swe.validation.validate_artifact`.
    Under pytest-xdist each worker is a session of its own: with ``shared`` (a folder all the
    session's workers see) the first worker to ask for a bug validates it and writes the verdict
    there, and the others wait for it under a file lock instead of validating it again.
    """

    #: The bugs by name: each builds the artifact from the image's files.
    ARTIFACTS: dict[str, Callable[[dict[str, str]], BugArtifact]] = {
        "good": good_artifact,
        "partly_weakened": partly_weakened_artifact,
    }

    def __init__(self, shared: Path | None = None) -> None:
        """Nothing is validated (nor any container started) until a verdict is asked for."""
        self._done: dict[str, tuple[BugArtifact, Any]] = {}
        self._shared = shared

    def get(self, name: str) -> tuple[BugArtifact, Any]:
        """(artifact, :class:`~sparring.envs.swe.validation.ValidationResult`) of bug ``name``, a copy per call.

        Its own short-lived pool validates it, so no container outlives the call.
        """
        if name not in self._done:
            if self._shared is None:
                self._done[name] = self._validate(name)
            else:
                saved = self._shared / f"verdict-{name}.pickle"
                with (self._shared / f"verdict-{name}.lock").open("w") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
                    if not saved.exists():
                        saved.write_bytes(pickle.dumps(self._validate(name)))
                    self._done[name] = pickle.loads(saved.read_bytes())
        return copy.deepcopy(self._done[name])

    def _validate(self, name: str) -> tuple[BugArtifact, Any]:
        from sparring.containers.sandbox import SandboxPool
        from sparring.envs.swe.validation import validate_artifact

        pool = SandboxPool(repo_image(), size=2)
        try:
            artifact = self.ARTIFACTS[name](repo_files(pool))
            return artifact, validate_artifact(artifact, pool.image, pool)
        finally:
            pool.close()
