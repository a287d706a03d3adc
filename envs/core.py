"""The env contract shared by every Sparring environment, and its records.

Every env is a ``gymnasium.Env[str, str]``: the action is the model's raw text for one turn, the
env parses the tool call in it (:mod:`sparring.envs.tools`), runs the tool and answers with the
tool's output as the next observation. A malformed or unknown call is not an exception: the
observation says what was wrong and shows the correct form, and the turn counts. Every string
leaving an env (observation, info, outcome) is valid UTF-8: :class:`TextEnv` passes what its
``reset`` and ``step`` return through :func:`storable`, so a lone surrogate from a JSON escape or a
file name that is not UTF-8 reaches no record.

:class:`Episode` and :class:`Turn` are the records the runner writes and the trainer reads.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from sparring import SparringError
from sparring.envs.spaces import UnicodeText
from sparring.envs.tools import ToolCall, ToolCallError, parse_tool_call, tool_spec, valid_text

__all__ = [
    "EPISODE_SCHEMA_VERSION",
    "Episode",
    "TextEnv",
    "Turn",
    "content_id",
    "json_line",
    "reason_name",
    "storable",
]

#: Version of the episode record format. 1: the env's record alone (lines carry no version);
#: 2: with ``group_id``, ``sampling``, ``weights_version`` and ``schema_version`` (what training needs:
#: the group of attempts, how it was sampled, and how stale its weights were).
EPISODE_SCHEMA_VERSION = 2


def content_id(task: dict[str, Any], prefix: str = "task") -> str:
    """A task id from its whole content: ``prefix:`` and 16 hex digits of a SHA-256 of its JSON.

    Tasks that differ anywhere get different ids; a prefix of their text would merge those that
    begin alike.
    """
    return f"{prefix}:{hashlib.sha256(json.dumps(task, sort_keys=True, default=str).encode()).hexdigest()[:16]}"


def reason_name(reason: Any) -> str:
    """A rejection or end reason without its detail: ``"too_few_searches: 1 < 2"`` -> ``"too_few_searches"``.

    One name per kind of reason, so counts and metric series do not split on the detail.
    """
    return str(reason).split(":", 1)[0]


def storable(value: Any) -> Any:
    """``value`` with every string in it (keys too) valid UTF-8 (:func:`~sparring.envs.tools.valid_text`).

    Dicts, lists and tuples are walked; one is rebuilt only where something in it changed, so a
    clean value comes back as the same object. Other values are returned as they are.
    """
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, dict):
        items = [(storable(k), storable(v)) for k, v in value.items()]
        same = all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True))
        return value if same else dict(items)
    if isinstance(value, list | tuple):
        members = [storable(v) for v in value]
        same = all(v is v0 for v, v0 in zip(members, value, strict=True))
        if same:
            return value
        return members if isinstance(value, list) else tuple(members)
    return value


def json_line(record: Any) -> str:
    """One JSON line of ``record`` that always encodes as UTF-8, whatever its strings held.

    Strings go through :func:`storable`; bytes become text (invalid UTF-8 replaced) and any other
    value JSON has no form for becomes its ``str``, so a record never fails to be written.
    """
    return json.dumps(storable(record), ensure_ascii=False, default=_json_fallback)


def _json_fallback(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, set | frozenset):
        return storable(sorted(value, key=str))
    return valid_text(str(value))


# --------------------------------------------------------------------------- records


@dataclass
class Turn:
    """One turn of an episode: the model's action and what the env answered."""

    action: str
    observation: str
    reward: float
    tool: str | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass
class Episode:
    """A finished (or failed) episode, as the runner records it and the trainer consumes it.

    Token fields are filled by the agent side (``sparring.agents``): ``token_ids`` is the whole
    buffer (prompt, then per turn the sampled ids and the observation's ids); the parallel lists
    give each token's turn index (-1 for the prompt), whether it is an action token, and its
    behaviour logprob (0.0 for non-action tokens).
    """

    env_id: str
    role: str
    domain: str
    task_id: str
    task: dict[str, Any]
    prompt: str
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    outcome: dict[str, Any] = field(default_factory=dict)
    terminated: bool = False
    truncated: bool = False
    error: str | None = None
    seed: int | None = None
    token_ids: list[int] = field(default_factory=list)
    token_turn: list[int] = field(default_factory=list)
    action_mask: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    group_id: str | None = None
    """Group of episodes compared with each other (e.g. the G attempts at one task), or None."""
    sampling: dict[str, Any] = field(default_factory=dict)
    """The sampling settings of its turns: ``temperature``, ``top_p``, ``max_new_tokens``, ``stop``
    and ``seed`` (the run's base seed, from which each turn's own seed derives). Empty when nothing
    was sampled (scripted agents) or the record predates the field."""
    weights_version: int | None = None
    """The generator's ``weights_version`` when its turns were sampled (the oldest one if the
    weights changed during the episode); None without a token generator."""
    schema_version: int = EPISODE_SCHEMA_VERSION
    """Format version of the record (see :data:`EPISODE_SCHEMA_VERSION`)."""

    @property
    def turn_rewards(self) -> list[float]:
        """Per-turn rewards, in order."""
        return [t.reward for t in self.turns]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (one JSONL line)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Episode:
        """Inverse of :meth:`to_dict`; also reads records of older formats.

        Raises:
            SparringError: The record was written by a newer Sparring (a format this one cannot read).
        """
        data = dict(data)
        data.setdefault("schema_version", 1)  # format 1 carried no version
        if data["schema_version"] > EPISODE_SCHEMA_VERSION:
            raise SparringError(
                f"the episode record has format {data['schema_version']}, newer than this Sparring reads "
                f"({EPISODE_SCHEMA_VERSION}); upgrade sparring to read it."
            )
        data["turns"] = [Turn(**t) for t in data.get("turns", [])]
        return cls(**data)


# --------------------------------------------------------------------------- base env


class TextEnv(gym.Env[str, str]):
    """Base of every Sparring env: turn accounting, tool dispatch, info fields, outcome.

    Subclasses set ``role`` and ``domain``, define tools with :func:`tool`, and implement:

    * :meth:`_draw_task` — a task (a JSON-serialisable dict with an ``"id"``) drawn with
      ``self.np_random``, used when ``reset`` gets no ``options["task"]``;
    * :meth:`_begin` — set the task up and return the first observation (the prompt);
    * :meth:`_on_turn_limit` — the outcome when the turn limit ends the episode.

    A tool ends the episode by calling :meth:`_finish` with the outcome dict and outcome reward.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}
    role: ClassVar[str] = ""
    domain: ClassVar[str] = ""

    def __init__(self, *, max_turns: int = 10, max_length: int = 1 << 20, render_mode: str | None = None):
        """Create the env.

        Args:
            max_turns: Turn limit; the episode is truncated after this many steps.
            max_length: Bound on the characters of an action and an observation.
            render_mode: ``"ansi"`` renders the transcript as text, or None.
        """
        self.max_turns = int(max_turns)
        self.render_mode = render_mode
        self._max_length = int(max_length)
        self.observation_space = UnicodeText(max_length)
        self.action_space = UnicodeText(max_length)
        self._tool_specs = {
            name: tool_spec(getattr(type(self), name))
            for name in dir(type(self))
            if getattr(getattr(type(self), name), "__sparring_tool__", False)
        }
        self._task: dict[str, Any] | None = None
        self._turn = 0
        self._done = False
        self._outcome: dict[str, Any] | None = None
        self._outcome_reward = 0.0
        self._transcript: list[str] = []

    # -- subclass hooks -----------------------------------------------------------------

    def _draw_task(self) -> dict[str, Any]:
        raise NotImplementedError

    def _begin(self, task: dict[str, Any]) -> str:
        raise NotImplementedError

    def _on_turn_limit(self) -> tuple[dict[str, Any], float]:
        """Outcome and outcome reward when the turn limit is reached without a submission."""
        return {"status": "turn_limit"}, 0.0

    # -- helpers for subclasses -----------------------------------------------------------

    def _finish(self, outcome: dict[str, Any], reward: float) -> None:
        """End the episode with this outcome; called by the submitting tool."""
        self._done = True
        self._outcome = outcome
        self._outcome_reward = float(reward)

    def _turn_reward(self, call: ToolCall | ToolCallError) -> float:
        """Turn-level reward of one step (0 by default; the outcome reward is added at the end)."""
        return 0.0

    # -- public API -----------------------------------------------------------------------

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tools as JSON schemas for a chat template."""
        return [spec.schema() for spec in self._tool_specs.values()]

    @property
    def spec(self) -> EnvSpec | None:  # type: ignore[override]
        """How ``gym.make`` built the env; ``max_episode_steps`` is the env's own turn limit.

        The envs are registered without a TimeLimit (the env ends the episode itself, with its
        outcome), yet libraries read the horizon from ``spec.max_episode_steps``.
        """
        spec = self.__dict__.get("_spec")
        if spec is None or spec.max_episode_steps is not None:
            return spec
        return replace(spec, max_episode_steps=self.max_turns)

    @spec.setter
    def spec(self, spec: EnvSpec | None) -> None:
        self._spec = spec

    @property
    def task(self) -> dict[str, Any] | None:
        """The current task (serialisable), or None before the first reset."""
        return self._task

    def _info(self) -> dict[str, Any]:
        assert self._task is not None
        return {"role": self.role, "domain": self.domain, "task_id": str(self._task["id"]), "turn": self._turn}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode on ``options["task"]`` or on a task drawn with ``self.np_random``.

        A given task without an ``"id"`` gets one from its content (:func:`content_id`).
        """
        super().reset(seed=seed)
        task = (options or {}).get("task") or self._draw_task()
        if not isinstance(task, dict):
            raise SparringError(f'options["task"] must be a dict (a JSON object), not {type(task).__name__}.')
        if "id" not in task:
            task = {"id": content_id(task), **task}
        self._task = task
        self._turn = 0
        self._done = False
        self._outcome = None
        self._outcome_reward = 0.0
        obs = valid_text(_with_budget(self._begin(task), self.max_turns))
        self._transcript = [obs]
        info = self._info() | {"task": task, "tools": self.tools}
        return obs, storable(info)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Parse and run the tool call in ``action``; see the module docstring for the forms.

        ``info`` has ``role``, ``domain``, ``task_id`` and ``turn``; then ``tool`` (the name of the
        tool called) or ``error`` (why the action held no valid call), and ``outcome`` on the
        terminal step.
        """
        if self._task is None or self._done:
            raise RuntimeError("step() called on a finished episode; call reset() first.")
        self._turn += 1
        action = valid_text(str(action))
        call = parse_tool_call(action, self._tool_specs, max_chars=self._max_length)
        if isinstance(call, ToolCallError):
            obs = call.message
        else:
            obs = getattr(self, call.name)(**call.arguments)
        obs = valid_text(obs)
        reward = self._turn_reward(call)
        terminated = self._done
        truncated = not terminated and self._turn >= self.max_turns
        if truncated:
            outcome, outcome_reward = self._on_turn_limit()
            self._finish(outcome, outcome_reward)
        if self._done:
            reward += self._outcome_reward
        else:
            obs = _with_budget(obs, self.max_turns - self._turn)
        info = self._info()
        if isinstance(call, ToolCallError):
            info["error"] = call.message
        else:
            info["tool"] = call.name  # the runner records it as Turn.tool
        if self._done:
            # The outcome reward travels with the outcome, so a trainer can tell it from turn rewards.
            info["outcome"] = self._outcome | {"reward": self._outcome_reward}
        self._transcript += [action, obs]
        return obs, reward, terminated, truncated, storable(info)

    def get_reward(self) -> float:
        """The outcome reward of the current episode (0 until it ends); for TRL reward functions."""
        return self._outcome_reward

    def render(self) -> str | None:
        """The transcript so far as text (``render_mode="ansi"``)."""
        if self.render_mode != "ansi":
            return None
        return "\n\n".join(self._transcript)


def _with_budget(obs: str, left: int) -> str:
    """``obs`` ending with the turns the agent has left (every observation that asks for an action)."""
    return f"{obs}\n[{left} turn{'s' if left != 1 else ''} left]"
