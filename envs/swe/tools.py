"""The SWE agents' tools over a sandbox: ``bash``, ``view``, ``str_replace``, ``create``.

:class:`SandboxTools` is a mixin of :class:`~sparring.envs.core.TextEnv` subclasses: its methods
are :func:`~sparring.envs.tools.tool` methods, so they become JSON-schema tools and plain typed
methods at once. Each env adds its own ``submit``. Everything runs inside the episode's sandbox
(``self._sandbox``) with the rights of the sandbox user: ``bash`` runs as that user, and the file
tools read and write as that user too (``as_agent``), so a file ``bash`` may not touch (``/etc/shadow``,
the system's Python) is refused to ``view`` and ``create`` as well. A failing tool answers with an
error observation, never an exception, and nothing the agent writes is read back by grading.
"""

from __future__ import annotations

import posixpath
from shlex import quote
from typing import TYPE_CHECKING

from sparring.envs.tools import tool

if TYPE_CHECKING:
    from sparring.containers.pools import PoolSet
    from sparring.containers.sandbox import Sandbox

__all__ = ["REPO_DIR", "SandboxTools", "format_exec"]

#: Where the repository lives inside every sandbox.
REPO_DIR = "/repo"

#: Characters of tool output shown to the model; the middle of longer output is cut.
OUTPUT_LIMIT = 12_000


def _clip(text: str, limit: int = OUTPUT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters cut ...]\n{text[-half:]}"


def format_exec(result: object) -> str:
    """An :class:`ExecResult` as the observation a model sees: output, then exit status."""
    stdout = getattr(result, "stdout", "") or ""
    stderr = getattr(result, "stderr", "") or ""
    out = stdout + (("\n" if stdout and not stdout.endswith("\n") else "") + stderr if stderr else "")
    if getattr(result, "timed_out", False):
        status = "[command timed out and was killed]"
    else:
        status = f"[exit code {getattr(result, 'exit_code', None)}]"
    return f"{_clip(out)}\n{status}" if out else status


class SandboxTools:
    """Tools that act on ``self._sandbox`` (a started :class:`Sandbox` holding the repo at /repo)."""

    _sandbox: Sandbox | None
    _pools: PoolSet
    command_timeout: float = 120.0

    def _release(self) -> None:
        """Close the episode's container, if any."""
        if self._sandbox is not None:
            try:
                self._sandbox.close()
            finally:
                self._sandbox = None

    def close(self) -> None:
        """Release the episode's container and the pools (idempotent)."""
        self._release()
        self._pools.close()
        super().close()  # type: ignore[misc]

    def _box(self) -> Sandbox:
        if self._sandbox is None:
            raise RuntimeError("no sandbox: call reset() first")
        return self._sandbox

    @staticmethod
    def _path(path: str) -> str:
        path = path.strip()
        return posixpath.normpath(path if path.startswith("/") else posixpath.join(REPO_DIR, path))

    def _read(self, path: str) -> str | None:
        """The text of a file read as the sandbox user, or None where it cannot be read."""
        text, _ = self._read_text(path)
        return text

    def _read_text(self, path: str) -> tuple[str | None, str]:
        """The text of a file read as the sandbox user, or None and the error observation saying why."""
        full = self._path(path)
        try:
            return self._box().get_file(full, as_agent=True).decode("utf-8", errors="replace"), ""
        except Exception as e:  # no such file, not the agent's to read, a dead container
            return None, _file_error("read", full, e)

    def _write(self, path: str, text: str) -> str | None:
        """Write a file as the sandbox user (folders created); returns an error message or None."""
        full = self._path(path)
        try:
            self._box().put_file(full, text.encode(), as_agent=True)
        except Exception as e:  # not the agent's to write, a folder in the way, a dead container
            return _file_error("write", full, e)
        return None

    @tool(example={"command": "python -m pytest -x -q"})
    def bash(self, command: str) -> str:
        """Run a bash command in the repository (/repo) and show its output and exit code.

        Args:
            command: The command line; it is killed after the command timeout.
        """
        if not command.strip():
            return "Error: empty command. Use: <bash>ls</bash>"
        return format_exec(self._box().exec(command, timeout=self.command_timeout, workdir=REPO_DIR))

    @tool(example={"path": "setup.py"})
    def view(self, path: str, start_line: int = 1, num_lines: int = 100) -> str:
        """Show a window of a file with line numbers, or list a directory.

        Args:
            path: File or directory, absolute or relative to /repo.
            start_line: First line to show (1-based).
            num_lines: How many lines to show (at most 400).
        """
        full = self._path(path)
        r = self._box().exec(f"test -d {quote(full)} && ls -la {quote(full)}", timeout=30)
        if r.ok:
            return _clip(r.stdout)
        text, error = self._read_text(full)
        if text is None:
            return error
        lines = text.splitlines()
        start = max(1, int(start_line))
        count = max(1, min(int(num_lines), 400))
        window = lines[start - 1 : start - 1 + count]
        if not window:
            return f"{full} has {len(lines)} lines; start_line {start} is past the end."
        width = len(str(start + len(window) - 1))
        body = "\n".join(f"{i:>{width}}\t{line}" for i, line in enumerate(window, start))
        more = f"\n[lines {start}-{start + len(window) - 1} of {len(lines)}]"
        return _clip(body) + more

    @tool(example={"path": "src/pkg/util.py", "old_str": "    return a - b\n", "new_str": "    return a + b\n"})
    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        """Replace the one exact occurrence of old_str in a file with new_str.

        Args:
            path: File, absolute or relative to /repo.
            old_str: Exact text to replace; it must occur exactly once (include surrounding lines to make it unique).
            new_str: Replacement text.
        """
        full = self._path(path)
        text, problem = self._read_text(full)
        if text is None:
            return problem
        if not old_str:
            return "Error: old_str is empty; give the exact text to replace."
        count = text.count(old_str)
        if count == 0:
            return f"Error: old_str was not found in {full}; view the file and copy the text exactly."
        if count > 1:
            lines = [text[:m].count("\n") + 1 for m in _find_all(text, old_str)]
            return f"Error: old_str occurs {count} times in {full} (lines {lines}); include more context."
        error = self._write(full, text.replace(old_str, new_str, 1))
        if error:
            return error
        line = text[: text.index(old_str)].count("\n") + 1
        return f"Edited {full}: replaced 1 occurrence at line {line}."

    # One example for both roles, shown in every tool-call error: a solver's scratch script, not the
    # injector's artifact folder (its prompt names /tmp/bug itself).
    @tool(example={"path": "/tmp/check.py", "content": "from pkg.util import add\nprint(add(2, 3))\n"})
    def create(self, path: str, content: str) -> str:
        """Create a file (or overwrite it) with the given content.

        Args:
            path: File, absolute or relative to /repo; missing folders are created.
            content: The whole file.
        """
        full = self._path(path)
        error = self._write(full, content)
        return error or f"Wrote {full} ({len(content.splitlines())} lines)."


def _file_error(verb: str, full: str, error: Exception) -> str:
    """The observation for a file tool that failed: one sentence an agent can act on."""
    if isinstance(error, PermissionError):
        return f"Error: permission denied: {full} (the tools, like bash, run as a non-root user)."
    if isinstance(error, FileNotFoundError) and verb == "read":
        return f"Error: {full} does not exist."
    if isinstance(error, IsADirectoryError):
        return f"Error: {full} is a directory."
    return f"Error: cannot {verb} {full}: {error}"


def _find_all(text: str, sub: str) -> list[int]:
    found, i = [], text.find(sub)
    while i >= 0:
        found.append(i)
        i = text.find(sub, i + 1)
    return found
