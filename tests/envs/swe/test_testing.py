"""Test running and JUnit parsing: real pytest runs, on the host and inside a repository image.

Host tests run pytest on a small generated project and compare the parsed ids and counts with
pytest's own collection and summary. Docker tests break a real repository image's code in a
sandbox (syntax error, a test that sleeps, a test that prints invalid UTF-8) and check that the
run status says so.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparring.envs.swe.testing import parse_junit_xml, parse_pytest_summary, pytest_command, run_tests
from tests.conftest import require

PROJECT = {
    "pkg/__init__.py": "def double(x):\n    '''\n    >>> double(2)\n    4\n    '''\n    return 2 * x\n",
    "tests/__init__.py": "",
    "tests/base.py": "class Shared:\n    def test_inherited(self):\n        assert True\n",
    "tests/test_a.py": """
import pytest
from pkg import double
from tests.base import Shared


class TestDouble(Shared):
    def test_two(self):
        assert double(2) == 4

    def test_wrong(self):
        assert double(2) == 5


@pytest.mark.parametrize("x, y", [(1, 2), (2, 4), (-1, 2)], ids=["one", "two.0", "a/b::c"])
def test_param(x, y):
    assert double(x) == y


@pytest.mark.skip(reason="not today")
def test_skipped():
    pass


@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False


@pytest.mark.xfail(reason="maybe")
def test_xpass():
    assert True


@pytest.fixture
def broken():
    raise RuntimeError("setup fails")


def test_setup_error(broken):
    pass


def test_binary_output():
    import os, sys
    os.write(1, b"raw bytes \\xff\\xfe\\x00\\x1b end\\n")
    sys.stdout.buffer.write(b"\\xc3\\x28 invalid utf-8\\n")
    print("\\udcff lone surrogate".encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
    assert False, "fails after binary output \\x00"
""",
}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def _host_pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--color=no", *args]
    return subprocess.run(cmd, cwd=root, capture_output=True, text=True, errors="replace", timeout=120)


@pytest.fixture(scope="module")
def host_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """PROJECT run once with pytest on the host: report, output, ids pytest collects, file list."""
    root = tmp_path_factory.mktemp("proj")
    _write(root, PROJECT)
    (root / "pytest.ini").write_text("[pytest]\naddopts = --doctest-modules\n")
    collected = _host_pytest(root, "--collect-only", "-q", "pkg", "tests")
    ids = {line for line in collected.stdout.splitlines() if "::" in line}
    done = _host_pytest(root, "-o", "junit_family=xunit1", "--junitxml=report.xml", "pkg", "tests")
    files = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()]
    return {"xml": (root / "report.xml").read_bytes(), "output": done.stdout, "ids": ids, "files": files}


def test_parsed_ids_are_pytest_node_ids(host_run: dict[str, Any]) -> None:
    tests, collection_errors = parse_junit_xml(host_run["xml"], host_run["files"])
    assert set(tests) == host_run["ids"]
    assert collection_errors == []
    # An inherited test is filed under the module that collects it, not where it is defined.
    assert "tests/test_a.py::TestDouble::test_inherited" in tests
    assert tests["tests/test_a.py::test_param[a/b::c]"] == "failed"
    assert tests["tests/test_a.py::test_param[two.0]"] == "passed"
    assert tests["pkg/__init__.py::pkg.double"] == "passed"
    assert tests["tests/test_a.py::test_setup_error"] == "error"
    assert tests["tests/test_a.py::test_xfail"] == "skipped"
    assert tests["tests/test_a.py::test_xpass"] == "passed"
    assert tests["tests/test_a.py::test_binary_output"] == "failed"


def test_parsing_without_a_file_list_gives_the_same_ids(host_run: dict[str, Any]) -> None:
    assert parse_junit_xml(host_run["xml"])[0] == parse_junit_xml(host_run["xml"], host_run["files"])[0]


def test_parsed_counts_equal_pytest_counts(host_run: dict[str, Any]) -> None:
    tests, _ = parse_junit_xml(host_run["xml"], host_run["files"])
    reported = parse_pytest_summary(host_run["output"])
    statuses = list(tests.values())
    assert statuses.count("passed") == reported.get("passed", 0) + reported.get("xpassed", 0)
    assert statuses.count("failed") == reported.get("failed", 0)
    assert statuses.count("error") == reported.get("error", 0)
    assert statuses.count("skipped") == reported.get("skipped", 0) + reported.get("xfailed", 0)


def test_report_with_invalid_utf8_and_illegal_xml_characters_is_parsed() -> None:
    report = (
        b'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">'
        b'<testcase classname="tests.test_x" name="test_a" file="tests/test_x.py">'
        b'<failure message="bad \xff\xfe">out \x00\x1b \xc3\x28</failure></testcase>'
        b'<testcase classname="tests.test_x" name="test_b"><system-out>\xff</system-out></testcase>'
        b"</testsuite></testsuites>"
    )
    tests, _ = parse_junit_xml(report)
    assert tests == {"tests/test_x.py::test_a": "failed", "tests/test_x.py::test_b": "passed"}


def test_not_a_report_raises_value_error() -> None:
    with pytest.raises(ValueError):
        parse_junit_xml(b"<html>no</html>")
    with pytest.raises(ValueError):
        parse_junit_xml(b"")


def test_summary_lines() -> None:
    assert parse_pytest_summary("x\n=== 3 failed, 10 passed, 1 xfailed in 1.20s ===\n") == {
        "failed": 3,
        "passed": 10,
        "xfailed": 1,
    }
    assert parse_pytest_summary("465 passed, 24 subtests passed in 1.61s") == {"passed": 465, "subtests passed": 24}
    assert parse_pytest_summary("1 error in 0.2s") == {"error": 1}
    assert parse_pytest_summary("killed before the end") == {}


def test_pytest_command_forms() -> None:
    assert pytest_command("pytest -o addopts= tests") == "python -m pytest -o addopts= tests"
    assert pytest_command(["tests/test a.py", "tests/test_b.py::test_c"]) == (
        "python -m pytest 'tests/test a.py' tests/test_b.py::test_c"
    )
    with pytest.raises(ValueError):
        pytest_command("rm -rf /")


# ------------------------------------------------------------------------------ in a real image


def _inflection() -> Any:
    from sparring.envs.swe.repos.catalog import get_repo
    from sparring.envs.swe.repos.images import load_manifest

    spec = get_repo("inflection")
    manifest = load_manifest(spec)
    require(manifest is not None, f"the image {spec.image}")
    return spec, manifest


@pytest.fixture
def sandbox() -> Any:
    """A fresh sandbox of the inflection image."""
    from sparring.containers.sandbox import Sandbox

    spec, _ = _inflection()
    box = Sandbox.create(spec.image)
    yield box
    box.close()


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_clean_suite_passes_and_counts_match(sandbox: Any) -> None:
    spec, manifest = _inflection()
    run = run_tests(sandbox, spec.test_command, expected=manifest.passed, timeout=120)
    assert run.ok, run.detail
    assert run.passing >= set(manifest.passed)
    assert run.counts()["passed"] == run.reported["passed"] + run.reported.get("xpassed", 0)


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_syntax_error_gives_collection_error_and_missing_ids(sandbox: Any) -> None:
    spec, manifest = _inflection()
    source = sandbox.get_file("/repo/inflection/__init__.py").decode()
    sandbox.put_file("/repo/inflection/__init__.py", source.replace("def camelize(", "def camelize((", 1))
    run = run_tests(sandbox, spec.test_command, expected=manifest.passed, timeout=120)
    assert run.status == "collection_error"
    assert not run.ok
    assert run.collection_errors == ["test_inflection.py"]
    assert run.passing == set()
    assert set(run.missing) == set(manifest.passed)


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_sleeping_test_times_out(sandbox: Any) -> None:
    sandbox.put_file("/repo/test_sleepy.py", "import time\n\ndef test_sleeps():\n    time.sleep(600)\n")
    run = run_tests(sandbox, ["test_sleepy.py"], expected=["test_sleepy.py::test_sleeps"], timeout=5)
    assert run.status == "timeout"
    assert not run.ok
    assert run.exit_code is None
    assert run.missing == ["test_sleepy.py::test_sleeps"]
    assert run.seconds < 60


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_invalid_utf8_output_is_parsed(sandbox: Any) -> None:
    sandbox.put_file("/repo/tests_extra/test_binary.py", PROJECT["tests/test_a.py"])
    sandbox.put_file("/repo/pkg/__init__.py", PROJECT["pkg/__init__.py"])
    sandbox.put_file("/repo/tests/__init__.py", "")
    sandbox.put_file("/repo/tests/base.py", PROJECT["tests/base.py"])
    target = "tests_extra/test_binary.py"
    run = run_tests(sandbox, [f"{target}::test_binary_output", f"{target}::test_param"], timeout=120)
    assert run.status == "failed"
    assert run.tests[f"{target}::test_binary_output"] == "failed"
    assert run.tests[f"{target}::test_param[one]"] == "passed"
    assert run.reported == {"failed": 2, "passed": 2}


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_nothing_collected_is_not_a_pass(sandbox: Any) -> None:
    sandbox.put_file("/repo/test_empty.py", "X = 1\n")
    run = run_tests(sandbox, ["test_empty.py"], timeout=60)
    assert run.status == "no_tests"
    assert not run.ok


@pytest.mark.docker
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("body", "status"),
    [
        ("import os, signal\n\ndef test_dies():\n    os.kill(os.getpid(), signal.SIGKILL)\n", "crash"),
        ("import os\n\ndef test_leaves():\n    os._exit(0)\n", "no_report"),
    ],
    ids=["killed", "exit-0-without-report"],
)
def test_a_run_that_ends_without_its_report_is_not_a_pass(sandbox: Any, body: str, status: str) -> None:
    sandbox.put_file("/repo/test_abrupt.py", body)
    expected = ["test_abrupt.py::" + body.split("def ")[1].split("(")[0]]
    run = run_tests(sandbox, ["test_abrupt.py"], expected=expected, timeout=60)
    assert run.status == status, run.detail
    assert not run.ok
    assert run.missing == expected
    assert run.tests == {}
