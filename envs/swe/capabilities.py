"""Source checks on an AST: the capabilities code added by a repair may not use.

The graded tests import the solver's code into the pytest process; code that can reach the test
machinery (the garbage collector, frames, the module table, pytest itself), the process around it
(exit hooks, signals, fork/setsid/kill, raw descriptors) or code that is not in the source (exec,
dynamic import, pickles) could make a failing run look passed from inside. A bug fix in a library
needs none of that, so grading refuses a repair whose ADDED code uses one.

The check parses the file as Python does (``ast.parse`` on the bytes, so a coding cookie decodes
the same way for the check as for the import) and resolves names, not text: import aliases
(``import os as o``), ``from`` imports, modules reached as attributes of other modules
(``shutil.os.fork`` is ``os.fork``), ``getattr`` with a constant name, and string annotations
(which ``typing.get_type_hints`` would evaluate). What cannot be resolved statically is refused
by kind instead: ``getattr``/``setattr`` with a computed name or passed as a value, a listed module
passed as a value, ``globals()``/``vars()``, namespace and frame attributes such as ``__dict__``
or ``f_globals``, and a module reached as an attribute of an object the check does not know (``x.sys``,
``x._sys``). A ``str.format`` template is read as the attribute reads its fields make
(``'{0._sys.modules}'`` reads ``_sys`` and ``modules`` on an unknown object), where the template is a
literal, literals joined by ``+`` or repeated by ``*``, or a function's local name assigned only such;
``format``, ``format_map`` or a logging format of style ``{`` on a template the check cannot read is
refused, and so is ``getattr`` with a constant name the check refuses as an attribute of an unknown object.
The list itself is data (``capabilities.toml``, overridable per repository).

Only what the repair adds counts: a use is refused when the new file has more uses with the same
(capability, what, line text, enclosing definitions' qualified name) than the file the solver started
from, unless the bug removed that very line (restoring it is the fix). Moving existing code within its
function or moving the function is not refused; duplicating it is, and so is moving a use into another
definition, where the same text reads other names (a forwarding ``getattr(self.x, name)`` moved into a
new helper is a getattr of anything).

Example::

    caps = load_capabilities("inflection")
    uses = added_uses("pkg/core.py", new_bytes, old_bytes, restored_lines, caps)
    # ["pkg/core.py:12: import gc (gc): import gc"]
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from sparring import pyast, sparring_home
from sparring.envs.swe.capability_finder import CapabilityFinder
from sparring.envs.swe.capability_index import Capability, CapabilityIndex, CapabilityUse, OracleNames
from sparring.envs.swe.fresh_imports import TaskImage

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["Capability", "CapabilityUse", "added_uses", "coding_problem", "find_uses", "load_capabilities"]

_DATA = Path(__file__).with_name("capabilities.toml")
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_BLANK_OR_COMMENT = re.compile(rb"^[ \t\f]*(#.*)?\r?$")


def _read_tables(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        return tomllib.load(f)


@lru_cache(maxsize=1)
def _package_tables() -> dict[str, Any]:
    return _read_tables(_DATA)


def load_capabilities(repo: str = "") -> list[Capability]:
    """The capabilities refused in repairs of ``repo``.

    The package's ``capabilities.toml``, then ``$SPARRING_HOME/capabilities.toml`` where it exists
    (a ``[capabilities.NAME]`` table there replaces the package's; ``[repos.NAME] allow`` lists add
    up), minus the capabilities the repository's ``allow`` list names.
    """
    tables = dict(_package_tables().get("capabilities", {}))
    repos: dict[str, Any] = {k: dict(v) for k, v in _package_tables().get("repos", {}).items()}
    user = sparring_home() / "capabilities.toml"
    if user.is_file():
        extra = _read_tables(user)
        tables.update(extra.get("capabilities", {}))
        for name, table in extra.get("repos", {}).items():
            entry = repos.setdefault(name, {})
            entry["allow"] = [*entry.get("allow", ()), *table.get("allow", ())]
    allowed = set(repos.get(repo, {}).get("allow", ())) if repo else set()
    return [Capability.from_table(name, t) for name, t in tables.items() if name not in allowed]


def processes_allowed(repo: str) -> bool:
    """Whether ``repo``'s ``allow`` list names the ``processes`` capability: its code may start processes in a test run.

    The harness refuses the repository's code to start a process otherwise (``harness_guard.py``).
    """
    return not any(c.name == "processes" for c in load_capabilities(repo))


def declared_encoding(source: bytes) -> str | None:
    """The encoding a PEP 263 coding cookie declares (normalised), or None."""
    for i, line in enumerate(source.split(b"\n", 2)[:2]):
        m = _COOKIE.match(line)
        if m:
            return m.group(1).decode("ascii", "replace").lower().replace("_", "-")
        if i == 0 and not _BLANK_OR_COMMENT.match(line):
            break  # the cookie may sit on line 2 only below a blank or comment line
    return None


def _is_utf8(encoding: str) -> bool:
    return encoding in ("utf-8", "utf8") or encoding.startswith("utf-8-")


def coding_problem(new: bytes, old: bytes | None) -> str | None:
    """Why an added or changed source is refused for its encoding, or None.

    Added sources must be UTF-8 with no other coding cookie; a file that already declared another
    encoding may keep that same declaration.
    """
    encoding = declared_encoding(new)
    if encoding is not None and not _is_utf8(encoding):
        if old is not None and declared_encoding(old) == encoding:
            return None
        return f"declares the source encoding {encoding!r}; added Python sources must be UTF-8"
    try:
        new.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
    except UnicodeDecodeError:
        return "is not valid UTF-8"
    return None


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def find_uses(
    source: bytes,
    path: str,
    capabilities: list[Capability],
    oracle: OracleNames | None = None,
    image: TaskImage | None = None,
) -> list[CapabilityUse]:
    """Every use of ``capabilities`` in a Python source (and, given ``oracle``, every reach for those tests), with
    what a fresh import leaves measured in ``image`` (None: in this process).

    Raises:
        SyntaxError: The source does not parse (``ValueError`` for null bytes, as Python's own).
    """
    tree = pyast.parse(source, filename=path)
    try:
        text = source.decode(declared_encoding(source) or "utf-8", errors="replace")
    except LookupError:  # ast.parse accepted it, so this does not happen; the lines are only for show
        text = source.decode("utf-8", errors="replace")
    # Lines as Python's tokenizer numbers them (\n, \r\n, \r): str.splitlines also breaks at U+2028, \x0c and
    # others, which would give every later use the text of the line above it
    finder = CapabilityFinder(CapabilityIndex(capabilities, image), path, _LINE_BREAK.split(text))
    finder.oracle = oracle
    finder.prepare(tree)
    finder.visit(tree)
    return sorted(set(finder.uses), key=lambda u: (u.line, u.capability, u.what))


def added_uses(
    path: str,
    new: bytes,
    old: bytes | None,
    restored: Iterable[str],
    capabilities: list[Capability],
    oracle: Iterable[str] = (),
    image: TaskImage | None = None,
) -> list[str]:
    """The capability uses the repair added to ``path``, as refusal lines (empty: nothing refused).

    Args:
        path: The file (repository-relative).
        new: Its content after the repair.
        old: Its content when the solver started (None for a new file).
        restored: Lines (stripped) the bug removed from this file; uses on them are allowed.
        capabilities: From :func:`load_capabilities`.
        oracle: The bug's oracle test files (repository-relative): importing one of them, or naming
            one in a string, is refused too (``oracle_tests``).
        image: The image the code runs in, whose interpreter a fresh import is measured in (``loaded_submodules``:
            :mod:`~sparring.envs.swe.fresh_imports`); None only where none is known (then this process's).
    """
    names = OracleNames(oracle)
    problem = coding_problem(new, old)
    if problem:
        return [f"{path}: {problem}"]
    try:
        uses = find_uses(new, path, capabilities, names, image)
    except (SyntaxError, ValueError):
        # Python cannot compile it either, so it runs nothing; that holds when the host's grammar
        # accepts at least what the image's Python 3.11 does, else the harness cannot vouch for it.
        return [] if sys.version_info >= (3, 11) else [f"{path}: could not be parsed by the harness"]
    except (RecursionError, MemoryError):
        return [f"{path}: too deeply nested for the harness to check"]
    before: Counter[tuple[str, str, str, str]] = Counter()
    if old is not None:
        try:
            before.update(u.key for u in find_uses(old, path, capabilities, names, image))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            pass  # a start file that does not parse allows nothing
    restored = set(restored)
    refused = []
    for use in uses:
        if before[use.key] > 0:
            before[use.key] -= 1
        elif not all(part in restored for part in use.text.split("\n")):
            refused.append(str(use))
    return refused
