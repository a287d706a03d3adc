"""The harness's reading of a repository's pytest configuration, inside the container.

Loaded by path by ``harness_boot.py`` (copied beside it as ``config.py``), never by the host. It
serves the bootstrap's ``ini`` command (:func:`harness_ini`: the options of the configuration file
pytest would pick, without the ones that load code or write files, and the pins of the files pytest
loads on its own) and, before a run starts, the check of those pins (:func:`changed_pins`). It
needs the standard library only (``iniconfig`` where present, as pytest reads INI files).
"""

import os

#: pytest's configuration files, in the order pytest looks for them in each folder.
CONFIG_FILES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")

#: Options the harness never takes from the repository: they load code (``addopts`` may hold
#: ``-p``, ``required_plugins`` demands plugins) or choose places the run would write to or search
#: (the harness gives the files, the rootdir and the conftest limit itself).
DROPPED_OPTIONS = frozenset(
    {"addopts", "required_plugins", "cache_dir", "confcutdir", "testpaths", "rootdir", "log_file", "junit_suite_name"}
)

#: Options whose entries are paths relative to the configuration file's folder.
PATH_OPTIONS = frozenset({"pythonpath"})


def _ini_sections(path):
    """The sections of an INI-style file as pytest reads it (``iniconfig``, else ``configparser``)."""
    try:
        import iniconfig

        parsed = iniconfig.IniConfig(path)
        return {name: dict(parsed[name].items()) for name in parsed.sections}
    except ImportError:
        import configparser

        parser = configparser.ConfigParser(interpolation=None, strict=False)
        parser.read(path, encoding="utf-8")
        return {name: dict(parser[name]) for name in parser.sections()}


def _toml(path):
    import tomllib

    with open(path, "rb") as f:
        return tomllib.load(f)


def read_options(path):
    """pytest's options in the configuration file ``path``, or None where pytest would not use that file."""
    name = os.path.basename(path)
    if name in ("pytest.toml", ".pytest.toml"):
        return dict(_toml(path).get("pytest", {}))
    if name == "pyproject.toml":
        tool = _toml(path).get("tool", {}).get("pytest")
        if not isinstance(tool, dict):
            return None
        native = {k: v for k, v in tool.items() if k != "ini_options"}
        return native or dict(tool.get("ini_options") or {})
    sections = _ini_sections(path)
    if name in ("pytest.ini", ".pytest.ini"):
        return sections.get("pytest", {})  # a dedicated file counts even without the section
    return sections.get("tool:pytest" if name == "setup.cfg" else "pytest")


def find_config(root, files):
    """(path, options) of the configuration file pytest would pick for ``files``, searching up to ``root``."""
    root = os.path.abspath(root)
    folders = [os.path.dirname(os.path.abspath(os.path.join(root, f.split("::")[0]))) for f in files] or [root]
    folder = os.path.commonpath(folders)
    if folder != root and not folder.startswith(root + os.sep):
        folder = root
    while True:
        for name in CONFIG_FILES:
            candidate = os.path.join(folder, name)
            if os.path.isfile(candidate) and not os.path.islink(candidate):
                try:
                    options = read_options(candidate)
                except Exception:  # pytest would stop on a broken file; the harness runs without it
                    options = None
                if options is not None:
                    return candidate, options
        if folder == root:
            return None, {}
        folder = os.path.dirname(folder)


def _lines(value):
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [line for line in str(value).splitlines() if line.strip()] or [""]


#: Folder names that hold tests wherever they are.
TEST_FOLDERS = ("test", "tests", "testing")

#: Lines of the harness's ini that pin a file pytest loads on its own: ``# pristine SHA256|absent PATH``.
PRISTINE = "# pristine "


def pristine_files(root, files, contents=None):
    """Path -> sha256 (or ``absent``) of the files pytest imports besides the tests and the code.

    Every ``conftest.py`` under ``root``, and the ``__init__.py`` of each test folder (``tests``,
    ``test``, ``testing``) on a test file's path (pytest imports them as the test module's packages). A run refuses to
    start when these differ from the ones recorded in its ini, so a planted or changed one cannot
    run even where the caller let it in. ``contents``: absolute path -> bytes of files the run
    cannot read itself (a test file listed by the run is hidden from it: ``harness_boot.hide``).
    """
    import hashlib

    root = os.path.abspath(root)
    wanted = set()
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        if "conftest.py" in names:
            wanted.add(os.path.relpath(os.path.join(folder, "conftest.py"), root))
    for f in files:
        folder = os.path.dirname(f.split("::")[0].removeprefix("./"))
        parts = folder.split("/") if folder else []
        for i, part in enumerate(parts):  # test packages only: a library package's may be the fix
            if part in TEST_FOLDERS:
                wanted.add(os.path.join(*parts[: i + 1], "__init__.py"))
    out = {}
    for rel in sorted(wanted):
        held = (contents or {}).get(os.path.join(root, rel))
        try:
            if held is None:
                with open(os.path.join(root, rel), "rb") as fh:
                    held = fh.read()
            out[rel] = hashlib.sha256(held).hexdigest()
        except OSError:
            out[rel] = "absent"
    return out


def harness_ini(root, files):
    """The text of the harness's ``pytest.ini`` for ``files`` (see the module docstring)."""
    path, options = find_config(root, files)
    out = [f"# written by the sparring harness from {path or 'no configuration file'}"]
    out += [f"{PRISTINE}{digest} {rel}" for rel, digest in pristine_files(root, files).items()]
    out.append("[pytest]")
    for key, value in options.items():
        if key in DROPPED_OPTIONS:
            continue
        lines = _lines(value)
        if key in PATH_OPTIONS and path:
            base = os.path.dirname(path)
            lines = [os.path.normpath(os.path.join(base, p)) for line in lines for p in line.split()]
        if len(lines) == 1:
            out.append(f"{key} = {lines[0]}")
        else:
            out.append(f"{key} =")
            out.extend(f"    {line}" for line in lines)
    return "\n".join(out) + "\n"


def pinned(ini_path):
    """Path -> sha256 (or ``absent``) of the files the ini pins."""
    recorded = {}
    with open(ini_path, encoding="utf-8") as f:
        for line in f:
            if line.startswith(PRISTINE):
                digest, _, rel = line[len(PRISTINE) :].rstrip("\n").partition(" ")
                recorded[rel] = digest
    return recorded


def changed_pins(root, ini_path, files, contents=None):
    """The pinned files (see :func:`pristine_files`) that differ from the ini's record."""
    recorded = pinned(ini_path)
    now = pristine_files(root, files, contents)
    return sorted(rel for rel in set(recorded) | set(now) if recorded.get(rel, "absent") != now.get(rel, "absent"))
