"""The env contract shared by every Sparring environment (DESIGN §3.1).

Every env is a ``gymnasium.Env[str, str]``: the action is the model's raw text for one turn, the
env parses the tool call in it, runs the tool and answers with the tool's output as the next
observation. Tools are plain typed methods with Google docstrings, marked with :func:`tool`, so
the same env serves a Gymnasium loop (``step``), a chat template (``info["tools"]`` JSON schemas)
and TRL's ``environment_factory`` (call the methods directly).

Two tool-call forms are accepted in an action:

* JSON, as chat templates with tools produce:
  ``<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>``
* the shorthand for a tool with one required argument: ``<bash>ls</bash>``.

A malformed or unknown call is not an exception: the observation says what was wrong and shows
the correct form, and the turn counts.
"""

from __future__ import annotations

import inspect
import json
import re
import string
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
import numpy as np

__all__ = [
    "Episode",
    "TextEnv",
    "ToolCall",
    "ToolCallError",
    "ToolSpec",
    "Turn",
    "UnicodeText",
    "parse_tool_call",
    "tool",
    "tool_spec",
]

# --------------------------------------------------------------------------- spaces


class UnicodeText(gym.Space[str]):
    """Any ``str`` up to ``max_length`` characters.

    ``gymnasium.spaces.Text`` only admits a fixed charset (alphanumerics by default), which
    rejects the punctuation, newlines and non-ASCII that model outputs and tool outputs contain.

    Example:
        >>> space = UnicodeText(max_length=100)
        >>> space.contains("print('héllo')\\n")
        True
    """

    _SAMPLE_CHARS = string.printable + "äöüßéèçñ—“”‘’…→λπ中文"

    def __init__(self, max_length: int = 1 << 20, seed: int | np.random.Generator | None = None):
        """Create the space; ``max_length`` bounds the characters of a member."""
        self.max_length = int(max_length)
        super().__init__(dtype=str, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """Random printable text (with punctuation and some non-ASCII), up to 64 characters."""
        length = int(self.np_random.integers(0, min(64, self.max_length) + 1))
        chars = self.np_random.choice(list(self._SAMPLE_CHARS), size=length)
        return "".join(chars.tolist())

    def contains(self, x: Any) -> bool:
        """A member is any ``str`` of at most ``max_length`` characters."""
        return isinstance(x, str) and len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        """Text has no fixed-size array form."""
        return False

    def __repr__(self) -> str:
        return f"UnicodeText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnicodeText) and other.max_length == self.max_length


# --------------------------------------------------------------------------- tools

F = TypeVar("F", bound=Callable[..., str])

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def tool(fn: F) -> F:
    """Mark a method of a :class:`TextEnv` as a tool the model can call.

    The method's name is the tool's name, its type hints give the JSON schema types and its
    Google-style docstring (summary + ``Args:``) gives the descriptions. It returns the
    observation text.
    """
    fn.__sparring_tool__ = True  # type: ignore[attr-defined]
    return fn


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the env exposes it: name, description, JSON-schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any]
    required: tuple[str, ...]

    def schema(self) -> dict[str, Any]:
        """The OpenAI/HF chat-template form: ``{"type": "function", "function": {...}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": self.parameters,
                    "required": list(self.required),
                },
            },
        }

    def example(self) -> str:
        """One correct call of this tool, shown to the model after a malformed call."""
        args = {name: f"<{name}>" for name in self.required}
        json_form = f'<tool_call>{{"name": "{self.name}", "arguments": {json.dumps(args)}}}</tool_call>'
        if len(self.required) == 1:
            return f"<{self.name}>...</{self.name}>  or  {json_form}"
        return json_form


def _parse_google_doc(doc: str) -> tuple[str, dict[str, str]]:
    """Summary and ``Args:`` descriptions of a Google-style docstring."""
    doc = inspect.cleandoc(doc or "")
    summary_lines: list[str] = []
    args: dict[str, str] = {}
    section = "summary"
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in {"Args:", "Arguments:"}:
            section = "args"
            continue
        if stripped.endswith(":") and stripped[:-1] in {"Returns", "Raises", "Example", "Examples"}:
            section = "other"
            continue
        if section == "summary":
            summary_lines.append(stripped)
        elif section == "args" and stripped:
            m = re.match(r"^(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", stripped)
            if m and line.startswith(("    ", "\t")) and not line.startswith(("        ", "\t\t")):
                current = m.group(1)
                args[current] = m.group(2)
            elif current:
                args[current] += " " + stripped
    return " ".join(s for s in summary_lines if s).strip(), args


def tool_spec(fn: Callable[..., Any]) -> ToolSpec:
    """Build the :class:`ToolSpec` of a tool method from its signature and docstring."""
    summary, arg_docs = _parse_google_doc(fn.__doc__ or "")
    hints = typing.get_type_hints(fn)
    params: dict[str, Any] = {}
    required: list[str] = []
    for name, p in inspect.signature(fn).parameters.items():
        if name == "self":
            continue
        hint = hints.get(name, str)
        origin_args = typing.get_args(hint)
        if hint not in _JSON_TYPES and origin_args:  # X | None
            hint = next((a for a in origin_args if a is not type(None)), str)
        params[name] = {"type": _JSON_TYPES.get(hint, "string"), "description": arg_docs.get(name, "")}
        if p.default is inspect.Parameter.empty:
            required.append(name)
    return ToolSpec(fn.__name__, summary, params, tuple(required))


@dataclass(frozen=True)
class ToolCall:
    """A parsed tool call."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolCallError:
    """Why an action holds no valid tool call; ``message`` is the observation the model sees."""

    message: str


_TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def _usage(specs: dict[str, ToolSpec]) -> str:
    return "Call one tool per turn, for example:\n" + "\n".join(f"  {s.example()}" for s in specs.values())


def parse_tool_call(text: str, specs: dict[str, ToolSpec]) -> ToolCall | ToolCallError:
    """Find the first tool call in ``text``.

    Args:
        text: The model's raw output for one turn.
        specs: The tools the env offers, by name.

    Returns:
        The call, or a :class:`ToolCallError` whose message says what was wrong and how to call.
    """
    m = _TOOL_CALL_RE.search(text)
    if m:
        body = m.group(1).strip()
        try:
            payload = json.loads(body)
        except json.JSONDecodeError as e:
            return ToolCallError(f"Error: the <tool_call> body is not valid JSON ({e.msg}).\n{_usage(specs)}")
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            return ToolCallError(
                'Error: a <tool_call> must be a JSON object with "name" and "arguments".\n' + _usage(specs)
            )
        name = payload["name"]
        args = payload.get("arguments", payload.get("parameters", {}))
        if isinstance(args, str):  # some templates double-encode the arguments
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                args = None
        if not isinstance(args, dict):
            return ToolCallError(f'Error: "arguments" of {name!r} must be a JSON object.\n{_usage(specs)}')
        return _check_call(name, args, specs)

    # Shorthand <name>value</name>: the earliest tag of a known tool wins.
    best: tuple[int, str, str] | None = None
    for name in specs:
        m2 = re.search(rf"<{re.escape(name)}>(.*?)</{re.escape(name)}>", text, re.DOTALL)
        if m2 and (best is None or m2.start() < best[0]):
            best = (m2.start(), name, m2.group(1))
    if best is not None:
        _, name, value = best
        spec = specs[name]
        if len(spec.required) != 1:
            return ToolCallError(
                f"Error: {name!r} takes {len(spec.required)} arguments; use the JSON form:\n  {spec.example()}"
            )
        return _check_call(name, {spec.required[0]: value.strip("\n")}, specs)

    tag = re.search(r"<([A-Za-z_][\w-]*)>", text)
    if tag and tag.group(1) not in specs and tag.group(1) not in {"think", "tool_call"}:
        return ToolCallError(f"Error: unknown tool {tag.group(1)!r}; tools: {', '.join(specs)}.\n{_usage(specs)}")
    return ToolCallError("Error: no tool call found in your message.\n" + _usage(specs))


def _check_call(name: str, args: dict[str, Any], specs: dict[str, ToolSpec]) -> ToolCall | ToolCallError:
    spec = specs.get(name)
    if spec is None:
        return ToolCallError(f"Error: unknown tool {name!r}; tools: {', '.join(specs)}.\n{_usage(specs)}")
    missing = [a for a in spec.required if a not in args]
    unknown = [a for a in args if a not in spec.parameters]
    if missing or unknown:
        what = []
        if missing:
            what.append(f"missing argument(s) {', '.join(missing)}")
        if unknown:
            what.append(f"unknown argument(s) {', '.join(unknown)}")
        return ToolCallError(f"Error: {name!r} called with {' and '.join(what)}. Use:\n  {spec.example()}")
    converted: dict[str, Any] = {}
    for key, value in args.items():
        kind = spec.parameters[key]["type"]
        try:
            if kind == "integer":
                value = int(value)
            elif kind == "number":
                value = float(value)
            elif kind == "boolean" and isinstance(value, str):
                value = value.strip().lower() in {"1", "true", "yes"}
            elif kind == "string" and not isinstance(value, str):
                value = json.dumps(value) if isinstance(value, dict | list) else str(value)
        except (TypeError, ValueError):
            return ToolCallError(
                f"Error: argument {key!r} of {name!r} must be of type {kind}. Use:\n  {spec.example()}"
            )
        converted[key] = value
    return ToolCall(name, converted)


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

    @property
    def turn_rewards(self) -> list[float]:
        """Per-turn rewards, in order."""
        return [t.reward for t in self.turns]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (one JSONL line)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Episode:
        """Inverse of :meth:`to_dict`."""
        data = dict(data)
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
    def task(self) -> dict[str, Any] | None:
        """The current task (serialisable), or None before the first reset."""
        return self._task

    def _info(self) -> dict[str, Any]:
        assert self._task is not None
        return {"role": self.role, "domain": self.domain, "task_id": str(self._task["id"]), "turn": self._turn}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode on ``options["task"]`` or on a task drawn with ``self.np_random``."""
        super().reset(seed=seed)
        task = (options or {}).get("task") or self._draw_task()
        self._task = task
        self._turn = 0
        self._done = False
        self._outcome = None
        self._outcome_reward = 0.0
        obs = _with_budget(self._begin(task), self.max_turns)
        self._transcript = [obs]
        info = self._info() | {"task": task, "tools": self.tools}
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Parse and run the tool call in ``action``; see the module docstring for the forms."""
        if self._task is None or self._done:
            raise RuntimeError("step() called on a finished episode; call reset() first.")
        self._turn += 1
        call = parse_tool_call(str(action), self._tool_specs)
        if isinstance(call, ToolCallError):
            obs = call.message
        else:
            obs = getattr(self, call.name)(**call.arguments)
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
        if self._done:
            info["outcome"] = self._outcome
        self._transcript += [action, obs]
        return obs, reward, terminated, truncated, info

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
