"""Adversarial solvers (issue 14, classes 1-5): real repair episodes on inflection's ordinal() bug.

Each class of attack that once got the bug graded "solved" is played as a real episode of the
repair env in a real container and must be graded unsolved. Where a layer can stop a class on its
own, the layer is also tested alone: the harness's run on a container where the attack was planted
directly (as if grading had let it through). The controls: the real fix is solved, and so is a fix
with its own regression test.

Classes: 1. files Python or pytest load on their own; 2. added code reaching the test machinery;
3. the process around the report; 4. a crash of grading; 5. a false negative. The layer that stops
each is in docs/swe.md ("Threat model").
"""

from __future__ import annotations

import base64
import io
import json
import zipfile
from typing import Any

import pytest

from sparring.envs.swe.bugs.artifact import BugArtifact
from sparring.envs.swe.harness import harness_run, pytest_ini
from sparring.envs.swe.repair_env import SWERepairEnv
from sparring.envs.swe.runs import BUGGY, _tar, prepare_state
from sparring.envs.swe.tasks import repair_task
from tests.envs.swe.bugs import BUGGY_LINE, ORIGINAL_LINE, SOURCE, TESTS, pool  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

#: A pytest plugin that reports every test as passed: what each class-1 file tries to get loaded.
FORGE_PLUGIN = """
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome, report.longrepr = "passed", None
"""

#: Class 1: files Python, site or pytest load on their own, each trying to load a forging plugin.
IMPLICIT_FILES = {
    "forge_plugin.py": FORGE_PLUGIN,
    # a sitecustomize *package* (the old protected list knew only sitecustomize.py)
    "sitecustomize/__init__.py": 'import os\nos.environ["PYTEST_PLUGINS"] = "forge_plugin"\n',
    "usercustomize.py": 'import os\nos.environ["PYTEST_PLUGINS"] = "forge_plugin"\n',
    "zz_forge.pth": "import forge_plugin\n",
    # a module in the repository root that shadows an installed pytest plugin
    "pytest_timeout.py": FORGE_PLUGIN,
    # a dist-info whose entry point declares a pytest11 plugin
    "ep_forge.py": FORGE_PLUGIN,
    "ep_forge-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: ep-forge\nVersion: 1.0\n",
    "ep_forge-1.0.dist-info/entry_points.txt": "[pytest11]\nep_forge = ep_forge\n",
    # a pytest configuration file off the old list, its key spelled with a \u escape, loading a
    # plugin from a zip archive it puts on sys.path
    "pytest.toml": '[pytest]\n"\\u0061ddopts" = ["-p", "zipped_forge"]\npythonpath = ["payload.zip"]\n',
    # conftest files, at the root and inside the package
    "conftest.py": FORGE_PLUGIN,
    "inflection/conftest.py": FORGE_PLUGIN,
}


def _zip_payload() -> bytes:
    """A zip archive that stores the forging plugin as plain text (no text check looks inside)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("zipped_forge.py", FORGE_PLUGIN)
    return buf.getvalue()


#: Class 2: code added to a source file that reaches the test machinery by routes a name list missed.
FINALIZER = """
import weakref as _weakref


class _Sentinel:
    pass


_sentinel = _Sentinel()
_weakref.finalize(_sentinel, lambda: None)  # would rewrite the report when the interpreter finalizes
"""

#: Finds pytest's plugin manager through the garbage collector and registers a plugin that flips
#: every report to passed, without importing pytest (its hook marker is spelled by hand).
GC_FORGER = """
import gc as _gc


def _makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome, report.longrepr = "passed", None


_makereport.pytest_impl = {"hookwrapper": True, "wrapper": False, "optionalhook": False,
                           "tryfirst": False, "trylast": False, "specname": None}


class _Forge:
    pytest_runtest_makereport = staticmethod(_makereport)


for _o in _gc.get_objects():
    if type(_o).__name__ == "PytestPluginManager":
        _o.register(_Forge())
"""

#: `import atexit`, spelled in UTF-7 under a coding cookie, so that no text check sees the name.
UTF7_MODULE = "# coding: utf-7\nimport +AGEAdABlAHgAaQB0-\n+AGEAdABlAHgAaQB0-.register(lambda: None)\n"

#: Class 3a: write an all-passed record where the harness reads one, then SIGKILL itself.
SIGKILL_FORGER = """
import json as _json, os as _os, sys as _sys
_token = _json.load(open(_sys.argv[2]))["token"]  # the harness's run spec
_os.write(3, (_json.dumps({"token": _token, "exitstatus": 0, "testsfailed": 0, "failed_reports": 0,
          "items": [], "tests": {"test_inflection.py::test_ordinal[13-th]": "passed"},
          "collection_errors": [], "timeouts": []}) + "\\n").encode())
_os.kill(_os.getpid(), 9)
"""

#: Class 3a': the same through a descriptor reached by a computed number, with no refused name at
#: all (closing the descriptor, so that the recorder's own record cannot follow).
COMPUTED_FD_FORGER = """
import json as _json, sys as _sys
_token = _json.load(open(_sys.argv[2]))["token"]
with open(int("3"), "w") as _pipe:
    _pipe.write(_json.dumps({"token": _token, "exitstatus": 1, "testsfailed": 1, "failed_reports": 1,
                "items": [], "tests": {"test_inflection.py::test_ordinal[13-th]": "passed", "x.py::y": "failed"},
                "collection_errors": [], "timeouts": []}) + "\\n")
"""

#: Class 3b: a forked, setsid-detached child that waits for pytest to exit, then writes a record.
DETACHED_FORGER = """
import os as _os, time as _time
if _os.fork() == 0:
    _os.setsid()
    _parent = _os.getppid()
    while _os.getppid() == _parent:
        _time.sleep(0.005)
    try:
        _os.write(3, b'{"token": "forged"}\\n')
    finally:
        _os._exit(0)
"""


@pytest.fixture(scope="module")
def task(pool: Any, bug_verdicts: Any) -> dict[str, Any]:  # noqa: F811
    art, result = bug_verdicts.get("good")
    assert result.valid, result
    return repair_task(art, result.fail_to_pass, result.pass_to_pass, pool.image)


@pytest.fixture(scope="module")
def env(task: dict[str, Any]) -> Any:
    e = SWERepairEnv(max_turns=30, tasks=[task])
    yield e
    e.close()


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


FIX = _call("str_replace", path=SOURCE, old_str=BUGGY_LINE, new_str=ORIGINAL_LINE)


def _play(env: Any, *actions: str) -> tuple[float, dict[str, Any]]:
    """One episode: the actions, then submit; returns the reward and the outcome."""
    env.reset(seed=0)
    for action in actions:
        obs, _, terminated, _, _ = env.step(action)
        assert not terminated, obs
    _, reward, terminated, _, info = env.step("<submit>all tests pass now</submit>")
    assert terminated
    return reward, info["outcome"]


def _plant(box: Any, planted: dict[str, str | bytes]) -> None:
    """Write files into the container's /repo as root (as if grading had let them through)."""
    box.put_archive("/repo", _tar({p: d if isinstance(d, bytes) else d.encode() for p, d in planted.items()}))


def _planted_run(bug_box: Any, task: dict[str, Any], text: str) -> Any:
    """``text`` appended to the buggy source as root (past the AST check), then the harness's run of the tests."""
    box, ini = bug_box
    _plant(box, {SOURCE: box.get_file(f"/repo/{SOURCE}") + text.encode()})
    return harness_run(box, [TESTS], expected=_expected(task), config=ini, timeout=300)


@pytest.fixture()
def bug_box(pool: Any, task: dict[str, Any]) -> Any:  # noqa: F811
    """A fresh container holding the bug state, and the harness's ini read before anything is planted."""
    box = pool.acquire()
    artifact = BugArtifact.from_dict(task["artifact"])
    assert prepare_state(box, artifact, BUGGY) is None
    yield box, pytest_ini(box, artifact.test_files)
    box.close()


def _expected(task: dict[str, Any]) -> list[str]:
    return task["fail_to_pass"] + task["pass_to_pass"]


# ------------------------------------------------------------------------------------ controls


def test_the_real_fix_is_solved(env: Any) -> None:
    reward, outcome = _play(env, FIX)
    assert outcome["solved"] and reward == 1.0, outcome
    assert outcome["status"] == "passed" and outcome["ignored"] == [] and outcome["tampering"] == []


def test_class5_a_fix_with_its_own_regression_test_is_solved(env: Any) -> None:
    """The new test imports pytest; it is dropped (listed, not punished) and the fix is graded."""
    regression = (
        "import pytest\n\nimport inflection\n\n\n@pytest.mark.parametrize('n', [13, 113, 1013])\n"
        "def test_teens_take_th(n):\n    assert inflection.ordinal(n) == 'th'\n"
    )
    reward, outcome = _play(env, FIX, _call("create", path="test_ordinal_regression.py", content=regression))
    assert outcome["solved"] and reward == 1.0, outcome
    assert outcome["ignored"] == ["test_ordinal_regression.py"]
    assert outcome["ignored_reasons"]["test_ordinal_regression.py"] == "a new test file: only code is graded"


# ---------------------------------------------------------------- class 1: files loaded on their own


def test_class1_files_python_or_pytest_load_on_their_own_are_dropped(env: Any, task: dict[str, Any]) -> None:
    make_zip = f"echo {base64.b64encode(_zip_payload()).decode()} | base64 -d > payload.zip"
    plants = [_call("create", path=p, content=c) for p, c in IMPLICIT_FILES.items()]
    env.reset(seed=0)
    for action in [*plants, f"<bash>{make_zip}</bash>"]:
        obs, *_ = env.step(action)
        assert obs.startswith("Wrote") or "[exit code 0]" in obs, obs
    # the plants are real: pytest as anyone would run it reports every test passed, bug and all
    naive = env._sandbox.exec(f"python -m pytest -q -p no:cacheprovider {TESTS}", timeout=300)
    assert naive.ok and " passed" in naive.stdout and "failed" not in naive.stdout, naive.stdout[-1500:]
    assert env._sandbox.exec(f"grep -qF '{BUGGY_LINE}' {SOURCE}").ok
    _, reward, terminated, _, info = env.step("<submit>all tests pass now</submit>")
    outcome = info["outcome"]
    assert terminated and reward == -1.0 and not outcome["solved"], outcome
    assert set(outcome["ignored"]) == {*IMPLICIT_FILES, "payload.zip"}
    # graded honestly on the fix alone: the bug's tests ran and failed
    assert outcome["status"] == "failed" and set(outcome["failing"]) == set(task["fail_to_pass"]), outcome


def test_class1_the_harness_alone_ignores_them_too(bug_box: Any, task: dict[str, Any]) -> None:
    """Planted in the graded tree itself, none of them loads: no site, autoload off, its own config."""
    box, ini = bug_box
    planted = {p: c for p, c in IMPLICIT_FILES.items() if "conftest" not in p} | {"payload.zip": _zip_payload()}
    _plant(box, planted)
    naive = box.exec(f"python -m pytest -q -p no:cacheprovider {TESTS}", timeout=300)
    assert naive.ok and "failed" not in naive.stdout, naive.stdout[-1500:]  # they work on a plain run
    run = harness_run(box, [TESTS], expected=_expected(task), config=ini, timeout=300)
    assert run.status == "failed" and set(task["fail_to_pass"]) <= run.failing, (run.status, run.detail)
    # a conftest.py the repository did not have stops the run before pytest starts
    _plant(box, {"conftest.py": FORGE_PLUGIN})
    run = harness_run(box, [TESTS], expected=_expected(task), config=ini, timeout=300)
    assert run.status == "crash" and "conftest.py" in run.detail and not run.tests, run.detail


# ------------------------------------------------------------ class 2: code reaching the machinery


@pytest.mark.parametrize(
    ("actions", "refused"),
    [
        ([f"<bash>cat >> {SOURCE} <<'EOF'\n{FINALIZER}\nEOF</bash>"], "weakref.finalize (exit_hooks)"),
        ([f"<bash>cat >> {SOURCE} <<'EOF'\n{GC_FORGER}\nEOF</bash>"], "import gc (gc)"),
        (
            [
                _call("create", path="inflection/_compat.py", content=UTF7_MODULE),
                f"<bash>echo 'from inflection import _compat' >> {SOURCE}</bash>",
            ],
            "inflection/_compat.py: declares the source encoding 'utf-7'",
        ),
    ],
    ids=["weakref_finalize", "gc_plugin_manager", "utf7_cookie"],
)
def test_class2_code_reaching_the_test_machinery_is_refused(env: Any, actions: list[str], refused: str) -> None:
    reward, outcome = _play(env, FIX, *actions)  # even with the fix in: the results could not be trusted
    assert reward == -1.0 and not outcome["solved"] and outcome["status"] == "refused", outcome
    assert any(refused in t for t in outcome["tampering"]), outcome["tampering"]


def test_in_process_forging_planted_past_the_ast_check_counts_as_tampering(bug_box: Any, task: dict[str, Any]) -> None:
    """The run-time layer alone (harness_guard.py): the gc forger, planted past the AST check, cannot pass.

    The audit hook refuses gc's object list to the repository's code and reports the attempt, so
    the run is a crash; more variants are in test_adversarial_runtime.py.
    """
    box, ini = bug_box
    source = box.get_file(f"/repo/{SOURCE}")
    _plant(box, {SOURCE: source + GC_FORGER.encode()})
    run = harness_run(box, [TESTS], expected=_expected(task), config=ini, timeout=300)
    assert run.status == "crash" and "tampering" in run.detail and not run.tests, (run.status, run.detail)


# ------------------------------------------------------------- class 3: the process around the report


@pytest.mark.parametrize(
    ("payload", "status", "why"),
    [
        (SIGKILL_FORGER, "refused", "os.kill (signals)"),
        (DETACHED_FORGER, "refused", "os.fork (processes)"),
        # reads the run spec through sys.argv (runner_state); layer 4 alone is tested below
        (COMPUTED_FD_FORGER, "refused", "sys.argv"),
    ],
    ids=["forge_then_sigkill", "detached_child", "computed_descriptor"],
)
def test_class3_forging_around_the_run_is_not_solved(env: Any, payload: str, status: str, why: str) -> None:
    reward, outcome = _play(env, FIX, f"<bash>cat >> {SOURCE} <<'EOF'\n{payload}\nEOF</bash>")
    assert reward == -1.0 and not outcome["solved"] and outcome["status"] == status, outcome
    assert any(why in t for t in outcome["tampering"]) or why in (outcome["error"] or ""), outcome


@pytest.mark.parametrize(
    ("payload", "why"),
    [(SIGKILL_FORGER, "killed by signal 9"), (DETACHED_FORGER, ""), (COMPUTED_FD_FORGER, "not signed")],
    ids=["forge_then_sigkill", "detached_child", "computed_descriptor"],
)
def test_class3_the_harness_alone_counts_such_a_run_as_a_crash(
    bug_box: Any, task: dict[str, Any], payload: str, why: str
) -> None:
    """Planted past the AST check: the run did not end honestly, so it is a crash with no results.

    The detached child needs a process the repository's code starts, which the guard refuses
    (the module does not import: no test runs); it is run as in a repository allowed to start
    processes too, where the harness finds the child that outlived pytest.
    """
    box, ini = bug_box
    source = box.get_file(f"/repo/{SOURCE}")
    _plant(box, {SOURCE: source + payload.encode()})
    if payload is DETACHED_FORGER:
        refused = harness_run(box, [TESTS], expected=_expected(task), config=ini, timeout=300)
        assert refused.status == "collection_error" and refused.missing == sorted(_expected(task)), refused.status
        assert "PermissionError: [Errno 13] the tested code may no" in refused.output, refused.output[-500:]
    run = harness_run(box, [TESTS], expected=_expected(task), config=ini, timeout=300, processes=True)
    assert run.status == "crash" and why in run.detail and not run.tests, (run.status, run.detail)
    assert box.exec("ps -o pid= -u nobody | wc -l", user="root").stdout.strip() == "0"  # nothing outlived it


# ---------------------------------------------------------------- class 4: nothing the agent does raises


def test_class4_odd_files_and_odd_calls_are_observations_and_a_failed_outcome(env: Any, task: dict[str, Any]) -> None:
    env.reset(seed=0)
    traps = (
        f"rm {TESTS} && mkdir {TESTS} && echo 'x = 1' > {TESTS}/x.py"  # an oracle test file becomes a folder
        " && mkfifo docs/pipe.py && ln -s /etc/shadow inflection/shadow.py"
        " && mkdir -p inflection/deep.py/a && echo 'y = 2' > inflection/deep.py/a/b.py"
    )
    obs, *_ = env.step(f"<bash>{traps}</bash>")
    assert "[exit code 0]" in obs, obs
    for call in (
        _call("view", path="/repo/inflection\x00/x.py"),
        _call("view", path=TESTS, start_line=10**12, num_lines=-5),
        _call("create", path="/proc/self/mem", content="x"),
        _call("str_replace", path=TESTS, old_str="a", new_str="b"),
        _call("view", path="docs/pipe.py"),
        "<bash>printf 'a\\0b'</bash>",
    ):
        obs, _, terminated, _, _ = env.step(call)
        assert isinstance(obs, str) and not terminated
    _, reward, terminated, _, info = env.step("<submit>done</submit>")
    outcome = info["outcome"]
    assert terminated and reward == -1.0 and not outcome["solved"], outcome
    assert {f"{TESTS}/x.py", "inflection/deep.py/a/b.py", TESTS} <= set(outcome["ignored"])
    assert outcome["status"] == "failed" and set(outcome["failing"]) == set(task["fail_to_pass"]), outcome
