"""Scripted agents for tests and baselines: they act from text, with no model.

An agent here answers ``act(observation, info) -> action``; the episode runner plays it exactly
like a model, so a scripted baseline and a policy produce the same :class:`Episode` records (with
empty token fields).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "Agent",
    "DoNothingAgent",
    "OracleAgent",
    "RandomToolAgent",
    "ReplayAgent",
    "RetrievalFloorAgent",
    "copied_title",
]


def copied_title(title: str) -> str:
    """A title as an answer copies it: after a space, as the results show it (``(Title: Duchamp)``).

    A byte-level BPE splits a word differently with and without its leading space (SmolLM2:
    ``ĠDuch·amp`` after ``Title:``, ``D·uch·amp`` after ``<answer>``). A small model copies the
    tokens it reads well and re-spells a word in other tokens badly ("Dachamp", "Muhanism"), so the
    demonstrations answer in the observation's own tokens. Answers are scored after normalisation,
    so the space changes no score.

    Example:
        >>> copied_title("Duchamp")
        ' Duchamp'
    """
    return " " + title.strip() if title.strip() else ""


@runtime_checkable
class Agent(Protocol):
    """A text policy for one episode at a time."""

    name: str

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Start a new episode with its first observation and reset info."""
        ...

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The next action for the latest observation."""
        ...


class ReplayAgent:
    """Plays a fixed list of actions in order (a known fix, a known bug); then repeats the last one.

    Example:
        >>> agent = ReplayAgent(["<peek>0</peek>", "<answer>7</answer>"])
    """

    def __init__(self, actions: Sequence[str], name: str = "replay"):
        """Remember the actions to replay."""
        if not actions:
            raise ValueError("a replay agent needs at least one action")
        self.actions = list(actions)
        self.name = name
        self._next = 0

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Start over from the first action."""
        self._next = 0

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The next scripted action."""
        action = self.actions[min(self._next, len(self.actions) - 1)]
        self._next += 1
        return action


class RandomToolAgent:
    """Calls a random tool of the env with random short arguments each turn (a floor baseline).

    The tools come from the reset ``info["tools"]`` JSON schemas, so it works on any env; calls
    alternate between the JSON and the shorthand forms so both parsers are exercised.
    """

    def __init__(self, seed: int | None = None, vocabulary: Sequence[str] = (), name: str = "random-tool"):
        """Seed the choices; ``vocabulary`` supplies string arguments (default: a few generic words)."""
        self.rng = np.random.default_rng(seed)
        self.vocabulary = list(vocabulary) or ["test", "error", "python", "0", "1", "README", "ls", "the"]
        self.name = name
        self._tools: list[dict[str, Any]] = []

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Read the tools of the new episode."""
        self._tools = [t.get("function", t) for t in info.get("tools", [])]

    def _value(self, kind: str) -> Any:
        if kind == "integer":
            return int(self.rng.integers(0, 5))
        if kind == "number":
            return float(self.rng.random())
        if kind == "boolean":
            return bool(self.rng.integers(0, 2))
        return " ".join(self.rng.choice(self.vocabulary, size=int(self.rng.integers(1, 4))).tolist())

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """A random call of a random tool."""
        if not self._tools:
            return "I have no tools."
        fn = self._tools[int(self.rng.integers(0, len(self._tools)))]
        params = fn.get("parameters", {})
        required = params.get("required", [])
        args = {name: self._value(params["properties"][name].get("type", "string")) for name in required}
        if len(required) == 1 and self.rng.random() < 0.5:
            return f"<{fn['name']}>{args[required[0]]}</{fn['name']}>"
        return f"<tool_call>{json.dumps({'name': fn['name'], 'arguments': args})}</tool_call>"


class RetrievalFloorAgent:
    """The search solver's model-free floor: search the whole question, answer the top document's title.

    Any policy worth training should beat it on the held-out questions; it also warm-starts one.
    """

    name = "retrieval-floor"

    def __init__(self) -> None:
        """No state beyond the current question and whether it was searched yet."""
        self._question = ""
        self._searched = False

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Read the question from the task (or, failing that, the prompt's last ``Question:``)."""
        task = info.get("task") or {}
        self._question = str(task.get("question") or observation.rsplit("Question:", 1)[-1]).strip()
        self._searched = False

    def query(self) -> str:
        """What to search: the whole question (a subclass may search less of it)."""
        return self._question

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """Search first; then answer the first result's title (empty when nothing came back)."""
        if not self._searched:
            self._searched = True
            return f"<search>{self.query()}</search>"
        title = observation.split("(Title: ", 1)[1].split(")", 1)[0] if "(Title: " in observation else ""
        return f"<answer>{copied_title(title)}</answer>"


def _call(name: str, **arguments: Any) -> str:
    """A tool call in the JSON form, which carries any text (a diff, an answer with ``<``) unharmed."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


class OracleAgent:
    """The ceiling of every held-out set: it plays the known solution from the task.

    A repair task (it carries the bug ``artifact``): apply the reversed ``bug_inject.diff`` with
    ``git apply`` in one ``bash`` call, then ``submit``. A question (it carries ``answers``): answer
    the first gold answer. Scoring below 100% means the harness, not the agent, is broken.
    """

    name = "oracle"

    def __init__(self) -> None:
        """No state beyond the current episode's planned actions."""
        self._actions: list[str] = []

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Plan the episode from its task."""
        task = info.get("task") or {}
        if "artifact" in task:
            from sparring.envs.swe.bugs.artifact import reverse_diff

            fix = reverse_diff(task["artifact"]["bug_inject_diff"])
            fix += "" if fix.endswith("\n") else "\n"
            command = f"git apply --whitespace=nowarn <<'SPARRING_ORACLE_FIX'\n{fix}SPARRING_ORACLE_FIX"
            self._actions = [_call("bash", command=command), _call("submit", summary="applied the known fix")]
        elif task.get("answers"):
            self._actions = [_call("answer", answer=str(task["answers"][0]))]
        else:
            raise ValueError("the oracle needs a task with a bug artifact or gold answers")

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The next planned action (the last one again if the env asks for more)."""
        return self._actions.pop(0) if len(self._actions) > 1 else self._actions[0]


class DoNothingAgent:
    """The floor of every held-out set: it ends the episode at once without changing anything.

    It calls the env's finishing tool on its first turn: ``submit`` (the bug stays in) or an empty
    ``answer``.
    """

    name = "do-nothing"

    def __init__(self) -> None:
        """No state beyond the current episode's tools."""
        self._tools: set[str] = set()

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Read which finishing tool the env offers."""
        self._tools = {t.get("function", t)["name"] for t in info.get("tools", [])}

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """Finish: submit without a change, or answer nothing."""
        if "submit" in self._tools:
            return _call("submit", summary="no change")
        return _call("answer", answer="")
