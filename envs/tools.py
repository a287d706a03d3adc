"""Tools of a Sparring env: the :func:`tool` decorator, JSON schemas, and tool-call parsing.

Tools are plain typed methods with Google docstrings, marked with :func:`tool`, so the same env
serves a Gymnasium loop, a chat template (``info["tools"]`` JSON schemas) and TRL's
``environment_factory`` (call the methods directly).

Two tool-call forms are accepted in an action:

* JSON, as chat templates with tools produce:
  ``<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>``
* the shorthand for a tool with one required argument: ``<bash>ls</bash>``.

A malformed or unknown call is not an exception: :func:`parse_tool_call` returns a
:class:`ToolCallError` whose message says what was wrong and shows the correct form. The parser is
total over hostile text: it reads JSON within bounds of size, nesting and number size, refuses
``NaN`` and ``Infinity``, hands each tool arguments of its declared types only, and scans in time
linear in the action.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "MAX_ACTION_CHARS",
    "ToolCall",
    "ToolCallError",
    "ToolSpec",
    "example_call",
    "parse_tool_call",
    "tool",
    "tool_spec",
    "valid_text",
]

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


#: Characters of one action the parser reads at most; a longer action is refused whole (no honest
#: call is that long, and every step of parsing is linear in it).
MAX_ACTION_CHARS = 1 << 20
#: Nesting of JSON arrays and objects in a call at most: arguments are flat values, and deeper
#: input would only reach the recursion limits of ``json`` and of the tools.
MAX_JSON_DEPTH = 16
#: Characters of one JSON number at most: more is no index, count or measure a tool takes (and
#: past 4,300 digits ``int`` itself refuses).
MAX_NUMBER_CHARS = 40
#: Decimal digits of an integer argument at most.
MAX_INT_DIGITS = 18
#: Characters of a name the model wrote that an error message quotes back.
_QUOTE_CHARS = 60

_TOOL_CALL_OPEN, _TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
_JSON_TOKENS = re.compile(r'\\.|["\[\]{}]', re.DOTALL)
_INT_TEXT = re.compile(rf"[+-]?0*[0-9]{{1,{MAX_INT_DIGITS}}}")
_TRUE, _FALSE = {"1", "true", "yes"}, {"0", "false", "no"}
_SURROGATES = re.compile("[\ud800-\udfff]")
_KIND_WORDS = {
    "integer": f"of type integer (a whole number of at most {MAX_INT_DIGITS} digits)",
    "number": "of type number (a finite number)",
    "boolean": "of type boolean (true or false)",
    "string": "of type string",
}


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so that it encodes as UTF-8.

    Python strings may hold lone surrogates (a JSON ``\\ud800`` escape, a file name that is not
    UTF-8 decoded with ``surrogateescape``); they are the only characters UTF-8 cannot encode.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATES.sub("\ufffd", text)
    return text


class _Refused(Exception):
    """A call refused while decoding or converting it; the message is the clause saying why."""


def _short(name: str) -> str:
    """A name the model wrote, clipped for an error message (it may be any length)."""
    name = valid_text(name)
    return name if len(name) <= _QUOTE_CHARS else name[: _QUOTE_CHARS - 3] + "..."


def _quote(name: str) -> str:
    return repr(_short(name))


def _usage(specs: dict[str, ToolSpec]) -> str:
    return "Call one tool per turn, for example:\n" + "\n".join(f"  {s.example()}" for s in specs.values())


def parse_tool_call(
    text: str, specs: dict[str, ToolSpec], *, max_chars: int = MAX_ACTION_CHARS
) -> ToolCall | ToolCallError:
    """Find the first tool call in ``text``; total: any text gives a call or an error, never an exception.

    JSON is read within bounds (:data:`MAX_JSON_DEPTH`, :data:`MAX_NUMBER_CHARS`; ``NaN`` and
    ``Infinity`` refused), arguments are converted to their schema type (an integer argument is a
    Python ``int`` of at most :data:`MAX_INT_DIGITS` digits, a number a finite ``float``) and
    strings are made valid UTF-8 (:func:`valid_text`). Every scan is linear in ``text``.

    Args:
        text: The model's raw output for one turn.
        specs: The tools the env offers, by name.
        max_chars: Characters of ``text`` read at most; longer text is refused.

    Returns:
        The call, or a :class:`ToolCallError` whose message says what was wrong and how to call.
    """
    if len(text) > max_chars:
        return ToolCallError(
            f"Error: your message has {len(text)} characters, more than the {max_chars} a turn may have; "
            f"nothing was run.\n{_usage(specs)}"
        )
    start = text.find(_TOOL_CALL_OPEN)
    if start >= 0:
        end = text.find(_TOOL_CALL_CLOSE, start)
        return _json_call(text[start + len(_TOOL_CALL_OPEN) : end if end >= 0 else len(text)].strip(), specs)

    shorthand = _first_shorthand(text, specs)
    if shorthand is not None:
        name, value = shorthand
        spec = specs[name]
        if len(spec.required) != 1:
            return ToolCallError(
                f"Error: {name!r} takes {len(spec.required)} arguments; use the JSON form:\n  {spec.example()}"
            )
        return _check_call(name, {spec.required[0]: value.strip("\n")}, specs)

    tag = re.search(r"<([A-Za-z_][\w-]*)>", text)
    if tag and tag.group(1) not in specs and tag.group(1) not in {"think", "tool_call"}:
        return ToolCallError(f"Error: unknown tool {_quote(tag.group(1))}; tools: {', '.join(specs)}.\n{_usage(specs)}")
    return ToolCallError("Error: no tool call found in your message.\n" + _usage(specs))


def _json_call(body: str, specs: dict[str, ToolSpec]) -> ToolCall | ToolCallError:
    """The call in the body of a ``<tool_call>``."""
    try:
        payload = _load_json(body)
    except _Refused as e:
        return ToolCallError(f"Error: the <tool_call> body {e}.\n{_usage(specs)}")
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        return ToolCallError(
            'Error: a <tool_call> must be a JSON object with "name" and "arguments".\n' + _usage(specs)
        )
    name = payload["name"]
    args = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(args, str):  # some templates double-encode the arguments
        try:
            args = _load_json(args)
        except _Refused as e:
            return ToolCallError(f'Error: "arguments" of {_quote(name)}, a JSON string, {e}.\n{_usage(specs)}')
    if not isinstance(args, dict):
        return ToolCallError(f'Error: "arguments" of {_quote(name)} must be a JSON object.\n{_usage(specs)}')
    return _check_call(name, args, specs)


def _first_shorthand(text: str, specs: dict[str, ToolSpec]) -> tuple[str, str] | None:
    """The earliest ``<name>value</name>`` of a known tool, as (name, value).

    Found with ``str.find``: a lazy regex tries every opening tag against the rest of the text,
    which is quadratic in a text of unclosed tags.
    """
    best: tuple[int, str, str] | None = None
    for name in specs:
        opener, closer = f"<{name}>", f"</{name}>"
        start = text.find(opener)
        if start < 0 or (best is not None and start >= best[0]):
            continue
        end = text.find(closer, start + len(opener))
        if end >= 0:  # no closer after the first opener means none after a later one either
            best = (start, name, text[start + len(opener) : end])
    return None if best is None else (best[1], best[2])


def _load_json(body: str) -> Any:
    """``json.loads`` within the bounds; raises :class:`_Refused` with the clause saying what was wrong."""
    if _too_deep(body):
        raise _Refused(f"nests arrays or objects deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(body, parse_int=_json_int, parse_float=_json_float, parse_constant=_json_constant)
    except _Refused:
        raise
    except json.JSONDecodeError as e:
        raise _Refused(f"is not valid JSON ({e.msg})") from None
    except (ValueError, RecursionError, OverflowError, TypeError, MemoryError) as e:
        raise _Refused(f"is not valid JSON ({type(e).__name__})") from None  # json raises more than its own error


def _too_deep(body: str) -> bool:
    """Whether arrays and objects (outside strings) nest deeper than :data:`MAX_JSON_DEPTH`."""
    if body.count("[") + body.count("{") <= MAX_JSON_DEPTH:
        return False
    depth, in_string = 0, False
    for m in _JSON_TOKENS.finditer(body):
        token = m.group()
        if token == '"':
            in_string = not in_string
        elif in_string or token[0] == "\\":
            continue
        elif token in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return True
        else:
            depth -= 1
    return False


def _json_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise _Refused(f"holds a number of more than {MAX_NUMBER_CHARS} characters")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text) if len(text) <= MAX_NUMBER_CHARS else math.inf
    if not math.isfinite(value):
        raise _Refused(f"holds a number too large to use ({text[:20]}{'...' if len(text) > 20 else ''})")
    return value


def _json_constant(text: str) -> float:
    raise _Refused(f"holds {text}, which is no finite number")


def _check_call(name: str, args: dict[str, Any], specs: dict[str, ToolSpec]) -> ToolCall | ToolCallError:
    spec = specs.get(name)
    if spec is None:
        return ToolCallError(f"Error: unknown tool {_quote(name)}; tools: {', '.join(specs)}.\n{_usage(specs)}")
    missing = [a for a in spec.required if a not in args]
    unknown = [_short(a) for a in args if a not in spec.parameters]
    if missing or unknown:
        what = []
        if missing:
            what.append(f"missing argument(s) {', '.join(missing)}")
        if unknown:
            what.append(f"unknown argument(s) {', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''}")
        return ToolCallError(f"Error: {name!r} called with {' and '.join(what)}. Use:\n  {spec.example()}")
    converted: dict[str, Any] = {}
    for key, value in args.items():
        kind = spec.parameters[key]["type"]
        try:
            converted[key] = _convert(kind, value)
        except _Refused:
            return ToolCallError(
                f"Error: argument {key!r} of {name!r} must be {_KIND_WORDS.get(kind, kind)}. Use:\n  {spec.example()}"
            )
    return ToolCall(name, converted)


def _convert(kind: str, value: Any) -> Any:
    """``value`` as a Python value of the JSON-schema type ``kind``; raises :class:`_Refused`."""
    if kind == "string":
        if isinstance(value, dict | list):
            return json.dumps(value)  # depth bounded by the parser; escapes what UTF-8 cannot hold
        return valid_text(value if isinstance(value, str) else str(value))
    if isinstance(value, bool):
        if kind == "boolean":
            return value
        raise _Refused
    if kind == "boolean":
        word = value.strip().lower() if isinstance(value, str) else None
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise _Refused
    if isinstance(value, str):
        value = value.strip()
        if kind == "integer" and _INT_TEXT.fullmatch(value):
            value = int(value)
        elif kind == "number" and len(value) <= MAX_NUMBER_CHARS:
            try:
                value = float(value)
            except ValueError:
                raise _Refused from None
        else:
            raise _Refused
    if kind == "integer":
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and abs(value) < 10**MAX_INT_DIGITS:
            return value
    elif kind == "number" and isinstance(value, int | float):
        number = float(value)  # ints here have at most MAX_NUMBER_CHARS digits: no overflow
        if math.isfinite(number):
            return number
    raise _Refused
