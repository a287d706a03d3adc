"""Adapter from a Sparring env to TRL's ``GRPOTrainer(environment_factory=...)``.

TRL treats every public function on the environment's class (other than ``reset`` and
``get_reward``) as a tool, and expects ``reset(**dataset_row)`` to return the text appended to
the prompt. A ``gymnasium.Env`` has public ``step``/``render``/``close`` methods and a ``reset``
returning ``(obs, info)``, so it cannot be passed as is. :func:`trl_environment_factory` builds a
class whose public functions are exactly the env's tools, forwarding to the env::

    from trl import GRPOTrainer
    from sparring.envs.trl import trl_environment_factory

    trainer = GRPOTrainer(model=..., train_dataset=ds, environment_factory=trl_environment_factory(
        "sparring/SearchAnswer-v0"))

A dataset row may carry ``task`` (a task dict, as the env's ``info["task"]``) and/or ``seed``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from sparring.envs.core import TextEnv

__all__ = ["trl_environment_factory"]


def _forwarder(name: str, method: Callable[..., str]) -> Callable[..., str]:
    """A function with ``method``'s name, signature and docstring that calls the wrapped env's tool."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> str:
        return getattr(self._env, name)(*args, **kwargs)

    del call.__wrapped__  # TRL/transformers read the signature from the function itself
    call.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    return call


def trl_environment_factory(env_id: str, **make_kwargs: Any) -> Callable[[], Any]:
    """A zero-argument factory of TRL environments wrapping ``gym.make(env_id, **make_kwargs)``.

    Args:
        env_id: A registered Sparring env id, e.g. ``"sparring/SearchAnswer-v0"``.
        **make_kwargs: Passed to ``gym.make``.

    Returns:
        A callable creating one environment object per TRL rollout slot.
    """
    probe = gym.make(env_id, **make_kwargs).unwrapped
    if not isinstance(probe, TextEnv):
        raise TypeError(f"{env_id} is not a Sparring text env")
    tool_names = list(probe._tool_specs)
    probe.close()

    def __init__(self: Any) -> None:
        self._env = gym.make(env_id, **make_kwargs).unwrapped

    def reset(self: Any, **row: Any) -> str:
        """Start an episode on the row's ``task`` (or one drawn with its ``seed``); return the prompt."""
        options = {"task": row["task"]} if row.get("task") else None
        obs, _ = self._env.reset(seed=row.get("seed"), options=options)
        return obs

    def get_reward(self: Any) -> float:
        """The episode's outcome reward."""
        return self._env.get_reward()

    namespace: dict[str, Any] = {"__init__": __init__, "reset": reset, "get_reward": get_reward}
    for name in tool_names:
        namespace[name] = _forwarder(name, getattr(type(probe), name))
    cls = type(f"TRL{type(probe).__name__}", (), namespace)
    return cls
