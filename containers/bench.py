"""``sparring bench sandbox``: what a command and a reset cost, against plain Docker, in one run.

Figures (milliseconds are medians; exec figures are taken with a 20 ms pause before each timed
command, as an agent's commands come between generations, except the back-to-back one):

- ``exec_p50_ms``: ``true`` through :meth:`Sandbox.exec` (the command server) as the sandbox user.
- ``exec_p50_ms_back_to_back``: the same with no pause (the server has no time to pre-start a shell).
- ``exec_p50_ms_root``: ``true`` as root (the harness's commands; always a fresh bash).
- ``exec_p50_ms_docker_py``: docker-py ``exec_run("true")`` as the same user in the same container.
- ``exec_p50_ms_docker_cli``: ``docker exec --user sparring ID true`` in the same container.
- ``reset_p50_ms``: an episode's reset with a warm pool (release the old container, acquire a new one).
- ``cold_start_p50_ms``: what a reset costs without a pool: create, start, first command, remove.
- ``containers_per_s``: containers a pool hands out per second when drained continuously.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time
from collections.abc import Callable

from sparring import bench_machine
from sparring.containers.base_image import BASE_IMAGE, base_image_status
from sparring.containers.cleanup import reaper
from sparring.containers.docker_engine import docker_client
from sparring.containers.sandbox import Sandbox, SandboxPool

#: Pause between two timed commands: an agent always spends longer than this generating the next one.
THINK_S = 0.02


def _p50_ms(action: Callable[[], object], rounds: int, pause: float = 0.0) -> float:
    times = []
    for _ in range(rounds):
        time.sleep(pause)
        t0 = time.perf_counter()
        action()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1000, 2)


def _cold_start(image: str) -> None:
    box = Sandbox.create(image)
    box.exec("true")
    box.close()
    reaper().wait()


def _reset_p50_ms(image: str, rounds: int) -> float:
    times = []
    with SandboxPool(image, size=2) as pool:
        box = pool.acquire()
        for _ in range(rounds):
            pool.wait_ready(1)  # an episode lasts longer than a container start
            t0 = time.perf_counter()
            pool.release(box)
            box = pool.acquire()
            times.append(time.perf_counter() - t0)
            box.exec("true")
        pool.release(box)
    reaper().wait()
    return round(statistics.median(times) * 1000, 2)


def _containers_per_s(image: str, count: int) -> float:
    with SandboxPool(image, size=2) as pool:
        t0 = time.perf_counter()
        for _ in range(count):
            pool.release(pool.acquire())
        elapsed = time.perf_counter() - t0
    reaper().wait()
    return round(count / elapsed, 2)


def run_sandbox_bench(rounds: int = 50, image: str = BASE_IMAGE) -> dict[str, object]:
    """Measure every figure in one run and return them as one JSON-ready dict.

    Raises:
        SparringError: The ``docker`` CLI is not on PATH, or the base image is missing.
    """
    from sparring import SparringError

    if shutil.which("docker") is None:  # checked first: the CLI figure comes after a minute of others
        raise SparringError(
            "the bench compares against the `docker` command-line client, which is not on PATH; "
            "install it (e.g. `apt-get install docker.io`) or add its folder to PATH."
        )
    ok, detail = base_image_status()
    if image == BASE_IMAGE and not ok:
        raise SparringError(f"the base image is needed ({detail}); run `sparring build base`.")
    client = docker_client()
    box = Sandbox.create(image)
    try:
        box.exec("true")
        container = client.containers.get(box.id)
        exec_p50 = _p50_ms(lambda: box.exec("true"), rounds, THINK_S)
        back_to_back = _p50_ms(lambda: box.exec("true"), rounds)
        as_root = _p50_ms(lambda: box.exec("true", user="root"), rounds, THINK_S)
        docker_py = _p50_ms(lambda: container.exec_run(["true"], user="sparring"), rounds, THINK_S)
        cli = ["docker", "exec", "--user", "sparring", box.id, "true"]
        docker_cli = _p50_ms(lambda: subprocess.run(cli, check=True), min(rounds, 20), THINK_S)
    finally:
        box.close()
    cold = _p50_ms(lambda: _cold_start(image), max(5, rounds // 5))
    reset = _reset_p50_ms(image, max(5, rounds // 2))
    per_s = _containers_per_s(image, max(10, rounds // 2))
    return {
        "bench": "sandbox",
        "image": image,
        "rounds": rounds,
        "exec_p50_ms": exec_p50,
        "exec_p50_ms_back_to_back": back_to_back,
        "exec_p50_ms_root": as_root,
        "exec_p50_ms_docker_py": docker_py,
        "exec_p50_ms_docker_cli": docker_cli,
        "exec_vs_docker_py": round(exec_p50 / docker_py, 3),
        "reset_p50_ms": reset,
        "cold_start_p50_ms": cold,
        "reset_vs_cold_start": round(reset / cold, 5),
        "containers_per_s": per_s,
        "docker": client.version().get("Version"),
        **bench_machine(),
    }
