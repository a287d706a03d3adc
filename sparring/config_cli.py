"""Command-line options generated from a config dataclass, so a default or a help text lives in one place.

Each field of the dataclass becomes one ``--option`` of a typer command: its default is the field's,
its help is the field's attribute docstring (the string literal right below the field), its type
is the field's. The command builds the config from the options and hands it to a function.

Example:
    >>> @dataclass
    ... class GreetConfig:
    ...     name: str = "world"
    ...     '''Who to greet.'''
    >>> command = config_command(GreetConfig, lambda config: print(f"hello {config.name}"), "Greet someone.")
    >>> [p.name for p in inspect.signature(command).parameters.values()]
    ['name']
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import typer

from sparring import SparringError

__all__ = ["ABOVE_0", "AT_LEAST_1", "NOT_NEGATIVE", "Range", "check_ranges", "config_command", "field_docs",
           "numeric_fields"]  # fmt: skip

C = TypeVar("C")


def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a dataclass's fields (its bases' first), by field name."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # defined where no source is kept (a REPL): no help texts
            continue
        body = ast.parse(source).body[0]
        assert isinstance(body, ast.ClassDef)
        for node, nxt in zip(body.body, body.body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


#: A numeric field's allowed values: (low, high or None, low excluded, high excluded).
Range = tuple[float, float | None, bool, bool]
AT_LEAST_1: Range = (1, None, False, False)
NOT_NEGATIVE: Range = (0, None, False, False)
ABOVE_0: Range = (0, None, True, False)


def numeric_fields(cls: type) -> set[str]:
    """Names of a dataclass's int and float fields, optional ones included (each needs a range)."""
    hints = typing.get_type_hints(cls)
    numbers = (int, float, int | None, float | None)
    return {item.name for item in dataclasses.fields(cls) if hints[item.name] in numbers}


def _describe(bounds: Range, zero_means: str | None) -> str:
    low, high, low_open, high_open = bounds
    if high is not None:
        excluded = [f"{v:g}" for v, is_open in ((low, low_open), (high, high_open)) if is_open]
        return f"be between {low:g} and {high:g}" + (f", {' and '.join(excluded)} excluded" if excluded else "")
    if low_open:
        return f"be above {low:g}"
    if low != 0:
        return f"be at least {low:g}"
    return "not be negative" + (f" (0: {zero_means})" if zero_means else "")


def check_ranges(
    config: Any, ranges: dict[str, Range], name: Callable[[str], str], zero_means: dict[str, str] | None = None
) -> None:
    """Refuse, in one sentence, the first field of ``config`` outside its range (None passes: no limit; NaN fails).

    ``name`` turns a field name into what the user typed (``config key 'lr'``, ``--max-turns``); ``zero_means``
    says what 0 means where it means something (``{"temperature": "greedy"}``).
    """
    for item in dataclasses.fields(config):
        value = getattr(config, item.name)
        if item.name not in ranges or value is None:
            continue
        low, high, low_open, high_open = ranges[item.name]
        below = value < low or (low_open and value == low)
        above = high is not None and (value > high or (high_open and value == high))
        if value != value or below or above:
            zero = (zero_means or {}).get(item.name)
            raise SparringError(f"{name(item.name)} must {_describe(ranges[item.name], zero)}, not {value}.")


def _cli_type(hint: Any) -> Any:
    """``X | None`` as ``Optional[X]`` (what typer reads); other hints unchanged."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return typing.Optional[args[0]]  # noqa: UP045 (typer needs typing.Optional, not X | None)
    return hint


def _count_or_all(text: Any) -> int | None:
    """An option that counts or says ``all`` (None: every one)."""
    if text is None or isinstance(text, int):
        return text
    if str(text).strip().lower() == "all":
        return None
    try:
        return int(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is neither a whole number nor 'all'.") from None


def config_command(
    cls: type[C],
    run: Callable[[C], object],
    help: str,
    *,
    exclude: Iterable[str] = (),
    overrides: dict[str, Any] | None = None,
    all_means_none: Iterable[str] = (),
) -> Callable[..., None]:
    """A typer command whose options are the fields of dataclass ``cls``; it calls ``run(cls(**options))``.

    Args:
        cls: The config dataclass; every field needs a default.
        run: Called with the config built from the options.
        help: The command's help text.
        exclude: Fields that get no option (they keep their defaults).
        overrides: Field name -> default shown on the command line instead of the dataclass's (for
            a field whose default is a factory or an object, e.g. None meaning "the default").
        all_means_none: ``int | None`` fields whose None means "every one" (``--limit``): their
            option also takes the word ``all``.
    """
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    skip = set(exclude)
    all_words = set(all_means_none)
    params = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in skip or not f.init:
            continue
        if overrides and f.name in overrides:
            default = overrides[f.name]
        elif f.default is not dataclasses.MISSING:
            default = f.default
        else:
            raise TypeError(f"{cls.__name__}.{f.name} has no plain default; pass it in overrides or exclude it")
        flag = "--" + f.name.replace("_", "-")
        if hints[f.name] is bool:  # an on/off pair, so a field that defaults to True can be turned off
            flag = f"{flag}/--no-{flag[2:]}"
        annotation = _cli_type(hints[f.name])
        if f.name in all_words:
            option = typer.Option(default, flag, help=docs.get(f.name, ""), parser=_count_or_all, metavar="N|all")
            annotation = typing.Optional[Any]  # noqa: UP045 (typer needs typing.Optional, not X | None)
        else:
            option = typer.Option(default, flag, help=docs.get(f.name, ""))
        kind = inspect.Parameter.KEYWORD_ONLY
        params.append(inspect.Parameter(f.name, kind, default=option, annotation=annotation))

    def command(**options: Any) -> None:
        run(cls(**options))

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__doc__ = help
    command.__name__ = cls.__name__
    return command
