"""Tools of a Sparring env: the :func:`tool` decorator, JSON schemas, and tool-call parsing.

Tools are plain typed methods with Google docstrings, marked with :func:`tool`, so the same env
serves a Gymnasium loop, a chat template (``info["tools"]`` JSON schemas) and TRL's
``environment_factory`` (call the methods directly).

Two tool-call forms are accepted in an action:

* JSON, as chat templates with tools produce:
  ``<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>``
* the shorthand for a tool with one required argument: ``<bash>ls</bash>``.

A malformed or unknown call is not an exception: :func:`parse_tool_call` returns a
:class:`ToolCallError` whose message says what was wrong and shows the correct form.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["ToolCall", "ToolCallError", "ToolSpec", "example_call", "parse_tool_call", "tool", "tool_spec"]

F = TypeVar("F", bound=Callable[..., str])

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def tool(fn: Any = None, *, example: dict[str, Any] | None = None) -> Callable[[F], F]:
    """Mark a method of a :class:`TextEnv` as a tool the model can call: ``@tool(example={...})``.

    The method's name is the tool's name, its type hints give the JSON schema types and its
    Google-style docstring (summary + ``Args:``) gives the descriptions. It returns the
    observation text.

    Args:
        fn: Refused: a bare ``@tool`` has no example.
        example: Arguments of one real call (every required argument), shown wherever the model
            is taught the tool. A concrete value, never a placeholder: a small model copies the
            example it is shown, and ``<search>...</search>`` taught it to search for "...".

    Example:
        >>> @tool(example={"query": "creator of the Python programming language"})
        ... def search(self, query: str) -> str:
        ...     return ""
        >>> tool_spec(search).example_arguments
        {'query': 'creator of the Python programming language'}
    """
    if fn is not None or example is None:
        raise TypeError("mark a tool with @tool(example={...}), giving the arguments of one real call.")
    arguments = dict(example)

    def mark(fn: F) -> F:
        fn.__sparring_tool__ = True  # type: ignore[attr-defined]
        fn.__sparring_example__ = arguments  # type: ignore[attr-defined]
        return fn

    return mark


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the env exposes it: name, description, JSON-schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any]
    """Argument -> JSON schema; an argument of the example call carries it as ``"examples": [value]``."""
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

    @property
    def example_arguments(self) -> dict[str, Any]:
        """The arguments of the tool's example call."""
        return _example_arguments(self.parameters)

    def example(self) -> str:
        """One real call of this tool (the short form too where it has one), as the model is taught it."""
        return example_call(self.schema()) or ""


def example_call(schema: dict[str, Any]) -> str | None:
    """The example call of a tool given as a JSON schema (as in ``info["tools"]``), or None if it has none.

    Both forms for a tool with one argument (``<search>...</search>  or  <tool_call>...``), else
    the JSON form. The values are the ``examples`` of the schema's properties.
    """
    fn = schema.get("function", schema)
    properties = fn.get("parameters", {}).get("properties", {})
    required = fn.get("parameters", {}).get("required", [])
    args = _example_arguments(properties)
    if not args or any(name not in args for name in required):
        return None  # a placeholder would be copied, so show nothing rather than one
    json_form = f"<tool_call>{json.dumps({'name': fn['name'], 'arguments': args})}</tool_call>"
    if len(required) == 1 and list(args) == list(required):
        return f"<{fn['name']}>{args[required[0]]}</{fn['name']}>  or  {json_form}"
    return json_form


def _example_arguments(properties: dict[str, Any]) -> dict[str, Any]:
    return {name: p["examples"][0] for name, p in properties.items() if p.get("examples")}


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
    """Build the :class:`ToolSpec` of a tool method from its signature, docstring and example.

    Raises:
        TypeError: The example call lacks a required argument or names an unknown one.
    """
    summary, arg_docs = _parse_google_doc(fn.__doc__ or "")
    hints = typing.get_type_hints(fn)
    example = dict(getattr(fn, "__sparring_example__", {}))
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
        if name in example:
            params[name]["examples"] = [example[name]]
        if p.default is inspect.Parameter.empty:
            required.append(name)
    missing, unknown = [a for a in required if a not in example], [a for a in example if a not in params]
    if missing or unknown:
        raise TypeError(
            f"the example call of tool {fn.__name__!r} must give every required argument and no other: "
            f"missing {missing}, unknown {unknown}; fix its @tool(example={{...}})."
        )
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
