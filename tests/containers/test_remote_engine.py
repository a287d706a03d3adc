"""Sandboxes on a second Docker engine (``docker_hosts``): a real second ``dockerd`` on this machine, reached
over its own unix socket and over tcp with mutual TLS, as a remote engine would be.

The limits of a sandbox and the grading of a repair hold there unchanged, images the engine lacks
are copied to it from the local engine, and an engine that cannot be used is one sentence.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparring import SparringError
from sparring.containers.base_image import BASE_IMAGE
from sparring.containers.cleanup import LABEL, OWNER_LABEL, collect_garbage, owner_id, reaper
from sparring.containers.docker_engine import docker_client
from sparring.containers.engines import check_engine_url, ensure_image, pick_engine
from sparring.containers.sandbox import Sandbox, SandboxLimits
from tests.conftest import require, unavailable
from tests.containers.sandbox_helpers import docker_ready

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

#: The HostConfig fields that make up a sandbox's limits and isolation (containers/limits.py).
LIMIT_FIELDS = ("NetworkMode", "CapDrop", "CapAdd", "SecurityOpt", "Privileged", "Init", "PidsLimit", "Memory",
                "MemorySwap", "NanoCpus", "ReadonlyRootfs", "Tmpfs", "Ulimits", "Binds", "Devices",
                "LogConfig")  # fmt: skip


@dataclass
class Engine:
    """A second dockerd: its unix socket URL, its tcp URL (mutual TLS) and its client certificates."""

    unix: str
    tls: str
    certs: Path


def _openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)


def _certificates(folder: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as Docker's TLS guide makes them."""
    folder.mkdir()
    ext = "authorityKeyIdentifier = keyid,issuer\nsubjectKeyIdentifier = hash\n"
    (folder / "server.ext").write_text(ext + "subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth\n")
    (folder / "client.ext").write_text(ext + "extendedKeyUsage = clientAuth\n")
    _openssl(folder, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
             "-keyout", "ca-key.pem", "-out", "ca.pem")  # fmt: skip
    for name, key in (("server", "server-key.pem"), ("client", "key.pem")):
        cert = "server-cert.pem" if name == "server" else "cert.pem"
        _openssl(folder, "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", key,
                 "-out", f"{name}.csr")  # fmt: skip
        _openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
                 "-CAcreateserial", "-days", "1", "-extfile", f"{name}.ext", "-out", cert)  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def engine2() -> Iterator[Engine]:
    """A second dockerd beside the first: its own socket, data, exec root and pid file, no bridge, no iptables."""
    docker_ready()
    if shutil.which("dockerd") is None or os.geteuid() != 0 or shutil.which("openssl") is None:
        unavailable("a second Docker engine needs dockerd, root and openssl here")
    root = Path(tempfile.mkdtemp(prefix="sparring-engine2-", dir="/tmp"))  # short: a socket path has 107 bytes
    certs = root / "certs"
    _certificates(certs)
    port = _free_port()
    unix, tls = f"unix://{root}/docker.sock", f"tcp://127.0.0.1:{port}"
    namespace = f"engine2-{os.getpid()}"  # containerd's own, apart from the first engine's "moby"
    log = open(root / "dockerd.log", "wb")  # noqa: SIM115 (dockerd writes it until the module ends)
    daemon = subprocess.Popen(
        ["dockerd", "-H", unix, "-H", tls, "--tlsverify", f"--tlscacert={certs}/ca.pem",
         f"--tlscert={certs}/server-cert.pem", f"--tlskey={certs}/server-key.pem", f"--data-root={root}/data",
         f"--exec-root={root}/exec", f"--pidfile={root}/docker.pid", "--bridge=none", "--iptables=false",
         "--ip-masq=false", "--shutdown-timeout=1", f"--containerd-namespace={namespace}",
         f"--containerd-plugins-namespace={namespace}p"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    saved = {k: os.environ.get(k) for k in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")}
    os.environ |= {"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(certs)}
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                docker_client(timeout=5, host=unix)
                break
            except SparringError:
                if daemon.poll() is not None or time.monotonic() > deadline:
                    tail = (root / "dockerd.log").read_text(errors="replace").strip().splitlines()[-3:]
                    unavailable(f"a second dockerd could not start here: {' | '.join(tail)}")
                time.sleep(0.5)
        yield Engine(unix, tls, certs)
    finally:
        reaper().wait()
        try:
            api = docker_client(timeout=30, host=unix).api
            for c in api.containers(all=True):
                api.remove_container(c["Id"], force=True)
        except Exception:
            pass
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        subprocess.run(["umount", "-R", str(root / "data")], capture_output=True)  # in case dockerd left mounts
        shutil.rmtree(root, ignore_errors=True)


def _on_local_engine() -> list[dict[str, Any]]:
    """This process's containers on the local engine."""
    return docker_client().api.containers(all=True, filters={"label": f"{OWNER_LABEL}={owner_id()}"})


def test_limits_hold_on_the_second_engine_over_tls(engine2: Engine) -> None:
    limits = SandboxLimits(memory="256m", pids=128, cpus=0.5, disk=64 << 20, exec_timeout=30)
    with Sandbox.create(BASE_IMAGE, limits) as local, Sandbox.create(BASE_IMAGE, limits, hosts=[engine2.tls]) as box:
        assert box.engine == engine2.tls and local.engine is None
        there = docker_client(host=engine2.unix).api.inspect_container(box.id)
        assert not any(c["Id"] == box.id for c in _on_local_engine())  # it runs on the second engine only
        here = docker_client().api.inspect_container(local.id)
        # the same configuration, field by field, as the local engine's sandbox
        assert {f: there["HostConfig"][f] for f in LIMIT_FIELDS} == {f: here["HostConfig"][f] for f in LIMIT_FIELDS}
        assert there["HostConfig"]["NetworkMode"] == "none" and there["HostConfig"]["ReadonlyRootfs"] is True
        assert there["HostConfig"]["Memory"] == 256 << 20 and there["HostConfig"]["PidsLimit"] == 128
        assert there["Mounts"] == [] and there["Config"]["Labels"][LABEL] == "1"
        # and they hold: no network, a read-only root, no capabilities for the agent
        assert box.exec("ls /sys/class/net; tail -n +2 /proc/net/route").stdout == "lo\n"
        r = box.exec("touch /usr/x /etc/x 2>&1", user="root")
        assert r.stdout.count("Read-only file system") == 2, r.stdout
        caps = box.exec("grep -E '^CapEff' /proc/self/status").stdout.split()
        assert caps == ["CapEff:", "0000000000000000"]
        # the disk cap: a large file stops at the tmpfs size
        r = box.exec("head -c 200M /dev/zero > /tmp/big; echo rc=$?; du -sk /tmp | cut -f1")
        assert "No space left on device" in r.stderr and int(r.stdout.split()[-1]) <= (64 << 10) // 4 + 64
        box.exec("rm /tmp/big")
        # the pids limit stops a fork bomb, and the container still answers
        r = box.exec("bomb() { bomb | bomb & }; bomb; sleep 4", timeout=3)
        assert r.timed_out and "Resource temporarily unavailable" in r.stderr
        assert box.exec("cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max").stdout == "128\n"
        # the memory limit kills a memory bomb, and says so
        r = box.exec("python3 -c 'x = []\nwhile True: x.append(bytearray(16 * 2**20))'", timeout=60)
        assert r.oom_killed and r.signal == 9 and "exceeding the memory limit (256m)" in r.stderr
        assert box.exec("echo alive").stdout == "alive\n"
        # files go both ways on the command channel, through TLS
        box.put_file("/tmp/f.bin", bytes(range(256)) * 1000)
        assert box.get_file("/tmp/f.bin") == bytes(range(256)) * 1000
        # an answer not read yet is no hang-up: a TLS socket cannot be peeked at, so it is kept for the reader
        box._channel.send({"op": "ping"})
        time.sleep(1)
        assert box.alive()
        assert box._channel.receive(time.monotonic() + 10) == {}
        assert box.exec("echo still").stdout == "still\n"
    reaper().wait()
    assert not docker_client(host=engine2.unix).api.containers(all=True, filters={"id": box.id})


def test_a_repair_is_graded_on_the_second_engine(engine2: Engine) -> None:
    from sparring.envs.swe.bugs.store import load_repair_tasks
    from sparring.envs.swe.repair_env import SWERepairEnv

    tasks = load_repair_tasks(split="train")
    require(bool(tasks), "the stored bugs of the train split")
    task = tasks[0]
    env = SWERepairEnv(max_turns=4, tasks=[task], docker_hosts=[engine2.tls])
    try:
        env.reset(seed=0)
        assert env._sandbox.engine == engine2.tls
        # the oracle fix: the bug's diff, reversed
        diff = task["artifact"]["bug_inject_diff"]
        assert "SPARRING_END" not in diff
        obs, *_ = env.step(
            f"<bash>cat > /tmp/fix.diff <<'SPARRING_END'\n{diff}SPARRING_END\ngit apply -R /tmp/fix.diff</bash>"
        )
        assert "[exit code 0]" in obs, obs
        _, reward, terminated, _, info = env.step("<submit>reverted the bug</submit>")
        assert terminated and info["outcome"]["solved"] and reward == 1.0, info["outcome"]
        # doing nothing is not solved
        env.reset(seed=1)
        _, reward, terminated, _, info = env.step("<submit>nothing to do</submit>")
        assert terminated and not info["outcome"]["solved"] and reward == -1.0, info["outcome"]
        assert info["outcome"]["failing"] or info["outcome"]["missing"]
        assert env._pools.pool(task["image"]).hosts == [engine2.tls]
        reaper().wait()
        assert _on_local_engine() == []  # every container, the grading's too, ran on the second engine
    finally:
        env.close()


def test_unusable_engines_are_one_sentence(engine2: Engine, tmp_path: Path) -> None:
    nowhere = f"unix://{tmp_path}/docker.sock"
    with pytest.raises(SparringError, match=r"^the Docker engine at unix://\S+ is not reachable \(no Docker socket"):
        Sandbox.create(BASE_IMAGE, hosts=[nowhere])
    # an engine that does not answer is passed over while another does
    assert pick_engine([nowhere, engine2.unix]) == engine2.unix
    with pytest.raises(SparringError, match=r"ssh:// transport .*`ssh -NL"):
        check_engine_url("ssh://user@gpu-host")
    os.environ.pop("DOCKER_TLS_VERIFY")
    cert_path = os.environ.pop("DOCKER_CERT_PATH")
    try:
        with pytest.raises(SparringError, match=r"tcp://10.1.2.3:2375 is refused without TLS"):
            check_engine_url("tcp://10.1.2.3:2375")
        assert check_engine_url("tcp://127.0.0.1:2375") == "tcp://127.0.0.1:2375"  # this machine's own
    finally:
        os.environ |= {"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": cert_path}
    assert check_engine_url("tcp://10.1.2.3:2376") == "tcp://10.1.2.3:2376"
    with pytest.raises(SparringError, match="is not unix:///path/to/docker.sock or tcp://HOST:PORT"):
        check_engine_url("http//x")


def test_ties_go_in_turn_and_gc_reaches_the_second_engine(engine2: Engine) -> None:
    # the same engine under two URLs: always a tie, so the picks alternate
    picks = {pick_engine([engine2.unix, engine2.tls]) for _ in range(4)}
    assert picks == {engine2.unix, engine2.tls}
    ensure_image(engine2.unix, BASE_IMAGE)
    api = docker_client(host=engine2.unix).api
    dead = {LABEL: "1", OWNER_LABEL: f"{socket.gethostname()}:999999999:1"}
    orphan = api.create_container(BASE_IMAGE, command=["true"], labels=dead)["Id"]
    report = collect_garbage(hosts=[engine2.unix])
    assert report.containers >= 1 and not api.containers(all=True, filters={"id": orphan})


def test_the_training_key_reaches_every_sandbox_of_the_run(tmp_path: Path) -> None:
    from sparring.containers.engines import engine_hosts, use_docker_hosts
    from sparring.training.config import load_config
    from sparring.training.run import run_training

    with pytest.raises(SparringError, match="ssh:// transport"):
        load_config("cpu-demo", ["docker_hosts=ssh://user@gpu-host"])
    nowhere = f"unix://{tmp_path}/docker.sock"
    config = load_config("cpu-demo", [f"docker_hosts={nowhere}", "games=swe", f"out={tmp_path}/run"])
    assert config.docker_hosts == [nowhere]
    try:
        # the run stops before loading the model, in one sentence, and its sandboxes would go to that engine
        with pytest.raises(SparringError, match=rf"^the Docker engine at {nowhere} is not reachable"):
            run_training(config)
        assert engine_hosts() == (nowhere,)
    finally:
        use_docker_hosts([])
