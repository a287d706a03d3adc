"""The agent's file tools have the sandbox user's rights, not the root command server's (real containers)."""

from __future__ import annotations

import errno
import time

import pytest

from sparring.containers.sandbox import DEFAULT_USER
from sparring.envs.swe.tools import SandboxTools

pytestmark = pytest.mark.docker

# ``pool`` and ``box`` (base-image sandboxes) come from conftest.py.


@pytest.fixture
def tools(box):
    agent = SandboxTools()
    agent._sandbox = box
    return agent


def test_view_refuses_a_file_only_root_may_read(tools, box):
    obs = tools.view("/etc/shadow")
    assert obs.startswith("Error: permission denied: /etc/shadow")
    assert "root:" not in obs
    assert box.get_file("/etc/shadow").startswith(b"root:")  # the harness, as root, still may


def test_str_replace_cannot_read_or_edit_a_root_file(tools, box):
    obs = tools.str_replace("/etc/shadow", "root:", "toor:")
    assert obs.startswith("Error: permission denied: /etc/shadow")
    assert box.get_file("/etc/shadow").startswith(b"root:")


def test_create_refuses_system_paths_and_leaves_nothing(tools, box):
    python_lib = box.exec("python3 -c 'import os; print(os.path.dirname(os.__file__))'").stdout.strip()
    assert python_lib.startswith("/usr/lib/python3")
    for path in ("/etc/evil", f"{python_lib}/sparring_evil.py", "/etc/evil.d/inner/file", "/root/.sparring-evil"):
        obs = tools.create(path, "import os; os.system('id')\n")
        # refused as `echo > path` would be: the root file system is read-only, and /root not the agent's
        refusals = (f"Error: cannot write {path}: [Errno 30] Read-only", f"Error: permission denied: {path}")
        assert obs.startswith(refusals), obs
        assert box.exec(f"test -e {path} || echo absent", user="root").stdout == "absent\n"
    assert box.exec("test -e /etc/evil.d || echo absent", user="root").stdout == "absent\n"


def test_str_replace_cannot_edit_a_root_file_the_agent_may_read(tools, box):
    box.put_file("/repo/locked.py", "X = 1\n", mode=0o644, user="root")  # like an oracle test file
    obs = tools.str_replace("/repo/locked.py", "X = 1", "X = 2")
    assert obs.startswith("Error: permission denied: /repo/locked.py")
    assert box.get_file("/repo/locked.py") == b"X = 1\n"


def test_create_and_view_in_the_repository_as_the_agent(tools, box):
    assert tools.create("pkg/new/mod.py", "A = 1\nB = 2\n") == "Wrote /repo/pkg/new/mod.py (2 lines)."
    assert tools.view("pkg/new/mod.py") == "1\tA = 1\n2\tB = 2\n[lines 1-2 of 2]"
    assert tools.str_replace("pkg/new/mod.py", "B = 2", "B = 3").startswith("Edited /repo/pkg/new/mod.py")
    owners = box.exec("stat -c '%U:%G %a' pkg pkg/new pkg/new/mod.py", user="root").stdout
    assert owners == f"{DEFAULT_USER}:{DEFAULT_USER} 755\n" * 2 + f"{DEFAULT_USER}:{DEFAULT_USER} 644\n"
    assert box.get_file("/repo/pkg/new/mod.py") == b"A = 1\nB = 3\n"
    assert tools.view("/repo/nothing.py") == "Error: /repo/nothing.py does not exist."


def test_file_operations_run_without_groups_or_capabilities(box):
    status = dict(line.split(":", 1) for line in box.get_file("/proc/self/status", as_agent=True).decode().splitlines())
    assert status["Uid"].split() == ["1000"] * 4 and status["Gid"].split() == ["1000"] * 4
    assert status["Groups"].strip() == ""
    assert {status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapAmb")} == {"0000000000000000"}
    harness = dict(line.split(":", 1) for line in box.get_file("/proc/self/status").decode().splitlines())
    assert harness["Uid"].split() == ["0"] * 4  # the harness's own reads stay root's


def test_agent_writes_never_follow_a_planted_symlink(tools, box):
    assert box.exec("ln -s /etc/passwd /repo/trap && ln -s /etc /repo/etc").ok
    assert tools.create("/repo/trap", "harmless\n").startswith("Wrote")
    assert box.exec("test -L /repo/trap || cat /repo/trap").stdout == "harmless\n"
    assert tools.create("/repo/etc/evil", "x\n").startswith("Error: cannot write /repo/etc/evil: [Errno 30]")
    after = box.exec("grep -c '^root:' /etc/passwd; test -e /etc/evil || echo absent", user="root")
    assert after.stdout == "1\nabsent\n"


def test_special_files_are_refused_not_waited_on(tools, box):
    assert box.exec("mkfifo /repo/pipe").ok
    obs = tools.view("/repo/pipe")
    assert obs.startswith("Error: cannot read /repo/pipe:") and "not a regular file" in obs
    assert tools.create("/repo/pipe", "x").startswith("Error: cannot write /repo/pipe:")
    obs = tools.view("/dev/zero")
    assert obs.startswith("Error: cannot read /dev/zero:") and "not a regular file" in obs
    assert box.exec("echo alive").stdout == "alive\n"


def test_harness_root_files_still_work(box):
    box.put_file("/tmp/sparring-harness.conf", "k = v\n", mode=0o600, user="root")
    assert box.get_file("/tmp/sparring-harness.conf") == b"k = v\n"
    assert box.exec("stat -c '%U %a' /tmp/sparring-harness.conf").stdout == "root 600\n"
    with pytest.raises(PermissionError):
        box.get_file("/tmp/sparring-harness.conf", as_agent=True)
    with pytest.raises(PermissionError):
        box.put_file("/tmp/sparring-harness.conf", "k = evil\n", as_agent=True)
    assert box.get_file("/tmp/sparring-harness.conf") == b"k = v\n"
    with pytest.raises(ValueError):
        box.put_file("/repo/x", "", user="root", as_agent=True)


def test_harness_reads_refuse_what_the_agent_planted_instead_of_waiting(box):
    plant = (
        "mkfifo /tmp/fifo && ln -s /etc/shadow /tmp/link && mkdir /tmp/folder && echo report > /tmp/file && "
        "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"/tmp/socket\")'"
    )
    assert box.exec(plant).ok  # as the sandbox user, like the agent's commands
    # as root (the harness reading a report): regular files only, never through a link, and at once
    refused = {"/tmp/fifo": errno.EINVAL, "/tmp/link": errno.ELOOP, "/tmp/socket": errno.ENXIO,
               "/dev/zero": errno.EINVAL, "/tmp/folder": None}  # fmt: skip
    for path, code in refused.items():
        t0 = time.perf_counter()
        with pytest.raises(IsADirectoryError if code is None else OSError) as raised:
            box.get_file(path)
        assert time.perf_counter() - t0 < 20, path  # a FIFO held the read for the whole 300 s file timeout
        assert raised.value.errno == code, (path, raised.value)
    assert box.get_file("/tmp/file") == b"report\n"
    assert box.get_file("/etc/shadow").startswith(b"root:")  # root still reads its own files by their path
    assert box.exec("echo alive").stdout == "alive\n"
