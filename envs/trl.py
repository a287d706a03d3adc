"""Adapter from a Sparring env to TRL's ``GRPOTrainer(environment_factory=...)``.

TRL treats every public function on the environment's class (other than ``reset`` and
``get_reward``) as a tool, and expects ``reset(**dataset_row)`` to return the text appended to
the prompt. A ``gymnasium.Env`` has public ``step``/``render``/``close`` methods and a ``reset``
returning ``(obs, info)``, so it cannot be passed as is. :func:`trl_environment_factory` builds a
class whose public functions are exactly the env's tools, forwarding to the env::

    from trl import GRPOTrainer
    from sparring.envs.trl import chatml_tool_template, trl_environment_factory

    tokenizer.chat_template = chatml_tool_template()  # SmolLM2's own template renders no tools
    trainer = GRPOTrainer(model=..., processing_class=tokenizer, train_dataset=ds,
                          environment_factory=trl_environment_factory("sparring/SearchAnswer-v0"))

A dataset row may carry ``task`` (a task dict, as the env's ``info["task"]``) and/or ``seed``.

Each tool call is played as one ``env.step`` (the call written in the env's JSON form), so an
episode under TRL keeps the env's rules: the turn limit and its outcome, the ``[N turns left]``
line, turn rewards. A call after the episode ended raises, which TRL reports to the model as the
tool's error and counts as a failed call; TRL ends a rollout when the model calls no tool, or after
``GRPOConfig.max_tool_calling_iterations`` rounds of calls, dropping the calls of the completion after
the last round: set it to ``max_turns`` so that an answer on the env's last turn is played. The
dataset's columns, the reward and a full example: docs/integrations.md.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from sparring.envs.core import TextEnv

__all__ = ["chatml_tool_template", "trl_environment_factory"]


def _forwarder(name: str, method: Callable[..., str]) -> Callable[..., str]:
    """A function with ``method``'s name, signature and docstring that plays the call as one env step."""
    signature = inspect.signature(method)
    names = list(signature.parameters)[1:]  # after the env's own `self`

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> str:
        # Not bound against the signature: a wrong argument is the env's to answer, with its usage
        # message and a turn spent, as when the runner parses the same call from text.
        return self._play(name, dict(zip(names, args, strict=False)) | kwargs)

    del call.__wrapped__  # TRL/transformers read the signature from the function itself
    call.__signature__ = signature  # type: ignore[attr-defined]
    return call


def trl_environment_factory(env_id: str, **make_kwargs: Any) -> Callable[[], Any]:
    """A zero-argument factory of TRL environments wrapping ``gym.make(env_id, **make_kwargs)``.

    Args:
        env_id: A registered Sparring env id, e.g. ``"sparring/SearchAnswer-v0"``.
        **make_kwargs: Passed to ``gym.make`` (e.g. ``max_turns``).

    Returns:
        A callable creating one environment object per TRL rollout slot.
    """
    probe = gym.make(env_id, **make_kwargs).unwrapped
    if not isinstance(probe, TextEnv):
        raise TypeError(f"{env_id} is not a Sparring text env")
    tool_names = [schema["function"]["name"] for schema in probe.tools]
    probe.close()

    def __init__(self: Any) -> None:
        self._env = gym.make(env_id, **make_kwargs).unwrapped
        self._over = False

    def reset(self: Any, **row: Any) -> str:
        """Start an episode on the row's ``task`` (or one drawn with its ``seed``); return the prompt."""
        options = {"task": row["task"]} if row.get("task") else None
        obs, _ = self._env.reset(seed=row.get("seed"), options=options)
        self._over = False
        return obs

    def get_reward(self: Any) -> float:
        """The episode's outcome reward (0 until it ends)."""
        return self._env.get_reward()

    def _play(self: Any, name: str, arguments: dict[str, Any]) -> str:
        if self._over:
            raise RuntimeError("the episode is over; no more tool calls are taken")
        action = f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
        obs, _, terminated, truncated, _ = self._env.step(action)
        self._over = terminated or truncated
        return obs

    namespace: dict[str, Any] = {"__init__": __init__, "reset": reset, "get_reward": get_reward, "_play": _play}
    for name in tool_names:
        namespace[name] = _forwarder(name, getattr(type(probe), name))
    return type(f"TRL{type(probe).__name__}", (), namespace)


def chatml_tool_template() -> str:
    """A ChatML chat template that renders tools, for models whose own template does not (SmolLM2).

    TRL refuses a template that cannot render a tool-calling conversation. SmolLM2 speaks ChatML
    (``<|im_start|>``/``<|im_end|>``), so this is TRL's copy of the Qwen2.5 ChatML template, whose
    ``<tool_call>`` JSON TRL also knows how to parse; TRL swaps in its prefix-preserving training
    variant itself. Its default system line names Qwen, so pass a system message of your own.
    """
    from trl.chat_template_utils import qwen2_5_chat_template

    return qwen2_5_chat_template
