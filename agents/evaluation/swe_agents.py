"""Scripted agents of the SWE judge set: a repair that looks like one and is none, and a rule judge.

* :class:`DecoyFixAgent` (SWE solver, ``scripted:decoy-fix``): the oracle's moves without its fix. It
  ``git apply``-s a diff at the bug's own lines, as the oracle does, but the diff only adds a comment
  above the buggy code, then submits "applied the fix". The repository's file changed, the visible
  tests pass (the revealing ones are weakened), the bug stays in: never solved, by construction. It is
  the attempt a judge must see through by reading the change, where "some file changed" or "the visible
  tests pass" says solved.
* :class:`VisibleTestsJudgeAgent` (SWE judge, ``scripted:visible-tests``): a rule over what the judge env
  shows, never the task's hidden parts: "not solved" when the attempt changed no file, else one
  ``run_tests`` of the task's test files on the attempt's final tree, "solved" if that run exits 0.
  Every turn is assessed neutral. It is the judge a policy gets for free from the sandbox, so a
  trained judge has to beat it.
"""

from __future__ import annotations

import re
from typing import Any

from sparring.agents.scripted import _call

__all__ = ["DecoyFixAgent", "VisibleTestsJudgeAgent", "decoy_diff"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
#: What the decoy writes above the buggy code.
DECOY_COMMENT = "fixed: this case is handled here"


def decoy_diff(inject_diff: str, comment: str = DECOY_COMMENT) -> str:
    """A diff of the buggy tree that adds ``# comment`` above the first hunk's changed code and changes nothing else.

    The first hunk of the bug's ``bug_inject.diff`` holds the buggy tree's lines around the bug (its
    context and added lines); they become the decoy's context, with the comment inserted where the
    bug's change begins, indented like the changed code.

    Example:
        >>> bug = "--- a/m.py\\n+++ b/m.py\\n@@ -1,2 +1,2 @@\\n def f():\\n-    return 1\\n+    return 2\\n"
        >>> print(decoy_diff(bug), end="")
        --- a/m.py
        +++ b/m.py
        @@ -1,2 +1,3 @@
         def f():
        +    # fixed: this case is handled here
             return 2
    """
    lines = inject_diff.splitlines()
    path = next(line[4:].strip() for line in lines if line.startswith("+++ "))
    start = next(i for i, line in enumerate(lines) if _HUNK.match(line))
    m = _HUNK.match(lines[start])
    assert m is not None
    old_left, new_left = int(m.group(2) or 1), int(m.group(4) or 1)
    kept: list[str] = []  # the buggy tree's lines of the hunk
    at: int | None = None  # where the bug's change begins among them
    changed = ""  # its first changed line (buggy or removed), whose indentation the comment takes
    for line in lines[start + 1 :]:
        if old_left <= 0 and new_left <= 0:
            break
        mark, text = line[:1], line[1:]
        if mark in ("+", "-") and at is None:
            at, changed = len(kept), text
        if mark == "-":
            old_left -= 1
            continue
        new_left -= 1
        old_left -= mark != "+"
        kept.append(text)
    at = len(kept) if at is None else at
    indent = changed[: len(changed) - len(changed.lstrip())]
    body = [" " + t for t in kept[:at]] + [f"+{indent}# {comment}"] + [" " + t for t in kept[at:]]
    first = int(m.group(3))
    old_path = "a/" + path[2:] if path.startswith("b/") else path
    return f"--- {old_path}\n+++ {path}\n@@ -{first},{len(kept)} +{first},{len(kept) + 1} @@\n" + "\n".join(body) + "\n"


class DecoyFixAgent:
    """Apply a comment-only diff at the bug's lines with ``git apply`` (the oracle's move), then submit."""

    name = "decoy-fix"

    def __init__(self) -> None:
        """No state beyond the current episode's planned actions."""
        self._actions: list[str] = []

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Plan the episode from the task's bug."""
        task = info.get("task") or {}
        if "artifact" not in task:
            raise ValueError("the decoy repair needs a repair task with a bug artifact")
        diff = decoy_diff(task["artifact"]["bug_inject_diff"])
        command = f"git apply --whitespace=nowarn <<'SPARRING_FIX'\n{diff}SPARRING_FIX"
        self._actions = [_call("bash", command=command), _call("submit", summary="applied the fix")]

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The next planned action (the last one again if the env asks for more)."""
        return self._actions.pop(0) if len(self._actions) > 1 else self._actions[0]


_TURNS = re.compile(r"assess each of its (\d+) turn")
_NO_CHANGE = re.compile(r"final repair: changed files: none\b")
_EXIT = re.compile(r"^\[exit code (-?\d+)\]$", re.MULTILINE)


class VisibleTestsJudgeAgent:
    """Judge by the visible tests: no changed file is "not solved"; else run the task's tests, exit 0 is "solved"."""

    name = "visible-tests"

    def __init__(self) -> None:
        """No state beyond the current judgement's turn count and progress."""
        self._turns = 0
        self._changed = False
        self._ran = False

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Read the attempt's turn count and whether it changed a file, from the prompt alone."""
        found = _TURNS.search(observation)
        self._turns = int(found.group(1)) if found else 0
        self._changed = not _NO_CHANGE.search(observation)
        self._ran = False

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """Run the task's test files once (if the attempt changed a file), then judge by that run's exit status."""
        if self._changed and not self._ran:
            self._ran = True
            return _call("run_tests", tests="")
        statuses = _EXIT.findall(observation) if self._ran else []
        passed = bool(statuses) and statuses[-1] == "0"  # the run's own status, not one its output printed
        verdict = "solved" if passed else "not solved"
        return _call("judge", verdict=verdict, assessments=" ".join(["neutral"] * self._turns))
