"""Sparring: self-play environments and a co-training trainer for LLM agents.

Importing this package registers the environments with Gymnasium, so both of these work::

    import gymnasium as gym
    import sparring  # noqa: F401
    env = gym.make("sparring/SearchAnswer-v0")
    env = gym.make("sparring:sparring/SWERepair-v0")  # imports sparring itself

Nothing here imports torch: the environments are usable without the training extras.
"""

from __future__ import annotations

import os
from pathlib import Path

__version__ = "0.1.0"

__all__ = [
    "ENV_SPECS",
    "ServerUnavailable",
    "SparringError",
    "__version__",
    "bench_machine",
    "register_envs",
    "sparring_home",
]

#: Gymnasium id -> (entry point, default turn limit). Turn limits are the envs' `max_turns`.
ENV_SPECS: dict[str, tuple[str, int]] = {
    "sparring/SWEInject-v0": ("sparring.envs.swe.inject_env:SWEInjectEnv", 30),
    "sparring/SWERepair-v0": ("sparring.envs.swe.repair_env:SWERepairEnv", 30),
    "sparring/SearchPropose-v0": ("sparring.envs.search.propose_env:SearchProposeEnv", 8),
    "sparring/SearchAnswer-v0": ("sparring.envs.search.answer_env:SearchAnswerEnv", 6),
}


class SparringError(Exception):
    """An error the user can fix (bad config, unknown repo, missing corpus, Docker not running).

    Its message is one sentence saying what is wrong and how to fix it; the CLI prints it without a
    traceback and exits with status 2.
    """


class ServerUnavailable(SparringError):
    """A server or engine did not answer after its retries: transient, so a trainer may retry the work.

    What the agent causes is never an exception: it is an observation or a failed outcome.
    """


def sparring_home() -> Path:
    """Folder for everything setup builds (images' inputs, corpora, model cache, bug stores).

    ``$SPARRING_HOME`` if set, else ``~/.cache/sparring``. Nothing in it is ever committed.
    """
    home = Path(os.environ.get("SPARRING_HOME", Path.home() / ".cache" / "sparring"))
    home.mkdir(parents=True, exist_ok=True)
    return home


def bench_machine() -> dict[str, object]:
    """What a ``sparring bench`` figure was measured on: architecture, cores, load, Python."""
    import platform

    return {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
    }


def register_envs() -> None:
    """Register every Sparring env with Gymnasium (idempotent)."""
    from gymnasium.envs.registration import register, registry

    for env_id, (entry_point, max_turns) in ENV_SPECS.items():
        if env_id in registry:
            continue
        register(
            id=env_id,
            entry_point=entry_point,
            max_episode_steps=max_turns,
            nondeterministic=True,
            kwargs={"max_turns": max_turns},
        )


register_envs()
