"""The SWE-bench export and ``eval swe --predictions``, on the inflection bug store setup builds, in real containers.

What a SWE-bench user does with an exported instance: start its image, check out
``base_commit``, apply ``test_patch`` and a patch with ``git apply``, run FAIL_TO_PASS and
PASS_TO_PASS. And what they do with a predictions file: grade it, the gold patch solved and an
empty one not; and the example of docs/integrations.md, run as written. The bugs are copied into
a private ``SPARRING_HOME``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import private_home, sparring

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = "inflection"
SWE_BENCH_FIELDS = (
    "instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement", "hints_text", "created_at",
    "version", "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit",
)  # fmt: skip


#: A prediction that would pass every test if pytest loaded it: a new conftest.py at the root.
CONFTEST = """diff --git a/conftest.py b/conftest.py
new file mode 100644
--- /dev/null
+++ b/conftest.py
@@ -0,0 +1,7 @@
+import pytest
+
+
+@pytest.hookimpl(hookwrapper=True)
+def pytest_runtest_makereport(item, call):
+    report = (yield).get_result()
+    report.outcome = "passed"
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private home holding a copy of the inflection bug store."""
    return private_home(tmp_path_factory, REPO, 3)


@pytest.fixture(scope="module")
def exported(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``sparring export swe-instances`` of the store: the folder holding instances.jsonl."""
    out = tmp_path_factory.mktemp("export")
    run = sparring(home, "export", "swe-instances", "--out", str(out), "--repo", REPO, "--no-dataset")
    assert run.returncode == 0, run.stderr
    return out


def rows(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "instances.jsonl").read_text().splitlines()]


@pytest.mark.timeout(600)
def test_the_export_has_swe_bench_fields_with_swe_bench_meanings(home: Path, exported: Path, tmp_path: Path) -> None:
    instances = rows(exported)
    assert len(instances) == 3
    for row in instances:
        assert all(isinstance(row[k], str) for k in SWE_BENCH_FIELDS), row.keys()
        assert row["repo"] == "jpvanhal/inflection" and row["split"] == "train" and row["version"] == "0.5.1"
        assert row["instance_id"].startswith("jpvanhal__inflection-")
        assert len(row["base_commit"]) == 40 and len(row["environment_setup_commit"]) == 40
        assert row["base_commit"] != row["environment_setup_commit"]  # the buggy state, not the release
        assert row["created_at"].endswith("Z") and row["hints_text"] == ""
        fail_to_pass, pass_to_pass = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
        assert fail_to_pass and pass_to_pass and not set(fail_to_pass) & set(pass_to_pass)
        # the symptom, as an issue reports it: a failing test's report, never the hidden tests' diff
        statement = row["problem_statement"]
        assert "jpvanhal/inflection" in statement and "Error" in statement
        assert fail_to_pass[0].split("::")[1].split("[")[0] in statement
        assert "@@" not in statement and "+++ " not in statement and row["test_patch"] not in statement
        assert " at 0x" not in statement  # object addresses differ between runs
    assert len({r["base_commit"] for r in instances}) == 3
    # the same bugs give the same commits and statements: the export is reproducible
    again = tmp_path / "again"
    run = sparring(home, "export", "swe-instances", "--out", str(again), "--repo", REPO, "--no-dataset")
    assert run.returncode == 0, run.stderr
    assert rows(again) == instances


@pytest.mark.timeout(600)
def test_patch_and_test_patch_apply_to_base_commit_in_the_image(exported: Path) -> None:
    from sparring.containers.sandbox import Sandbox

    row = rows(exported)[0]
    fail_to_pass = json.loads(row["FAIL_TO_PASS"])
    tests = " ".join(shlex.quote(t) for t in fail_to_pass + json.loads(row["PASS_TO_PASS"])[:20])
    pytest_run = f"python -m pytest -p no:cacheprovider -q -o addopts= {tests}"
    with Sandbox.create(row["image"]) as box:
        box.put_file("/tmp/patch.diff", row["patch"])
        box.put_file("/tmp/test_patch.diff", row["test_patch"])
        r = box.exec(f"git checkout -q {row['base_commit']} && git rev-list --all", timeout=60)
        assert r.ok and r.stdout.split() == [row["base_commit"]], r.output  # no commit holds the fix
        files = " ".join(json.loads(row["test_files"]))
        weakened = box.exec(f"python -m pytest -p no:cacheprovider -q -o addopts= {files}", timeout=300)
        assert weakened.ok, weakened.output  # the tests at base_commit miss the bug
        assert box.exec("git apply /tmp/test_patch.diff", timeout=60).ok
        buggy = box.exec(pytest_run, timeout=300)
        assert not buggy.ok and f"{len(fail_to_pass)} failed" in buggy.stdout, buggy.output
        assert box.exec("git apply /tmp/patch.diff", timeout=60).ok
        fixed = box.exec(pytest_run, timeout=300)
        assert fixed.ok, fixed.output


def predictions(path: Path, patches: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"instance_id": i, "model_name_or_path": "gold", "model_patch": p}) + "\n"
                            for i, p in patches))  # fmt: skip
    return path


@pytest.mark.timeout(600)
def test_predictions_are_graded_gold_solved_and_empty_unsolved(home: Path, exported: Path, tmp_path: Path) -> None:
    a, b, c = rows(exported)
    preds = predictions(
        tmp_path / "preds.jsonl",
        [(a["instance_id"], a["patch"]), (b["instance_id"], ""), (c["instance_id"], a["patch"])],  # a's fix: not c's
    )
    out = tmp_path / "graded"
    args = ["--predictions", str(preds), "--instances", str(exported / "instances.jsonl"), "--out", str(out)]
    run = sparring(home, "eval", "swe", *args)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1])["solve_rate"] == pytest.approx(1 / 3)
    report = json.loads((out / "report.json").read_text())
    assert report["model"] == "gold" and report["instances"] == [a["instance_id"], b["instance_id"], c["instance_id"]]
    assert report["split"] == "train"  # the instances' split, not --split's default
    by_id = {r["id"]: r for r in report["records"]}
    assert by_id[a["instance_id"]]["solved"] and by_id[a["instance_id"]]["changed_files"] == ["inflection/__init__.py"]
    assert not by_id[b["instance_id"]]["solved"] and by_id[b["instance_id"]]["reason"] == "no_change"
    assert not by_id[c["instance_id"]]["solved"] and by_id[c["instance_id"]]["reason"] == "patch_does_not_apply"
    assert (out / "report.md").is_file() and (out / "records.jsonl").read_text().count("\n") == 3
    # without --instances the ids are looked up in the bug stores; a patch that makes pytest report
    # every test passed is graded by the env's rules too: its conftest.py is not carried
    alone = predictions(tmp_path / "alone.jsonl", [(b["instance_id"], b["patch"]), (c["instance_id"], CONFTEST)])
    run = sparring(home, "eval", "swe", "--predictions", str(alone), "--out", str(tmp_path / "alone"))
    assert run.returncode == 0 and json.loads(run.stdout.splitlines()[-1])["solve_rate"] == 0.5, run.stderr
    forged = json.loads((tmp_path / "alone" / "report.json").read_text())["records"][1]
    assert forged["id"] == c["instance_id"] and not forged["solved"] and forged["reason"] == "tests_fail"
    assert forged["changed_files"] == ["conftest.py"] and forged["outcome"]["ignored"] == ["conftest.py"]
    # a malformed file or an unknown instance is one sentence, and the finished evaluation stays as it was
    records = (out / "records.jsonl").read_text()
    bad = tmp_path / "bad.jsonl"
    cases = [
        ('{"instance_id": "x", "model_patch": ""\n', "line 1 of"),
        ('{"instance_id": "x", "model_patch": ""}\n', "not a SWE-bench prediction (no model_name_or_path string)"),
        ("[1, 2]", "item 1 of"),
        (json.dumps({"instance_id": "jpvanhal__inflection-000", "model_name_or_path": "m", "model_patch": ""}),
         "1 prediction(s) name instances not in"),
        (preds.read_text() + preds.read_text().splitlines()[0] + "\n", f"predicts {a['instance_id']} a second time"),
    ]  # fmt: skip
    for text, says in cases:
        bad.write_text(text)
        run = sparring(home, "eval", "swe", "--predictions", str(bad), "--instances", str(exported / "instances.jsonl"),
                       "--out", str(out))  # fmt: skip
        assert run.returncode == 2, (text, run.stderr)
        assert says in run.stderr and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    run = sparring(home, "eval", "swe", "--predictions", str(preds), "--model", "scripted:oracle", "--out", str(out))
    assert run.returncode == 2 and "leave out --model" in run.stderr, run.stderr
    assert (out / "records.jsonl").read_text() == records


@pytest.mark.timeout(600)
def test_the_integrations_page_example_runs_as_written(home: Path, tmp_path: Path) -> None:
    page = (Path(__file__).parents[2] / "docs" / "integrations.md").read_text()
    found = re.search(r"<!-- swe-bench-example -->\n```bash\n(.*?)```", page, re.S)
    assert found, "docs/integrations.md lost its SWE-bench example"
    env = {**os.environ, "SPARRING_HOME": str(home), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    run = subprocess.run(["bash", "-e", "-c", found[1]], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1])["solve_rate"] == 1.0  # every gold patch solves its instance
    report = json.loads((tmp_path / "evals" / "swe-gold" / "report.json").read_text())
    assert report["model"] == "gold" and len(report["records"]) == 3


@pytest.mark.timeout(300)
def test_a_bug_whose_repository_image_is_gone_is_one_sentence(home: Path, tmp_path: Path) -> None:
    other = tmp_path / "home"
    shutil.copytree(home / "bugs", other / "bugs")
    for path in (other / "bugs" / REPO).glob("*/validation.json"):
        path.write_text(json.dumps(json.loads(path.read_text()) | {"image": "sparring-repo/inflection:0.0.0"}))
    run = sparring(other, "export", "swe-instances", "--out", str(tmp_path / "out"), "--no-dataset")
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert (
        "sparring-repo/inflection:0.0.0 that bug" in run.stderr
        and "run `sparring build repos inflection`" in run.stderr
    )
    assert not (tmp_path / "out").exists()
