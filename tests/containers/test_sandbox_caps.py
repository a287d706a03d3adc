"""The disk cap and the read-back caps, on real containers: nothing an agent writes reaches the host's disk
past the cap, and nothing it leaves behind makes the harness read more than its caps, or raise."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sparring.containers.base_image import BASE_IMAGE
from sparring.containers.limits import WRITABLE
from sparring.containers.readback import ReadCaps
from tests.containers.sandbox_helpers import docker_ready

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

DISK = 64 << 20
INODES = 4096


@pytest.fixture(scope="module")
def small() -> Iterator[Any]:
    """A pool of base-image sandboxes with a 64 MiB disk cap and 4096 inodes."""
    from sparring.containers.sandbox import SandboxLimits, SandboxPool

    docker_ready()
    with SandboxPool(BASE_IMAGE, size=1, limits=SandboxLimits(disk=DISK, inodes=INODES, exec_timeout=60)) as p:
        yield p


def _used_kib(box: Any, path: str) -> int:
    return int(box.exec(f"du -sk {path} | cut -f1", user="root").stdout)


def test_disk_cap_holds_for_large_small_and_sparse_files_everywhere(small: Any) -> None:
    box = small.acquire()
    try:
        # the root file system is read-only, for the harness's root too: only the tmpfs mounts take writes
        r = box.exec("for p in /x /usr/x /etc/x /opt/venv/x /root/x /run/x; do touch $p 2>&1; done", user="root")
        assert r.stdout.count("Read-only file system") == 6, r.stdout
        total = 0
        for place in WRITABLE:
            # one large file: stopped by the mount's size, not by the 1 GiB per-file limit
            r = box.exec(f"head -c 200M /dev/zero > {place.path}/big; echo rc=$?")
            assert "No space left on device" in r.stderr and "rc=1" in r.stdout, (place.path, r.output)
            used = _used_kib(box, place.path)
            assert used <= DISK * place.share / 1024 + 64, (place.path, used)
            total += used
        assert total <= DISK / 1024 + 64 * len(WRITABLE)
        box.exec("rm -f /tmp/big")
        # many empty files: no blocks, but inodes, which are capped too
        r = box.exec("mkdir /tmp/many && cd /tmp/many && for i in $(seq 1 5000); do : > f$i || break; done; ls | wc -l")
        assert "No space left on device" in r.stderr
        assert int(r.stdout) < INODES * 0.25
        box.exec("rm -rf /tmp/many")
        # sparse files hold no blocks, and the per-file size limit still stops a 100 GiB one
        r = box.exec(
            "truncate -s 500M /tmp/sparse && du -k /tmp/sparse | cut -f1; truncate -s 100G /tmp/huge; echo rc=$?"
        )
        assert r.stdout.split()[0] == "0" and "rc=153" in r.stdout  # 128 + SIGXFSZ
        assert box.exec("echo alive").stdout == "alive\n"  # a full container still answers
    finally:
        small.release(box)
    fresh = small.acquire()  # and the next one starts empty
    try:
        assert fresh.exec("du -sk /tmp /var/tmp /dev/shm | awk '{s+=$1} END {print s}'").stdout.strip() == "0"
    finally:
        small.release(fresh)


def test_seeded_places_start_with_the_image_content(box: Any) -> None:
    r = box.exec("stat -c '%U %a' /repo ~ ~/.bashrc; stat -c '%a' /tmp /var/tmp /dev/shm; touch /repo/x ~/y && echo ok")
    assert r.stdout.split() == ["sparring", "755", "sparring", "755", "sparring", "644", "1777", "1777", "1777", "ok"]
    # scripts written to /repo and /tmp run, as tests and agents expect
    assert box.exec("printf '#!/bin/sh\\necho ran\\n' > /tmp/s && chmod +x /tmp/s && /tmp/s").stdout == "ran\n"
    # every sandbox has the same host name: nothing per container for a bug to be on or off by
    assert box.exec("hostname; cat /etc/hostname").stdout == "sandbox\nsandbox\n"


def _leave_a_mess(box: Any) -> None:
    script = (
        "mkdir -p /repo/mess/many /repo/.git && cd /repo/mess"
        " && head -c 3000000 /dev/urandom > huge && truncate -s 900M sparse"
        " && for i in $(seq 1 40); do head -c 200000 /dev/urandom > many/f$i; done"
        " && d=deep && for i in $(seq 1 12); do d=$d/d; done && mkdir -p $d && touch $d/bottom"
        " && touch $(printf 'n%.0s' $(seq 1 200)) && echo x > /repo/.git/config && echo keep > /repo/keep.py"
    )
    assert box.exec(script).ok


def test_tree_reads_are_capped_and_say_what_they_left_out(box: Any) -> None:
    _leave_a_mess(box)
    caps = ReadCaps(entries=500, tar_bytes=4 << 20, file_bytes=1 << 20, depth=8, path_chars=150, exclude=(".git",))
    t0 = time.perf_counter()
    read = box.read_tree("/repo", caps)
    assert time.perf_counter() - t0 < 10
    assert len(read.data) <= caps.tar_bytes + 10240
    with tarfile.open(fileobj=io.BytesIO(read.data)) as tar:
        names = tar.getnames()
    assert "repo/keep.py" in names and not any(n.startswith("repo/.git") for n in names)
    assert "repo/mess/huge" not in names and "repo/mess/sparse" not in names
    assert not any(n.count("/") > 9 for n in names) and not any(len(n) > 150 for n in names)
    assert set(read.left_out) == {"file_bytes", "tar_bytes", "depth", "path_chars"}, read.left_out
    assert read.left_out["file_bytes"]["count"] == 2 and not read.complete
    notes = " | ".join(read.notes())
    assert "2 file(s) larger than 1048576 bytes not read back (e.g. repo/mess/huge, repo/mess/sparse)" in notes
    assert "past the 4194304 bytes" in notes and "deeper than 8 levels" in notes and "longer than 150" in notes
    # the entry cap stops the walk and says so
    few = box.read_tree("/repo", ReadCaps(entries=5))
    assert few.entries == 5 and few.stopped == "entries" and "stopped after 5 entries" in few.notes()[-1]


def test_file_reads_are_capped(box: Any) -> None:
    from sparring.containers.sandbox import FileTooLargeError

    assert box.exec("truncate -s 900M /tmp/sparse && head -c 5000 /dev/zero > /tmp/small").ok
    for as_agent in (False, True):
        t0 = time.perf_counter()
        with pytest.raises(FileTooLargeError, match="over the 33554432 read back at most"):
            box.get_file("/tmp/sparse", as_agent=as_agent)
        assert time.perf_counter() - t0 < 5  # refused by its size, never read
        with pytest.raises(FileTooLargeError):
            box.get_file("/tmp/small", as_agent=as_agent, max_bytes=4999)
        assert len(box.get_file("/tmp/small", as_agent=as_agent, max_bytes=5000)) == 5000
