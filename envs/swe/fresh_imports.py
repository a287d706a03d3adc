"""What a user's fresh import leaves on a package: the AST check's measure of a submodule read as an attribute.

Importing a submodule sets it on its package, and the test runner imports many (pytest imports
``importlib.metadata``, which imports ``email.message``), so ``hasattr(email, "message")`` is true in every
test run and false after a user's ``import email``. A package of the standard library or of the image's
packages (pytest's own, which a user need not have) may be read for a submodule only where the file's own
imports load it. Which ones they load is measured, not guessed: the file's imports are run in a fresh
interpreter (``python -I -S``, the host's ``sys.path`` given explicitly), once per set of imports, and the
attributes they leave on every package are read back, with every package another module holds under an
attribute (``shutil.collections``, ``typing.stdlib_re``): read through that module, it is the same package.
Only standard-library and listed foreign modules are imported there, never one whose import does something
(``antigravity``).

Example::

    fresh_attributes(("email",))          # frozenset({"email.charset", ..., "email.message_from_string"})
    held_packages(("shutil",))            # {"shutil.collections": "collections", ...}
    submodules("email")                   # frozenset({"base64mime", ..., "message", "mime", "utils"})
"""

from __future__ import annotations

import importlib.util
import json
import pkgutil
import subprocess
import sys
from functools import lru_cache

__all__ = ["fresh_attributes", "held_packages", "submodules"]

#: Run in the fresh interpreter: import each module named, then list every package's attributes, and every
#: package held by a module under an attribute that does not name it as that module's submodule.
_PROBE = """
import json, sys
sys.path[:] = json.loads(sys.argv[1])
for name in json.loads(sys.argv[2]):
    try:
        __import__(name)
    except BaseException:
        pass
modules = list(sys.modules.items())
print(json.dumps([sorted(f"{n}.{a}" for n, m in modules if hasattr(m, "__path__") for a in list(vars(m))),
                  {f"{n}.{a}": v.__name__ for n, m in modules for a, v in list(vars(m).items())
                   if type(v) is type(sys) and hasattr(v, "__path__") and v.__name__ != f"{n}.{a}"}]))
"""


def fresh_attributes(modules: tuple[str, ...]) -> frozenset[str]:
    """Every ``package.attribute`` present after a fresh interpreter imports ``modules`` in order (empty where
    the probe fails: then no submodule counts as loaded)."""
    return _probe(modules)[0]


def held_packages(modules: tuple[str, ...]) -> dict[str, str]:
    """``module.attribute`` -> package, for every package a module holds under an attribute other than its own
    submodule's name, after a fresh interpreter imports ``modules`` (empty where the probe fails)."""
    return dict(_probe(modules)[1])


@lru_cache(maxsize=256)
def _probe(modules: tuple[str, ...]) -> tuple[frozenset[str], tuple[tuple[str, str], ...]]:
    path = [p for p in sys.path if p]  # not the working directory: only the host's installed modules
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _PROBE, json.dumps(path), json.dumps(list(modules))],
            capture_output=True, timeout=60, check=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        attributes, held = json.loads(done.stdout)
        return frozenset(attributes), tuple(sorted(held.items()))
    except (OSError, subprocess.SubprocessError, ValueError):
        return frozenset(), ()


@lru_cache(maxsize=1024)
def submodules(package: str) -> frozenset[str]:
    """The names of ``package``'s submodules (found on its ``__path__``, none imported); empty for a module
    that is no package, or none there is."""
    try:
        spec = importlib.util.find_spec(package)  # imports the parents only (``xml`` for ``xml.etree``)
    except (ImportError, ValueError, AttributeError):
        return frozenset()
    locations = spec.submodule_search_locations if spec is not None else None
    if not locations:
        return frozenset()
    return frozenset(m.name for m in pkgutil.iter_modules(list(locations)))
