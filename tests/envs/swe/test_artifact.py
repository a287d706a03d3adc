"""The bug artifact model, its files, and the unified-diff helpers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparring.envs.swe.bugs.artifact import BugArtifact, diff_files, file_diff, reverse_diff, split_diff
from sparring.envs.swe.rewards import SWERewards, injector_reward, solve_rate, solver_reward


def _artifact() -> BugArtifact:
    return BugArtifact(
        test_script="pytest tests/test_a.py\n",
        test_files=["tests/test_a.py"],
        bug_inject_diff=file_diff("pkg/a.py", "x = 1\n", "x = 2\n"),
        test_weaken_diff=file_diff("tests/test_a.py", "assert x == 1\n", "assert True\n"),
        repo="demo",
        version="1.0",
    )


def test_files_roundtrip(tmp_path: Path) -> None:
    art = _artifact()
    files = art.files()
    assert set(files) == {"test_script.sh", "test_files.txt", "bug_inject.diff", "test_weaken.diff"}
    again = BugArtifact.from_files(files | {"test_files.txt": "# oracle\n./tests/test_a.py\n\ntests/test_a.py\n"})
    assert again.test_files == ["tests/test_a.py"] and again.test_parser is None
    loaded = BugArtifact.load(art.save(tmp_path / "bug"))
    assert loaded == art and loaded.bug_id == art.bug_id
    with pytest.raises(ValueError, match="bug_inject.diff"):
        BugArtifact.from_files({k: v for k, v in files.items() if k != "bug_inject.diff"})


def test_split_and_reverse_apply_with_git(tmp_path: Path) -> None:
    old_a = "".join(f"line {i}\n" for i in range(20))
    new_a = old_a.replace("line 3\n", "-- line 3 changed\n").replace("line 15\n", "")
    diff = file_diff("pkg/a.py", old_a, new_a) + file_diff("pkg/b.py", "b\n", "c\n")
    assert diff_files(diff) == ["pkg/a.py", "pkg/b.py"]
    assert split_diff(diff)["pkg/b.py"].startswith("--- a/pkg/b.py")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/a.py").write_text(old_a)
    (tmp_path / "pkg/b.py").write_text("b\n")
    (tmp_path / "p.diff").write_text(diff)
    subprocess.run(["git", "apply", "p.diff"], cwd=tmp_path, check=True)
    assert (tmp_path / "pkg/a.py").read_text() == new_a
    (tmp_path / "r.diff").write_text(reverse_diff(diff))
    subprocess.run(["git", "apply", "r.diff"], cwd=tmp_path, check=True)
    assert (tmp_path / "pkg/a.py").read_text() == old_a and (tmp_path / "pkg/b.py").read_text() == "b\n"


def test_reverse_diff_of_lines_that_read_like_file_headers(tmp_path: Path) -> None:
    # A removed "-- x" line shows as "--- x" and an added "++ y" line as "+++ y": content, not headers.
    old = "a = 1\n-- removed SQL comment\nb = 2\n"
    new = "a = 1\n++ added line\nb = 2\n"
    diff = file_diff("q.sql", old, new)
    assert "--- removed SQL comment\n+++ added line\n" in diff
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "q.sql").write_text(new)
    (tmp_path / "r.diff").write_text(reverse_diff(diff))
    subprocess.run(["git", "apply", "--check", "r.diff"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply", "r.diff"], cwd=tmp_path, check=True)
    assert (tmp_path / "q.sql").read_text() == old
    assert reverse_diff(reverse_diff(diff)) == diff


def test_git_diff_with_preamble_splits() -> None:
    diff = (
        "diff --git a/x.py b/x.py\nindex 1..2 100644\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
        "diff --git a/y.py b/y.py\nnew file mode 100644\n--- /dev/null\n+++ b/y.py\n@@ -0,0 +1 @@\n+z\n"
    )
    parts = split_diff(diff)
    assert list(parts) == ["x.py", "y.py"]
    assert parts["y.py"].startswith("diff --git a/y.py") and "new file mode" in parts["y.py"]
    assert "deleted file mode" in reverse_diff(parts["y.py"])


def test_rewards() -> None:
    assert solver_reward(True) == 1.0 and solver_reward(False) == -1.0
    assert injector_reward(False, None) == -1.0
    assert injector_reward(True, 0.0) == injector_reward(True, 1.0) == -0.8
    assert injector_reward(True, 0.5) == pytest.approx(1 - 1.8 * 0.5)
    custom = SWERewards(alpha=0.5, injector_invalid=-2.0)
    assert injector_reward(True, 1.0, custom) == -0.5 and injector_reward(False, 0.3, custom) == -2.0
    assert solve_rate([True, False, False, False]) == 0.25
    with pytest.raises(ValueError):
        injector_reward(True, 1.5)
