"""Stored JSON nests at most `MAX_DEPTH` levels, so whatever is written can be read back.

pydantic reads JSON at most 200 levels deep and writes it at most 254 deep: a tool output
nested 200 levels was written and then failed every read of its row, and one nested 255
levels failed the run that tried to save it. So before a record is stored, every array or
object that would open past `MAX_DEPTH` levels is replaced by its own JSON text, a string
(itself bounded the same way): nothing is lost, the record reads back with its model, and a
reader finds the deep part with one `json.loads` more. Half of pydantic's limit leaves room
for the levels an HTTP answer or a stream event wraps around a record, and for readers with
lower limits (serde_json stops at 128).

Most records are shallow, and checking costs little: a text with at most `MAX_DEPTH` brackets
cannot be too deep; a text with more is read once by pydantic's own reader wrapped in
`READ_LIMIT - MAX_DEPTH` arrays, which it reads only if the text itself nests at most
`MAX_DEPTH` levels (1.4 ms for a 165 KB tool output, where measuring the depth in Python,
strings skipped, took 3 to 7 ms).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, from_json, to_json

__all__ = ["MAX_DEPTH", "READ_LIMIT", "bounded_text", "dump_bounded"]

#: The deepest nesting of arrays and objects a stored record keeps (the record itself is 1).
MAX_DEPTH = 100

#: The deepest nesting pydantic's JSON reader accepts (checked by a test).
READ_LIMIT = 200
_PADDING = READ_LIMIT - MAX_DEPTH

Fallback = Callable[[Any], Any] | None


def _within_limit(text: str) -> bool:
    """Whether the JSON `text` nests at most `MAX_DEPTH` levels: inside `_PADDING` arrays,
    pydantic's reader takes it only then."""
    if text.count("{") + text.count("[") <= MAX_DEPTH:
        return True
    try:
        from_json(f"{'[' * _PADDING}{text}{']' * _PADDING}")
    except ValueError:
        return False
    return True


def dump_bounded(value: Any, *, fallback: Fallback = None, exclude: Any = None) -> tuple[str, bool]:
    """`value` (a model, or plain data such as `AgentState.data`) as JSON nested at most
    `MAX_DEPTH` levels, and whether any part was too deep (and is now its JSON text);
    `fallback` and `exclude` (a model's only) as for `model_dump_json`.

    Without a `fallback`, what JSON cannot hold is refused, a cycle too (bounding would save
    it unrolled `MAX_DEPTH` levels deep); with one, a cycle is kept that way.
    """
    try:
        text = _dump(value, fallback, exclude)
    except PydanticSerializationError as exc:
        if fallback is None and "Circular reference" in str(exc):
            raise
        # Past pydantic's own depth limit; any other failure is raised again below.
    else:
        return bounded_text(value, text, fallback=fallback, exclude=exclude)
    return _dump(_Bounder(fallback).bounded(value, MAX_DEPTH), fallback, exclude), True


def bounded_text(
    value: Any, text: str, *, fallback: Fallback = None, exclude: Any = None
) -> tuple[str, bool]:
    """What `dump_bounded` returns for `value`, given its JSON `text` as `model_dump_json` (or
    `to_json`) wrote it with `fallback` and `exclude`: `text` itself when it is shallow enough."""
    if _within_limit(text):
        return text, False
    return _dump(_Bounder(fallback).bounded(value, MAX_DEPTH), fallback, exclude), True


def _dump(value: Any, fallback: Fallback, exclude: Any) -> str:
    if isinstance(value, BaseModel):
        # What `model_dump_json` does, without its Python wrapper's keyword handling (a third
        # of the cost of dumping an observation, and a run dumps one per step).
        return value.__pydantic_serializer__.to_json(
            value, fallback=fallback, exclude=exclude
        ).decode()
    return to_json(value, fallback=fallback).decode()


class _Bounder:
    """Replaces what is nested too deep by its JSON text, written with `fallback`."""

    __slots__ = ("_fallback",)

    def __init__(self, fallback: Fallback) -> None:
        self._fallback = fallback

    def bounded(self, value: Any, room: int) -> Any:
        """`value` with each array or object that would open more than `room` levels down
        replaced by its JSON text; `value` itself when nothing is that deep."""
        if isinstance(value, BaseModel):
            if room <= 0:
                return self._as_text(value)
            changed = {}
            for name in type(value).model_fields:
                field = getattr(value, name)
                bounded = self.bounded(field, room - 1)
                if bounded is not field:
                    changed[name] = bounded
            return value.model_copy(update=changed) if changed else value
        if isinstance(value, dict):
            if room <= 0:
                return self._as_text(value)
            items = {key: self.bounded(item, room - 1) for key, item in value.items()}
            return items if any(items[k] is not v for k, v in value.items()) else value
        if isinstance(value, (list, tuple, set, frozenset)):
            if room <= 0:
                return self._as_text(value)
            elements = [self.bounded(item, room - 1) for item in value]
            if all(a is b for a, b in zip(elements, value, strict=True)):
                return value
            # A model's tuple field stays a tuple; sets are written as arrays anyway.
            return tuple(elements) if isinstance(value, tuple) else elements
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            # Written as an object of its fields, so bounded as one.
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            bounded = self.bounded(fields, room)
            return value if bounded is fields else bounded
        return value

    def _as_text(self, value: Any) -> str:
        """`value`'s JSON text, bounded in turn (data deeper than Python can recurse is lost)."""
        try:
            return to_json(self.bounded(value, MAX_DEPTH), fallback=self._fallback).decode()
        except RecursionError:
            return f"<a {type(value).__name__} nested too deeply to save>"
