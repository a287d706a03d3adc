"""The sandbox against hostile commands, on real containers of the base image."""

from __future__ import annotations

import io
import tarfile
import threading
import uuid

import pytest

from sparring.containers.base_image import BASE_IMAGE
from sparring.containers.cleanup import reaper
from sparring.containers.sandbox import DEFAULT_USER, Sandbox, SandboxLimits, SandboxPool
from tests.containers.sandbox_helpers import docker_ready, labelled

pytestmark = pytest.mark.docker


def test_commands_run_as_the_non_root_user_and_root_only_when_asked(box):
    r = box.exec("id -u; id -un; pwd; echo $HOME")
    assert r.ok
    assert r.stdout == f"1000\n{DEFAULT_USER}\n/repo\n/home/sparring\n"
    assert box.exec("id -u", user="root").stdout == "0\n"
    assert box.exec("echo $FOO-$PWD", env={"FOO": "bar"}, workdir="/tmp").stdout == "bar-/tmp\n"


def test_exit_codes_and_missing_workdir(box):
    assert box.exec("exit 3").exit_code == 3
    r = box.exec("true", workdir="/nowhere")
    assert r.exit_code == 126 and "working directory /nowhere does not exist" in r.stderr


def test_container_is_locked_down(box):
    attrs = box_inspect(box)
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    assert set(host["CapAdd"]) == {"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL"}
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Privileged"] is False and host["Init"] is True
    assert host["PidsLimit"] == 256 and host["Memory"] == 2 * 1024**3 and host["MemorySwap"] == 2 * 1024**3
    assert host["NanoCpus"] == 10**9
    assert host["Binds"] in (None, []) and attrs["Mounts"] == []
    assert attrs["Config"]["Labels"]["sparring"] == "1"


def box_inspect(box: Sandbox) -> dict:
    from sparring.containers.docker_engine import docker_client

    return docker_client().api.inspect_container(box.id)


def test_only_loopback_network_interface(box):
    assert box.exec("ls /sys/class/net").stdout == "lo\n"
    # No route anywhere: the kernel's routing table (hex) has no entry at all.
    assert box.exec("tail -n +2 /proc/net/route").stdout == ""


def test_no_docker_socket_inside(box):
    r = box.exec("ls -la /var/run/docker.sock /run/docker.sock /var/run/docker /run/containerd 2>&1; echo rc=$?")
    assert "rc=2" in r.stdout and r.stdout.count("No such file or directory") == 4
    r = box.exec("find / -xdev -type s 2>/dev/null | grep -v '^/proc' ; echo done", timeout=60, user="root")
    assert r.stdout == "done\n"  # no unix socket anywhere in the container's filesystem


def test_sandbox_user_has_no_capabilities(box):
    r = box.exec("grep -E '^Cap(Prm|Eff|Bnd)' /proc/self/status")
    lines = dict(line.split(":\t") for line in r.stdout.splitlines())
    assert lines["CapPrm"] == "0000000000000000" and lines["CapEff"] == "0000000000000000"
    assert box.exec("grep NoNewPrivs /proc/self/status").stdout.split() == ["NoNewPrivs:", "1"]


def test_sleep_is_killed_at_the_timeout(box):
    r = box.exec("sleep 1000", timeout=1)
    assert r.timed_out and r.exit_code is None and not r.ok
    assert 1.0 <= r.seconds < 3.0
    assert "timed out after 1 s" in r.stderr
    assert box.exec("ps -eo comm | grep -c '^sleep$'").stdout == "0\n"


def test_timeout_kills_the_whole_process_group(box):
    r = box.exec("(sleep 1000; echo never) & sleep 1000 & wait", timeout=1)
    assert r.timed_out
    assert box.exec("ps -eo comm | grep -c '^sleep$'").stdout == "0\n"


def test_background_process_does_not_hold_the_command(box):
    r = box.exec("setsid sleep 300 & echo started")  # escapes the process group, keeps the pipes
    assert r.ok and r.stdout == "started\n" and r.seconds < 5
    assert box.exec("true").ok


def test_large_output_is_capped_with_a_marker(box):
    r = box.exec("head -c 10000000 /dev/zero | tr '\\0' a")
    cut = 10_000_000 - box.limits.output_cap
    marker = f"\n[... {cut} bytes cut ...]\n"
    assert r.ok and r.truncated_bytes == cut
    assert r.stdout == "a" * 8192 + marker + "a" * 8192


def test_binary_output_is_decoded_with_replacement(box):
    r = box.exec("printf 'ok\\xff\\xfe\\x00\\n'; head -c 100000 /dev/urandom; head -c 5000 /dev/urandom >&2")
    assert r.ok and r.stdout.startswith("ok\ufffd\ufffd\x00\n")
    assert r.truncated_bytes > 0 and isinstance(r.stderr, str) and len(r.stderr) > 1000


def test_fork_bomb_is_stopped_by_the_pids_limit(box):
    r = box.exec("bomb() { bomb | bomb & }; bomb; sleep 4", timeout=3)
    assert r.timed_out
    assert "Resource temporarily unavailable" in r.stderr
    after = box.exec("echo alive; cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max")
    assert after.ok and after.stdout.split() == ["alive", "256"]
    assert int(box.exec("ls /proc | grep -c '^[0-9]'").stdout) < 10


def test_memory_bomb_is_killed_and_reported():
    docker_ready()
    with Sandbox.create(BASE_IMAGE, SandboxLimits(memory="256m")) as box:
        r = box.exec("python3 -c 'x = []\nwhile True: x.append(bytearray(16 * 2**20))'", timeout=60)
        assert r.oom_killed and r.signal == 9 and r.exit_code is None and not r.timed_out
        assert "exceeding the memory limit (256m)" in r.stderr
        assert box.exec("echo alive").stdout == "alive\n"


def test_rm_rf_root_damages_only_that_container(pool):
    wrecked = pool.acquire()
    assert wrecked.exec("echo mine > /repo/a && echo mine > /tmp/b").ok
    r = wrecked.exec("rm -rf --no-preserve-root / 2>/dev/null; ls /usr/bin | wc -l; ls -A /repo /tmp", user="root")
    # the root file system is read-only, even to root: only the writable mounts were emptied ...
    assert int(r.stdout.split()[0]) > 100 and r.stdout.split()[1:] == ["/repo:", "/tmp:"]
    assert wrecked.exec("python3 -c 'print(1)'").stdout == "1\n"
    pool.release(wrecked)
    fresh = pool.acquire()  # ... and the next container is whole
    try:
        r = fresh.exec("python3 -c 'print(1)' && test -x /usr/bin/git && ls -A /repo /tmp && echo whole")
        assert r.stdout == "1\n/repo:\n\n/tmp:\nwhole\n"
    finally:
        pool.release(fresh)


def test_background_process_is_gone_after_reset(pool):
    first = pool.acquire()
    # setsid escapes the process group that is killed when a command ends: it outlives the command ...
    assert first.exec("setsid sleep 1000 > /dev/null 2>&1 & sleep 0.5").ok
    assert first.exec("ps -eo comm | grep -c '^sleep$'").stdout == "1\n"
    pool.release(first)
    second = pool.acquire()
    try:  # ... but not the episode
        assert second.id != first.id
        assert second.exec("ps -eo comm | grep -c '^sleep$'").stdout == "0\n"
    finally:
        pool.release(second)
    reaper().wait()
    assert first.id not in {c["Id"] for c in labelled()}


def test_files_roundtrip_with_owners_and_modes(box):
    box.put_file("notes/a.txt", "héllo")
    assert box.get_file("/repo/notes/a.txt") == "héllo".encode()
    assert box.exec("stat -c '%U %a' notes notes/a.txt").stdout == "sparring 755\nsparring 644\n"
    box.put_file("/tmp/secret", b"\x00\x01", mode=0o600, user="root")
    r = box.exec("cat /tmp/secret")
    assert r.exit_code == 1 and "Permission denied" in r.stderr
    with pytest.raises(FileNotFoundError):
        box.get_file("/repo/missing.txt")


def test_put_file_replaces_a_planted_symlink(box):
    assert box.exec("ln -s /etc/passwd /repo/trap").ok
    box.put_file("/repo/trap", "harmless\n", user="root")
    assert box.exec("test -L /repo/trap || cat /repo/trap; grep -c '^root:' /etc/passwd").stdout == "harmless\n1\n"


def test_archives_roundtrip_like_docker_cp(box):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in {"pkg/__init__.py": b"X = 1\n", "setup.cfg": b"[metadata]\n"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    box.put_archive("/repo/proj", buf.getvalue())
    assert box.exec("stat -c '%U' proj/pkg/__init__.py", workdir="/repo").stdout == "root\n"
    box.put_archive("/repo/mine", buf.getvalue(), user="sparring")
    assert box.exec("stat -c '%U' /repo/mine/pkg/__init__.py").stdout == "sparring\n"
    with tarfile.open(fileobj=io.BytesIO(box.get_archive("/repo/proj"))) as tar:
        assert sorted(tar.getnames()) == ["proj", "proj/pkg", "proj/pkg/__init__.py", "proj/setup.cfg"]
        member = tar.extractfile("proj/pkg/__init__.py")
        assert member is not None and member.read() == b"X = 1\n"
    with pytest.raises(FileNotFoundError):
        box.get_archive("/repo/nothing")
    assert box.exec("head -c 2000000 /dev/zero > /repo/mine/big.bin").ok
    with tarfile.open(fileobj=io.BytesIO(box.get_archive("/repo/mine", max_file_bytes=1_000_000))) as tar:
        assert "mine/big.bin" not in tar.getnames() and "mine/setup.cfg" in tar.getnames()


def test_close_is_idempotent_and_closed_sandbox_refuses_work(pool):
    sandbox = pool.acquire()
    sandbox.close()
    sandbox.close()
    r = sandbox.exec("true")
    assert r.exit_code is None and "is closed" in r.stderr
    reaper().wait()
    assert sandbox.id not in {c["Id"] for c in labelled()}


def test_close_from_another_thread_ends_a_running_command(pool):
    sandbox = pool.acquire()
    timer = threading.Timer(0.5, sandbox.close)
    timer.start()
    r = sandbox.exec("sleep 100", timeout=60)
    timer.join()
    assert r.exit_code is None and not r.timed_out and r.seconds == 0.0
    assert r.stderr.startswith(f"[sparring: sandbox {sandbox.id[:12]} stopped")


def test_pool_skips_a_ready_container_removed_behind_its_back():
    docker_ready()
    from sparring.containers.docker_engine import docker_client

    with SandboxPool(BASE_IMAGE, size=1) as pool:
        assert pool.wait_ready()
        doomed = pool._ready.queue[0]
        docker_client().api.remove_container(doomed.id, force=True)
        sandbox = pool.acquire()
        assert sandbox.id != doomed.id and sandbox.exec("echo fine").stdout == "fine\n"
        pool.release(sandbox)


def test_a_quiet_pool_starts_no_replacement_unless_an_acquire_waits():
    docker_ready()
    import time

    with SandboxPool(BASE_IMAGE, size=2) as pool:
        assert pool.wait_ready()
        with pool.quiet():
            first, second = pool.acquire(), pool.acquire()
            time.sleep(2.0)  # a container starts in about half a second here
            assert pool.ready == 0  # held back: no start competes with the block's work
            third = pool.acquire(timeout=60)  # an acquire that finds none ready still gets one started
            assert third.exec("echo fine").stdout == "fine\n"
        assert pool.wait_ready(timeout=60)  # the pool catches up once the block ends
        for box in (first, second, third):
            pool.release(box)


def test_missing_image_is_one_clear_error():
    docker_ready()
    from sparring import SparringError

    with pytest.raises(SparringError, match="image sparring-nothing:none is not there"):
        Sandbox.create("sparring-nothing:none")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_200_resets_leak_no_containers():
    docker_ready()
    tag = uuid.uuid4().hex
    with SandboxPool(BASE_IMAGE, size=3, labels={"sparring.test": tag}, workers=3) as pool:
        for i in range(200):
            box = pool.acquire()
            assert box.exec(f"echo {i}").stdout == f"{i}\n"
            pool.release(box)
            assert len(labelled(tag)) <= 3 + 8  # ready ones plus a few being removed
    reaper().wait()
    assert labelled(tag) == []
