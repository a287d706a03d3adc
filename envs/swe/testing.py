"""Run a repository's tests in a sandbox and read exactly what happened to each test.

:func:`run_tests` runs pytest (a whole-suite command such as ``pytest tests`` or a list of test
files) inside a sandbox under a timeout, with a JUnit XML report written to a fresh random path,
and returns a :class:`TestRun`: ``{test_id: status}``, the run's seconds and exit code, and a run
status that tells a clean pass apart from every way a run can go wrong.

Test ids are pytest node ids relative to pytest's rootdir (the repository root ``/repo``)::

    tests/test_x.py::test_f
    tests/test_x.py::TestC::test_m
    tests/test_x.py::test_p[1-a]           # parametrised: pytest's own parameter id
    pkg/mod.py::pkg.mod.func               # doctest in a module
    tests/test_x.py                        # a module that failed to import (collection error)

They are the ids FAIL_TO_PASS / PASS_TO_PASS lists use, and they stay stable: the same test has
the same id in every run and every image (repository images set ``PYTHONHASHSEED=0``, since some
suites build parameter ids from sets). A test's status is one of ``"passed"``, ``"failed"``,
``"error"`` (an error in setup or teardown, or a collection error), ``"skipped"``. An expected
xfail counts as ``"skipped"`` and a non-strict xpass as ``"passed"``, so the number of
``"passed"`` ids equals pytest's ``passed + xpassed`` and the number of ``"skipped"`` ids equals
its ``skipped + xfailed``. pytest's subtests are reported under their test, not as ids.

Run statuses (:attr:`TestRun.status`), most serious first: ``timeout`` (killed at the time
limit), ``crash`` (killed by a signal, pytest internal or usage error), ``no_report`` (pytest
ended but wrote no readable JUnit report), ``collection_error`` (a test module could not be
imported: its tests are absent, never passed), ``no_tests`` (nothing collected), ``failed``,
``passed``. Only ``passed`` with no missing expected id is a clean pass (:attr:`TestRun.ok`).

Example::

    run = run_tests(sandbox, "pytest tests", expected=manifest.passed, timeout=120)
    if not run.ok:
        print(run.status, run.missing, run.failing)
"""

from __future__ import annotations

import re
import shlex
import uuid
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "RUN_STATUSES",
    "TEST_STATUSES",
    "TestRun",
    "parse_junit_xml",
    "parse_pytest_summary",
    "pytest_command",
    "run_tests",
]

#: Statuses of one test.
TEST_STATUSES = ("passed", "failed", "error", "skipped")

#: Statuses of a run, most serious first.
RUN_STATUSES = ("timeout", "crash", "no_report", "collection_error", "no_tests", "failed", "passed")

#: How many characters of pytest's terminal output a run keeps (the end, where the summary is).
OUTPUT_TAIL_BYTES = 200_000

_SEVERITY = {"error": 3, "failed": 2, "passed": 1, "skipped": 0}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_XML_ILLEGAL = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_SUMMARY_ITEM = re.compile(r"(\d+) ((?:subtests? )?[a-z]+)")


class _Exec(Protocol):
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float


class _Sandbox(Protocol):
    def exec(self, command: str, *, timeout: float | None = ..., workdir: str = ..., user: str | None = ...) -> Any: ...

    def get_file(self, path: str) -> bytes: ...


@dataclass
class TestRun:
    """What one pytest run did.

    Attributes:
        status: One of :data:`RUN_STATUSES`.
        tests: ``{test_id: status}`` for every test the report names.
        exit_code: pytest's exit code; None when it was killed.
        seconds: Wall time of the run.
        missing: Expected test ids absent from the report (sorted).
        collection_errors: Ids of modules (or folders) that failed to import.
        reported: pytest's own counts from its summary line (``{"passed": 3, "xfailed": 1, ...}``).
        output: The end of pytest's terminal output (decoded with replacement).
        detail: One line on why the status is not ``passed``; empty when it is.
        timed_out_tests: Tests that failed by the per-test time limit (harness runs with one only).
    """

    __test__ = False  # not a pytest test class, despite the name

    status: str
    tests: dict[str, str] = field(default_factory=dict)
    exit_code: int | None = None
    seconds: float = 0.0
    missing: list[str] = field(default_factory=list)
    collection_errors: list[str] = field(default_factory=list)
    reported: dict[str, int] = field(default_factory=dict)
    output: str = ""
    detail: str = ""
    timed_out_tests: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """A clean pass: every collected test passed or was skipped and no expected id is missing."""
        return self.status == "passed" and not self.missing

    @property
    def passing(self) -> set[str]:
        """Ids that passed."""
        return {t for t, s in self.tests.items() if s == "passed"}

    @property
    def failing(self) -> set[str]:
        """Ids that failed or errored."""
        return {t for t, s in self.tests.items() if s in ("failed", "error")}

    def counts(self) -> dict[str, int]:
        """Number of ids per test status (every status present, zeros included)."""
        c = Counter(self.tests.values())
        return {s: c.get(s, 0) for s in TEST_STATUSES}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form without the output."""
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3),
            "counts": self.counts(),
            "missing": self.missing,
            "collection_errors": self.collection_errors,
            "reported": self.reported,
            "detail": self.detail,
            "timed_out_tests": self.timed_out_tests,
        }


# ------------------------------------------------------------------------------------- parsing


def _module_map(files: Iterable[str]) -> dict[str, str]:
    """Dotted name pytest's JUnit writer derives from a path (``a/b.py`` -> ``a.b``) -> the path."""
    out: dict[str, str] = {}
    for f in files:
        f = f[2:] if f.startswith("./") else f
        out[re.sub(r"\.py$", "", f.replace("/", "."))] = f
    return out


def _folder_map(files: Iterable[str]) -> dict[str, str]:
    """Dotted name -> path of every folder above FILES (a broken conftest.py fails its folder)."""
    out: dict[str, str] = {}
    for f in files:
        parts = f.removeprefix("./").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            out.setdefault(".".join(parts[:i]), "/".join(parts[:i]))
    return out


def _split_classname(classname: str, modules: dict[str, str]) -> tuple[str, list[str]]:
    """(path, class names) for a JUnit classname such as ``tests.test_x.TestC``."""
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        path = modules.get(".".join(parts[:i]))
        if path is not None:
            return path, parts[i:]
    # No file list names it: classes are CamelCase by convention, modules are not.
    cut = next((i for i, p in enumerate(parts) if i > 0 and p[:1].isupper()), len(parts))
    return "/".join(parts[:cut]) + ".py", parts[cut:]


def _testcase_status(case: ET.Element) -> tuple[str, bool]:
    """(status, is a collection error) of one ``<testcase>``."""
    status, collect = "passed", False
    for child in case:
        if child.tag == "error":
            status = "error"
            collect = collect or "collection failure" in (child.get("message") or "")
        elif child.tag == "failure" and _SEVERITY[status] < _SEVERITY["failed"]:
            status = "failed"
        elif child.tag == "skipped" and status == "passed":
            status = "skipped"
    return status, collect


def _parse_xml(data: bytes) -> ET.Element:
    try:
        return ET.fromstring(data)
    except ET.ParseError:
        # Bytes that are not UTF-8 or characters XML forbids (a test printed binary output).
        text = _XML_ILLEGAL.sub("\ufffd", data.decode("utf-8", errors="replace"))
        text = re.sub(r"^<\?xml[^>]*\?>", "", text)
        return ET.fromstring(text.encode("utf-8"))


def parse_junit_xml(data: bytes | str, files: Iterable[str] = ()) -> tuple[dict[str, str], list[str]]:
    """Read a pytest JUnit XML report into ``({test_id: status}, collection error ids)``.

    Args:
        data: The report's bytes (invalid UTF-8 and XML-illegal characters are tolerated).
        files: Paths of the files under pytest's rootdir (relative); they resolve node ids exactly
            where a test class is inherited from another module. Without them a CamelCase rule
            tells classes from modules.

    Raises:
        ValueError: The data is not a JUnit XML report.
    """
    raw = data.encode("utf-8", errors="surrogateescape") if isinstance(data, str) else data
    try:
        root = _parse_xml(raw)
    except ET.ParseError as e:
        raise ValueError(f"not a JUnit XML report: {e}") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise ValueError(f"not a JUnit XML report: root element <{root.tag}>")
    cases = list(root.iter("testcase"))
    files = list(files)
    modules = _module_map(files)
    folders = _folder_map(files)
    # The report's own file attributes are real paths too (where each test function is defined).
    modules.update(
        {k: v for k, v in _module_map(c.get("file", "") for c in cases if c.get("file")).items() if k not in modules}
    )
    tests: dict[str, str] = {}
    collection_errors: list[str] = []
    for case in cases:
        classname, name = case.get("classname", ""), case.get("name", "")
        status, collect = _testcase_status(case)
        if not classname:  # a collector (module or folder) that failed or was skipped as a whole
            test_id = modules.get(name) or folders.get(name) or name.replace(".", "/") + ".py"
        else:
            path, classes = _split_classname(classname, modules)
            test_id = "::".join([path, *classes, name])
        if collect:
            collection_errors.append(test_id)
        previous = tests.get(test_id)
        if previous is None or _SEVERITY[status] > _SEVERITY[previous]:
            tests[test_id] = status
    return tests, sorted(set(collection_errors))


def parse_pytest_summary(output: str) -> dict[str, int]:
    """pytest's own counts from the last summary line (``3 failed, 10 passed in 1.2s``).

    Keys are pytest's words (``passed``, ``failed``, ``errors`` as ``error``, ``skipped``,
    ``xfailed``, ``xpassed``, ``deselected``, ``warnings`` as ``warning``, ``subtests passed``);
    an empty dict when there is no summary line (pytest was killed or crashed).
    """
    for line in reversed(_ANSI.sub("", output).splitlines()):
        line = line.strip().strip("=").strip()
        if not re.search(r"\bin [\d.]+s\b", line):
            continue
        counts: dict[str, int] = {}
        for number, word in _SUMMARY_ITEM.findall(line.split(" in ")[0]):
            word = {"errors": "error", "warnings": "warning"}.get(word, word)
            counts[word] = counts.get(word, 0) + int(number)
        if counts or "no tests ran" in line:
            return counts
    return {}


# --------------------------------------------------------------------------------------- running


def pytest_command(tests: str | Sequence[str]) -> str:
    """The shell command for a test command (``"pytest tests"``) or a list of test files/ids."""
    if isinstance(tests, str):
        words = tests.split()
        if words[:1] == ["pytest"]:
            return "python -m " + tests.strip()
        if words[:3] == ["python", "-m", "pytest"]:
            return tests.strip()
        raise ValueError(f"a test command must start with `pytest` or `python -m pytest`, got {tests!r}")
    if not tests:
        raise ValueError("no test files given")
    return "python -m pytest " + " ".join(shlex.quote(t) for t in tests)


def _run_status(
    result: _Exec, xml: bytes | None, tests: dict[str, str], collection_errors: list[str], output: str
) -> tuple[str, str]:
    code = result.exit_code
    if result.timed_out:
        return "timeout", f"pytest did not finish within the time limit ({result.seconds:.0f} s)"
    if code is None or code < 0 or code >= 128 or code == 3:
        return "crash", f"pytest crashed or was killed (exit code {code})"
    if code == 4:
        return "crash", "pytest rejected its arguments (usage error, exit code 4)"
    if xml is None:
        return "no_report", f"pytest exited with {code} but wrote no readable JUnit XML report"
    if collection_errors or (code == 2 and "error" in output.lower()):
        return "collection_error", f"{len(collection_errors) or 'some'} test module(s) could not be collected"
    if code == 5 or not tests:
        return "no_tests", "pytest collected no tests"
    if code != 0 or any(s in ("failed", "error") for s in tests.values()):
        bad = sum(s in ("failed", "error") for s in tests.values())
        return "failed", f"{bad} test(s) failed or errored (exit code {code})"
    return "passed", ""


def run_tests(
    sandbox: _Sandbox,
    tests: str | Sequence[str],
    *,
    expected: Iterable[str] = (),
    timeout: float = 300.0,
    workdir: str = "/repo",
    user: str | None = None,
) -> TestRun:
    """Run pytest in SANDBOX and read the result.

    Args:
        sandbox: A started sandbox (:class:`sparring.containers.sandbox.Sandbox`).
        tests: A pytest command (``"pytest -o addopts= tests"``) or test files / node ids.
        expected: Test ids that must appear in the report; those absent are listed in ``missing``.
        timeout: Seconds before the whole run is killed (status ``timeout``).
        workdir: Where pytest starts (the repository root).
        user: User to run as; None for the sandbox's default (non-root) user.

    Returns:
        The :class:`TestRun`; never raises for anything the tests or the code under test do.
    """
    token = uuid.uuid4().hex
    junit, log, files = (f"/tmp/sparring-{kind}-{token}" for kind in ("junit.xml", "pytest.log", "files.txt"))
    flags = f"-p no:cacheprovider --color=no -o junit_family=xunit1 --junitxml={junit}"
    # The file list resolves node ids exactly (see parse_junit_xml); it is taken right after the run.
    listing = f"find . -type f -not -path './.git/*' -not -path '*/__pycache__/*' > {files} 2>/dev/null"
    command = f"{pytest_command(tests)} {flags} > {log} 2>&1; rc=$?; {listing}; exit $rc"
    result = sandbox.exec(command, timeout=timeout, workdir=workdir, user=user)
    log_bytes, xml, file_list = (_read(sandbox, path) for path in (log, junit, files))
    sandbox.exec(f"rm -f {junit} {log} {files}", timeout=60, workdir="/", user=user)
    output = (log_bytes or b"").decode("utf-8", errors="replace") + result.stdout + result.stderr
    output = output[-OUTPUT_TAIL_BYTES:]
    paths = (file_list or b"").decode("utf-8", errors="replace").splitlines()
    parsed: dict[str, str] = {}
    collection_errors: list[str] = []
    detail = ""
    if xml is not None:
        try:
            parsed, collection_errors = parse_junit_xml(xml, paths)
        except ValueError as e:
            xml, detail = None, str(e)
    status, why = _run_status(result, xml, parsed, collection_errors, output)
    if status == "timeout":
        parsed, collection_errors = {}, []
    expected_ids = set(expected)
    return TestRun(
        status=status,
        tests=parsed,
        exit_code=result.exit_code,
        seconds=float(result.seconds),
        missing=sorted(expected_ids - set(parsed)),
        collection_errors=collection_errors,
        reported=parse_pytest_summary(output),
        output=output,
        detail=f"{why}; {detail}" if detail and why else (why or detail),
    )


def _read(sandbox: _Sandbox, path: str) -> bytes | None:
    try:
        return sandbox.get_file(path)
    except Exception:  # absent (pytest never got that far) or unreadable: the caller says which
        return None
