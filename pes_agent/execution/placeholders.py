"""Fill `{step_N_result}` placeholders in tool arguments with earlier calls' results.

A plan's tool call may use the result of an earlier call by writing a placeholder in any string
of its arguments. N is the 1-based position of that call in the plan's tool-call list (N and
an index have at most 18 digits: text with a longer number is no placeholder and stays as
written, rather than a number Python refuses to read, past 4,300 digits, failing the plan):

- ``{step_2_result}`` and ``<step_2_result>`` are the same placeholder (whitespace just inside
  the delimiters is allowed: ``{ step_2_result }``);
- ``{step_2_result.forecast.days[0]}`` reaches into a structured result: ``.name`` reads a key
  of a mapping (or a field of a pydantic model or dataclass) and ``[i]`` an item of a list
  (negative indices count from the end) or an integer key of a mapping;
- a string that is exactly one placeholder, ignoring surrounding whitespace, becomes the raw
  result with its type kept (a dict stays a dict, ``42`` stays an int). It is a deep copy, so
  a tool that changes its argument does not change the earlier result (objects that cannot be
  copied are passed as they are);
- a placeholder inside a longer string is replaced by JSON for dicts, lists, tuples and pydantic
  models (``json.dumps(..., ensure_ascii=False, default=str)``) and by ``str(value)`` for
  anything else (so ``None`` reads ``None`` and ``True`` reads ``True``).

A language step's instruction is filled by `resolve_text`, where every placeholder, even one
that is the whole text, becomes text as inside a longer string.

Placeholders are found in dict values and list items at any depth, never in dict keys. Model
text is only ever matched against one regular expression: it is never evaluated or passed to
`str.format`, so ``{__import__('os')}`` or ``{0}`` stay literally as written. Resolution builds
new dicts and lists; the arguments passed in are never modified.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from types import NoneType
from typing import Any

from pydantic import BaseModel

from pes_agent.errors import ToolExecutionError

__all__ = ["PlaceholderError", "find_references", "resolve_placeholders", "resolve_text"]

_ACCESS = r"(?:\.[\w-]+|\[\s*-?\d{1,18}\s*\])*"
_PLACEHOLDER = re.compile(
    r"\{\s*step_(?P<brace>\d{1,18})_result(?P<brace_path>" + _ACCESS + r")\s*\}"
    r"|<\s*step_(?P<angle>\d{1,18})_result(?P<angle_path>" + _ACCESS + r")\s*>"
)
_STEP = re.compile(r"\.([\w-]+)|\[\s*(-?\d{1,18})\s*\]")
# Values that hold no placeholder and need no copy: told by their exact type, before the
# isinstance checks (Mapping's is an ABC check, the dearest) that every argument went through.
_INERT = frozenset({int, float, bool, NoneType})


class PlaceholderError(ToolExecutionError):
    """A placeholder could not be filled: the step has no result, or the field/index is absent.

    `placeholder` is the text as the model wrote it, e.g. ``{step_1_result.temp}``.
    """

    def __init__(
        self,
        message: str,
        *,
        placeholder: str,
        call_id: str | None = None,
        tool_name: str | None = None,
        thread_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        super().__init__(
            message, call_id=call_id, tool_name=tool_name, thread_id=thread_id, trace_id=trace_id
        )
        self.placeholder = placeholder


def find_references(arguments: Any) -> set[int]:
    """Return the step numbers that placeholders in `arguments` refer to (0 if written so)."""
    found: set[int] = set()
    _collect(arguments, found)
    return found


def resolve_placeholders(
    arguments: Mapping[str, Any], results: Mapping[int, Any]
) -> dict[str, Any]:
    """Return a copy of `arguments` with every placeholder replaced from `results`.

    `results` maps a step number (1-based) to that call's output. Raises `PlaceholderError`
    when a referenced step is not in `results` or a field or index does not exist.
    """
    resolved: dict[str, Any] = {}
    for key, value in arguments.items():
        kind = type(value)
        # Numbers and strings without a placeholder, most arguments, as they are (no call).
        if kind in _INERT:
            resolved[key] = value
        elif kind is str:
            resolved[key] = _resolve_string(value, results) if "step_" in value else value
        else:
            resolved[key] = _resolve(value, results)
    return resolved


def resolve_text(text: str, results: Mapping[int, Any]) -> str:
    """Return `text` with every placeholder replaced by its result rendered as text.

    For a language step's instruction: unlike `resolve_placeholders`, a text that is exactly
    one placeholder is still text (JSON for dicts and lists, `str()` otherwise). Raises
    `PlaceholderError` like `resolve_placeholders`.
    """
    if "step_" not in text:
        return text
    return _PLACEHOLDER.sub(lambda match: _embed(_lookup(match, results)), text)


def _collect(value: Any, found: set[int]) -> None:
    if isinstance(value, str):
        _scan(value, found)
        return
    if type(value) is dict or isinstance(value, Mapping):
        items: Any = value.values()
    elif isinstance(value, list | tuple):
        items = value
    else:
        return
    for item in items:  # strings and numbers, most items, without a call each
        kind = type(item)
        if kind is str:
            _scan(item, found)
        elif kind not in _INERT:
            _collect(item, found)


def _scan(text: str, found: set[int]) -> None:
    if "step_" in text:
        for brace, _, angle, _ in _PLACEHOLDER.findall(text):
            found.add(int(brace or angle))


def _resolve(value: Any, results: Mapping[int, Any]) -> Any:
    if type(value) in _INERT:
        return value
    if isinstance(value, str):
        return _resolve_string(value, results) if "step_" in value else value
    if isinstance(value, Mapping):
        return {key: _resolve(item, results) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve(item, results) for item in value]
    if isinstance(value, tuple):
        return tuple(_resolve(item, results) for item in value)
    return value


def _resolve_string(text: str, results: Mapping[int, Any]) -> Any:
    # The usual argument of a chained call, exactly "{step_N_result}" with step N done, read
    # by slicing (half the cost of the match below); anything else, errors included, matches.
    if text.startswith("{step_") and text.endswith("_result}"):
        number = text[6:-8]
        # isdecimal: the digits \d takes; at most 18 of them, as the pattern allows.
        if number.isdecimal() and len(number) <= 18 and (step := int(number)) in results:
            return _copied(results[step])
    whole = _PLACEHOLDER.fullmatch(text.strip())
    if whole is not None:
        return _copied(_lookup(whole, results))
    return _PLACEHOLDER.sub(lambda match: _embed(_lookup(match, results)), text)


def _copied(value: Any) -> Any:
    """A deep copy of a structured result, so a tool that mutates its argument cannot change
    the earlier step's result (other calls and the synthesis prompt still read it)."""
    if type(value) in _SCALAR_TYPES or isinstance(value, _SCALARS):
        return value
    plain = _plain_copy(value, 0)
    if plain is not _NOT_PLAIN:
        return plain
    try:
        return copy.deepcopy(value)
    except Exception:
        # Some objects (locks, clients, generators) cannot be copied: pass them as they are.
        return value


_NOT_PLAIN: Any = object()
_SCALARS = (str, int, float, bool, NoneType)
_SCALAR_TYPES = frozenset(_SCALARS)  # told by exact type first: a set lookup, no isinstance


def _plain_copy(value: Any, depth: int) -> Any:
    """A copy of JSON-like data (dicts, lists, scalars), what most tools return, at a third
    of `copy.deepcopy`'s cost; `_NOT_PLAIN` for anything else (deepcopy handles it)."""
    kind = type(value)
    if kind in _SCALAR_TYPES:
        return value
    if depth > 50:
        return _NOT_PLAIN
    if kind is dict:
        copied = {}
        for key, item in value.items():
            item = _plain_copy(item, depth + 1)
            if item is _NOT_PLAIN:
                return _NOT_PLAIN
            copied[key] = item
        return copied
    if kind is list:
        items = []
        for item in value:
            item = _plain_copy(item, depth + 1)
            if item is _NOT_PLAIN:
                return _NOT_PLAIN
            items.append(item)
        return items
    return _NOT_PLAIN


def _lookup(match: re.Match[str], results: Mapping[int, Any]) -> Any:
    brace, brace_path, angle, angle_path = match.groups()
    step = int(brace or angle)
    path = brace_path or angle_path
    if step not in results:
        placeholder = match.group(0)
        raise PlaceholderError(
            f"Cannot resolve {placeholder}: step {step} has no result.", placeholder=placeholder
        )
    current = results[step]
    if not path:
        return current  # the whole result, the common case
    placeholder = match.group(0)
    where = f"step_{step}_result"
    for name, index in _STEP.findall(path):
        try:
            current = _field(current, name) if name else _item(current, int(index))
        except LookupError as exc:
            raise PlaceholderError(
                f"Cannot resolve {placeholder}: {where} {exc.args[0]}", placeholder=placeholder
            ) from None
        where += f".{name}" if name else f"[{int(index)}]"
    return current


def _field(value: Any, name: str) -> Any:
    """Read `.name` of a mapping, pydantic model or dataclass; LookupError says why not."""
    if isinstance(value, Mapping):
        if name in value:
            return value[name]
        raise LookupError(f'has no field "{name}" (its fields: {_names(value.keys())}).')
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        if name in fields:
            return getattr(value, name)
        raise LookupError(f'has no field "{name}" (its fields: {_names(fields)}).')
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [f.name for f in dataclasses.fields(value)]
        if name in names:
            return getattr(value, name)
        raise LookupError(f'has no field "{name}" (its fields: {_names(names)}).')
    raise LookupError(f'is {_describe(value)}, which has no field "{name}".')


def _item(value: Any, index: int) -> Any:
    """Read `[index]` of a list or an integer-keyed mapping; LookupError says why not."""
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        if -len(value) <= index < len(value):
            return value[index]
        raise LookupError(f"has {len(value)} items, so there is no index {index}.")
    if isinstance(value, Mapping):
        for key in (index, str(index)):
            if key in value:
                return value[key]
        raise LookupError(f"has no key {index} (its keys: {_names(value.keys())}).")
    raise LookupError(f"is {_describe(value)}, which cannot be indexed with [{index}].")


def _names(keys: Any) -> str:
    names = [str(key) for key in keys]
    return ", ".join(names) if names else "none"


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


def _embed(value: Any) -> str:
    """Render a result inside a longer string: JSON for structures, `str()` for the rest."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, Mapping | list | tuple):
        try:
            return json.dumps(value, ensure_ascii=False, default=_json_default)
        except (TypeError, ValueError):
            # Non-string keys or a circular structure: the text form is still useful.
            return str(value)
    return str(value)


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)
