"""What a user's fresh import leaves on a package: the AST check's measure of a submodule read as an attribute.

Importing a submodule sets it on its package, and the test runner imports many (pytest imports
``importlib.metadata``, which imports ``email.message``), so ``hasattr(email, "message")`` is true in every
test run and false after a user's ``import email``. A package of the standard library or of the image's
packages (pytest's own, which a user need not have) may be read for a submodule only where the file's own
imports load it. Which ones they load is measured, not guessed: the file's imports are run in a fresh
interpreter (``python -I -S``), once per set of imports, and the attributes they leave on every package are read
back, with every package another module holds under an attribute (``shutil.collections``, ``typing.stdlib_re``):
read through that module, it is the same package. Only standard-library and listed foreign modules are imported
there, never one whose import does something (``antigravity``).

The interpreter measured is the one the code runs in: given a :class:`TaskImage`, the task image's, in a container
of it (no network, as ``nobody``, its ``sys.path`` the image's standard library and site-packages, never ``/repo``
or the working directory), which also lists the image's standard-library names and every package's submodules
(read from the file system, nothing imported); each answer is kept per image id (and set of imports), so a
container starts once for each. This process's interpreter is measured only where no image is given (the AST
check's unit tests, without Docker). Where the image cannot be probed (no engine, no such image) no submodule
counts as loaded, as where any probe fails: the check refuses more, never less.

Example::

    fresh_attributes(("email",))          # frozenset({"email.charset", ..., "email.message_from_string"})
    held_packages(("shutil",))            # {"shutil.collections": "collections", ...}
    submodules("email")                   # frozenset({"base64mime", ..., "message", "mime", "utils"})
    image = TaskImage.of("sparring-repo/inflection:0.5.1")
    held_packages(("zipfile",), image)    # {..., "zipfile.re": "re"}: the image's 3.11.2, not this process's
"""

from __future__ import annotations

import importlib.util
import json
import logging
import pkgutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

__all__ = ["TaskImage", "fresh_attributes", "held_packages", "stdlib_names", "submodules"]

logger = logging.getLogger(__name__)

#: Seconds a probe may take (a container's start included).
PROBE_TIMEOUT_S = 60
#: The account a probe runs as in the image (the harness's run user, ``nobody``).
_PROBE_USER = "65534"

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

#: Run in the image once: its ``sys.path`` (site is off, so the interpreter does not know its virtual environment,
#: which site reads from pyvenv.cfg: the one beside the executable is taken, as the harness's bootstrap takes it),
#: its standard-library names, and every package on that path with its submodules, found as the import system
#: finds them (``PathFinder`` on the parent's locations: no package is imported, no ``__init__`` runs).
_TABLE = """
import json, os, pkgutil, sys, sysconfig
from importlib.machinery import PathFinder
prefix = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
venv = os.path.isfile(os.path.join(prefix, "pyvenv.cfg"))
scheme = "venv" if venv and "venv" in sysconfig.get_scheme_names() else sysconfig.get_default_scheme()
site = [sysconfig.get_path(k, scheme, vars={"base": prefix, "platbase": prefix} if venv else None)
        for k in ("purelib", "platlib")]
path = list(dict.fromkeys(p for p in [*sys.path, *site] if p and os.path.isabs(p) and os.path.isdir(p)))
packages = {}
todo = [(m.name, None) for m in pkgutil.iter_modules(path) if m.ispkg]
while todo and len(packages) < 20000:
    name, parent = todo.pop()
    spec = PathFinder.find_spec(name, parent if parent is not None else path)
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    if not locations or name in packages or name.count(".") > 12:
        continue
    found = list(pkgutil.iter_modules(locations))
    packages[name] = sorted({m.name for m in found})
    todo += [(f"{name}.{m.name}", locations) for m in found if m.ispkg]
print(json.dumps({"path": path, "stdlib": sorted(sys.stdlib_module_names), "packages": packages}))
"""


@dataclass(frozen=True)
class TaskImage:
    """The image a task's code runs in, whose interpreter the AST check measures (:meth:`of` makes one).

    Attributes:
        id: The image's id, the key of every answer kept; empty where the image could not be probed (then no
            submodule counts as loaded).
        name: Its name (``sparring-repo/inflection:0.5.1``).
        engine: The Docker engine its probes run on (None: the process's).
    """

    id: str
    name: str = field(default="", compare=False)
    engine: str | None = field(default=None, compare=False)

    @classmethod
    def of(cls, name: str, hosts: Sequence[str] | None = None) -> TaskImage:
        """The image ``name`` on the engine a container of it would go to (``hosts``: a pool's engines), probed
        once per image id; with an empty id where it cannot be (the engine is down, the image is missing)."""
        from sparring.containers.engines import place

        try:
            engine = place(name, hosts)
            image = cls(_engine_client(engine).api.inspect_image(name)["Id"], name, engine)
            _table(image)
        except Exception as e:  # noqa: BLE001 - any failure to probe it: measured as a failed probe (closed)
            logger.warning("fresh imports in %s could not be measured (%s); no submodule counts as loaded", name, e)
            return cls("", name)
        return image


def fresh_attributes(modules: tuple[str, ...], image: TaskImage | None = None) -> frozenset[str]:
    """Every ``package.attribute`` present after a fresh interpreter (``image``'s, else this process's) imports
    ``modules`` in order (empty where the probe fails: then no submodule counts as loaded)."""
    return _answer(modules, image)[0]


def held_packages(modules: tuple[str, ...], image: TaskImage | None = None) -> dict[str, str]:
    """``module.attribute`` -> package, for every package a module holds under an attribute other than its own
    submodule's name, after a fresh interpreter (``image``'s, else this process's) imports ``modules`` (empty where
    the probe fails)."""
    return dict(_answer(modules, image)[1])


def submodules(package: str, image: TaskImage | None = None) -> frozenset[str]:
    """The names of ``package``'s submodules in ``image`` (else in this process: found on its ``__path__``, none
    imported); empty for a module that is no package, or none there is. Where ``image`` could not be probed, this
    process's (with no submodule loaded, every one of them read as an attribute is refused)."""
    table = _probed_table(image)
    return table[1].get(package, frozenset()) if table is not None else _host_submodules(package)


def stdlib_names(image: TaskImage | None = None) -> frozenset[str]:
    """The standard library's top-level module names in ``image``'s interpreter (else this process's, as also where
    ``image`` could not be probed)."""
    table = _probed_table(image)
    return table[2] if table is not None else frozenset(getattr(sys, "stdlib_module_names", ()))


_Answer = tuple[frozenset[str], tuple[tuple[str, str], ...]]
_Table = tuple[list[str], dict[str, frozenset[str]], frozenset[str]]


def _answer(modules: tuple[str, ...], image: TaskImage | None) -> _Answer:
    try:
        return _probe(modules, image)
    except Exception as e:  # noqa: BLE001 - not kept: the next file's check tries again
        logger.warning("a fresh-import probe failed (%s); no submodule counts as loaded", e)
        return frozenset(), ()


def _probed_table(image: TaskImage | None) -> _Table | None:
    """``image``'s table (None: this process is measured, or the image could not be probed)."""
    if image is None or not image.id:
        return None
    try:
        return _table(image)
    except Exception:  # noqa: BLE001 - probed when the image was made: kept since, unless it failed then
        return None


@lru_cache(maxsize=1024)
def _probe(modules: tuple[str, ...], image: TaskImage | None) -> _Answer:
    """The probe's answer; raises where it could not run (so that nothing failed is kept)."""
    if image is None:
        path = [p for p in sys.path if p]  # not the working directory: only the host's installed modules
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _PROBE, json.dumps(path), json.dumps(list(modules))],
            capture_output=True, timeout=PROBE_TIMEOUT_S, check=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        out = done.stdout
    else:
        out = _in_image(image, _PROBE, json.dumps(_table(image)[0]), json.dumps(list(modules)))
    attributes, held = json.loads(out)
    return frozenset(attributes), tuple(sorted(held.items()))


@lru_cache(maxsize=64)
def _table(image: TaskImage) -> _Table:
    """``image``'s ``sys.path``, its packages' submodules and its standard-library names (raises where it could not
    be probed)."""
    if not image.id:
        raise RuntimeError(f"image {image.name} could not be probed")
    table = json.loads(_in_image(image, _TABLE))
    packages = {name: frozenset(subs) for name, subs in table["packages"].items()}
    return list(table["path"]), packages, frozenset(table["stdlib"])


def _in_image(image: TaskImage, program: str, *args: str) -> bytes:
    """What ``python -I -S -c program args`` prints in a fresh container of ``image`` (no network, no capability,
    a read-only file system, as ``nobody`` in ``/``); raises where it does not run or fails."""
    from sparring.containers.cleanup import LABEL, OWNER_LABEL, owner_id

    client = _engine_client(image.engine)
    container = client.containers.create(
        image.id, ["python", "-I", "-S", "-c", program, *args], user=_PROBE_USER, working_dir="/",
        network_mode="none", read_only=True, cap_drop=["ALL"], security_opt=["no-new-privileges"],
        mem_limit="512m", memswap_limit="512m", pids_limit=64, labels={LABEL: "1", OWNER_LABEL: owner_id()},
    )  # fmt: skip
    try:
        container.start()
        status = container.wait(timeout=PROBE_TIMEOUT_S)
        out: bytes = container.logs(stdout=True, stderr=False)
        if status.get("StatusCode") != 0:
            err = container.logs(stdout=False, stderr=True).decode(errors="replace").strip()[-300:]
            raise RuntimeError(f"the probe exited with {status.get('StatusCode')} in {image.name}: {err}")
        return out
    finally:
        container.remove(force=True)


def _engine_client(engine: str | None) -> Any:
    from sparring.containers.docker_engine import shared_client

    return shared_client(engine)


@lru_cache(maxsize=1024)
def _host_submodules(package: str) -> frozenset[str]:
    try:
        spec = importlib.util.find_spec(package)  # imports the parents only (``xml`` for ``xml.etree``)
    except (ImportError, ValueError, AttributeError):
        return frozenset()
    locations = spec.submodule_search_locations if spec is not None else None
    if not locations:
        return frozenset()
    return frozenset(m.name for m in pkgutil.iter_modules(list(locations)))
