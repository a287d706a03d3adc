"""Validation of bug artifacts on the real inflection image: a good bug, and one per broken check."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sparring.envs.swe.bugs.artifact import BugArtifact, file_diff
from sparring.envs.swe.validation import CHECKS, ValidationConfig, validate_artifact
from tests.envs.swe.bugs import ORIGINAL_LINE, SOURCE, TESTS, files, good_artifact, pool, violating  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]


def test_known_good_artifact_is_valid(bug_verdicts: Any, files: dict[str, str]) -> None:  # noqa: F811
    """The session's validation of the good bug (``bug_verdicts``: the same ``validate_artifact`` call, made once
    for every module that starts from this bug)."""
    artifact, result = bug_verdicts.get("good")
    assert artifact == good_artifact(files)
    assert result.valid, (result.reason, result.detail)
    assert result.reason is None and all(result.checks[c] for c in CHECKS)
    # ordinal(13) and friends now say "rd": those parametrisations fail, the rest keep passing
    assert result.fail_to_pass and all(t.startswith(f"{TESTS}::test_ordinal") for t in result.fail_to_pass)
    assert any("13" in t for t in result.fail_to_pass)
    assert len(result.pass_to_pass) > 300
    # the failing tests ran twice more, and the original code once more, each in a fresh container; the
    # oracle tests ran in the solver's starting tree, and grading graded the bug state and the original code
    assert set(result.runs) == {"original", "buggy", "weakened", "rerun:1", "rerun:2", "rerun:original"} | {
        "solver_tree",
        "graded:unchanged",
        "graded:original",
    }
    assert result.clean_seconds == result.runs["graded:original"] > 0


@pytest.mark.parametrize("check", CHECKS)
def test_each_check_rejects_with_its_reason(check: str, pool: Any, files: dict[str, str]) -> None:  # noqa: F811
    result = validate_artifact(violating(files, check), pool.image, pool)
    assert not result.valid
    assert result.reason == check, (result.reason, result.detail)
    assert result.checks[check] is False
    assert result.detail
    if check == "test_files":
        assert "missing test file(s): tests/test_missing.py" in result.detail
    # an empty bug diff is refused on the artifact's text, before any test run: no check is known to hold;
    # the others are judged on the runs, in order, so every check before the failing one held
    before_any_run = check == "changed_files"
    assert (result.runs == {}) == before_any_run, result.runs
    held = () if before_any_run else CHECKS[: CHECKS.index(check)]
    assert result.checks == {c: True for c in held} | {check: False}


def _weakening_outside_test_files(image_files: dict[str, str]) -> BugArtifact:
    conf, good = image_files["docs/conf.py"], good_artifact(image_files)
    hide = file_diff("docs/conf.py", conf, conf + "# hide\n")
    return replace(good, test_weaken_diff=good.test_weaken_diff + hide)


def _bug_in_test_files_only(image_files: dict[str, str]) -> BugArtifact:
    tests, case = image_files[TESTS], '("13", "13th")'
    assert case in tests
    return replace(
        good_artifact(image_files), bug_inject_diff=file_diff(TESTS, tests, tests.replace(case, '("13", "13rd")'))
    )


def _new_file(path: str, text: str) -> str:
    """A diff that adds ``path`` with ``text``."""
    lines = text.splitlines(keepends=True)
    return f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n" + "".join("+" + line for line in lines)


#: Makes ordinal(13) say "rd" from outside the package: the same failing tests as the good bug's.
TEEN_13_AS_RD = """import inflection

_ordinal = inflection.ordinal


def _teen_13_as_rd(number):
    return "rd" if abs(int(number)) % 100 == 13 else _ordinal(number)


inflection.ordinal = _teen_13_as_rd
"""


def _bug_in_conftest_only(image_files: dict[str, str]) -> BugArtifact:
    # pytest loads it, so the ordinal tests fail and the weakening hides it: every run-based check would
    # hold, yet grading drops a solver's edit to conftest.py, so no repair could pass
    return replace(good_artifact(image_files), bug_inject_diff=_new_file("conftest.py", TEEN_13_AS_RD))


def _bug_in_pytest_config_only(image_files: dict[str, str]) -> BugArtifact:
    cfg = image_files["setup.cfg"]
    bug = file_diff("setup.cfg", cfg, cfg + "\n[tool:pytest]\npython_functions = check_*\n")
    return replace(good_artifact(image_files), bug_inject_diff=bug)


def _bug_in_a_test_helper_only(image_files: dict[str, str]) -> BugArtifact:
    # not an oracle test file, not protected: a test by its place (tests/), which is no code to repair
    return replace(good_artifact(image_files), bug_inject_diff=_new_file("tests/helpers.py", TEEN_13_AS_RD))


def _bug_that_does_not_apply(image_files: dict[str, str]) -> BugArtifact:
    # a diff made against code the image does not hold: its context and removed line are not in the file
    other = image_files[SOURCE].replace(ORIGINAL_LINE, "if number % 100 in (1, 2, 3):")
    bug = file_diff(SOURCE, other, other.replace("(1, 2, 3)", "(1, 2)"))
    return replace(good_artifact(image_files), bug_inject_diff=bug)


UNCOVERED = "test_weaken.diff changes ['docs/conf.py'], which test_files.txt does not list"
UNFIXABLE = "bug_inject.diff changes test files or pytest configuration {}, whose repair grading discards"
TESTS_ONLY = UNFIXABLE.format([TESTS])


@pytest.mark.parametrize(
    ("make", "reason", "detail", "ran"),
    [
        # check 1, coverage half: the weakening also touches docs/conf.py, which test_files.txt does not list
        (_weakening_outside_test_files, "test_files", UNCOVERED, False),
        # check 4: a "bug" in the oracle tests only, no code changed
        (_bug_in_test_files_only, "changed_files", TESTS_ONLY, False),
        # check 4: a bug only where grading discards the solver's edits (conftest.py, pytest configuration)
        (_bug_in_conftest_only, "changed_files", UNFIXABLE.format(["conftest.py"]), False),
        (_bug_in_pytest_config_only, "changed_files", UNFIXABLE.format(["setup.cfg"]), False),
        # check 4: a bug only in a test helper that test_files.txt does not list: no code file changed
        # (refused as no code, or as a file whose repair grading does not carry: either way, before any run)
        (_bug_in_a_test_helper_only, "changed_files", "['tests/helpers.py']", False),
        # check 4: the bug diff does not apply to the original code (found when the buggy state is built)
        (_bug_that_does_not_apply, "changed_files", "bug_inject.diff does not apply: ", True),
    ],
    ids=[
        "weakening_outside_test_files",
        "bug_in_test_files_only",
        "bug_in_conftest_only",
        "bug_in_pytest_config_only",
        "bug_in_a_test_helper_only",
        "bug_does_not_apply",
    ],
)
def test_more_rejections_with_their_reason(
    make: Any,
    reason: str,
    detail: str,
    ran: bool,
    pool: Any,  # noqa: F811
    files: dict[str, str],  # noqa: F811
) -> None:
    result = validate_artifact(make(files), pool.image, pool)
    assert not result.valid and result.reason == reason, (result.reason, result.detail)
    assert detail in result.detail, result.detail
    assert result.checks == {reason: False}  # nothing after the refusal is judged
    # refusals on the artifact's text run no test; a diff that does not apply is found by building the states
    assert set(result.runs) == ({"original", "buggy", "weakened"} if ran else set()), result.runs


def test_thresholds_are_parameters(pool: Any, files: dict[str, str]) -> None:  # noqa: F811
    art = good_artifact(files)
    strict = validate_artifact(art, pool.image, pool, ValidationConfig(min_passing_tests=10_000))
    assert strict.reason == "passing_before"
    many = validate_artifact(art, pool.image, pool, ValidationConfig(min_failing_tests=1_000))
    assert many.reason == "failing_after_bug"
    two = validate_artifact(art, pool.image, pool, ValidationConfig(min_changed_files=2))
    assert two.reason == "changed_files" and two.runs == {}  # rejected before any test run


def test_baseline_is_reused(pool: Any, files: dict[str, str]) -> None:  # noqa: F811
    from sparring.envs.swe.runs import ORIGINAL, run_state

    art = good_artifact(files)
    baseline = run_state(pool, art, ORIGINAL, 120)
    assert baseline.statuses and baseline.parse_error is None
    result = validate_artifact(art, pool.image, pool, baseline=baseline)
    assert result.valid and "original" in result.runs


def test_test_files_must_stay_inside_the_repository(pool: Any, files: dict[str, str]) -> None:  # noqa: F811
    art = replace(good_artifact(files), test_files=[TESTS, "../etc/passwd"])
    result = validate_artifact(art, pool.image, pool)
    assert result.reason == "test_files" and "inside" in result.detail and result.runs == {}


def test_states_waiting_for_the_configuration_wake_when_its_reader_gets_no_container(files: dict[str, str]) -> None:  # noqa: F811
    """The weakened state reads the ini and the others wait: a reader that gets no container must not hang them."""
    import threading

    from sparring.envs.swe.runs import SharedIni

    ini = SharedIni(good_artifact(files))
    seen: list[str] = []

    def waiter() -> None:
        try:
            ini.wait()
        except RuntimeError as e:
            seen.append(str(e))

    threads = [threading.Thread(target=waiter) for _ in range(3)]
    for t in threads:
        t.start()
    ini.fail("no fresh container to read the repository's configuration from")
    for t in threads:
        t.join(timeout=5)
    assert not any(t.is_alive() for t in threads)
    assert seen == ["no fresh container to read the repository's configuration from"] * 3
