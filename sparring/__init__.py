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
    "print_figures",
    "register_envs",
    "sparring_home",
]

#: Gymnasium id -> (entry point, default turn limit). Turn limits are the envs' `max_turns`.
ENV_SPECS: dict[str, tuple[str, int]] = {
    "sparring/SWEInject-v0": ("sparring.envs.swe.inject_env:SWEInjectEnv", 30),
    "sparring/SWERepair-v0": ("sparring.envs.swe.repair_env:SWERepairEnv", 30),
    "sparring/SearchPropose-v0": ("sparring.envs.search.propose_env:SearchProposeEnv", 8),
    "sparring/SearchAnswer-v0": ("sparring.envs.search.answer_env:SearchAnswerEnv", 6),
    "sparring/SWEJudge-v0": ("sparring.envs.swe.judge_env:SWEJudgeEnv", 4),
    "sparring/SearchJudge-v0": ("sparring.envs.search.judge_env:SearchJudgeEnv", 1),
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


def print_figures(figures: dict[str, object], as_json: bool) -> None:
    """How a ``sparring bench`` command prints its figures: one JSON object, or a ``key: value`` line each."""
    if as_json:
        import json

        print(json.dumps(figures))
        return
    width = max((len(key) for key in figures), default=0)
    for key, value in figures.items():
        print(f"{key:>{width}}: {value}")


def register_envs() -> None:
    """Register every Sparring env with Gymnasium (idempotent).

    The turn limit is the env's own ``max_turns``, so ``gym.make(id, max_turns=8)`` gets 8 turns
    that end with an ``outcome``. No TimeLimit is registered: one fixed at the default would cut a
    longer episode early, with no outcome and a wrong budget in its last observation. The env
    reports its limit as ``env.spec.max_episode_steps``; ``gym.make(id, max_episode_steps=N)``
    still adds Gymnasium's TimeLimit, which cuts at N where N is below ``max_turns``.
    """
    from gymnasium.envs.registration import register, registry

    for env_id, (entry_point, max_turns) in ENV_SPECS.items():
        if env_id in registry:
            continue
        register(id=env_id, entry_point=entry_point, nondeterministic=True, kwargs={"max_turns": max_turns})


register_envs()
