"""Check a tool call's arguments against the tool's JSON Schema, with readable errors.

`validate_arguments(schema, arguments)` returns a list of problems such as
``arguments.city: expected string, got integer`` — empty when the arguments are valid. The
messages go back to the model, so each names the JSON path and says what was expected.

Supported JSON Schema subset (what `@tool`/pydantic and hand-written tool schemas use):

- ``type`` — ``string``, ``integer``, ``number``, ``boolean``, ``array``, ``object``, ``null``,
  or a list of these. ``integer`` accepts a float with no fractional part (as JSON Schema does);
  booleans are never numbers.
- objects: ``properties``, ``required``, ``additionalProperties`` (``false`` or a schema).
- arrays: ``items`` (one schema for every item), ``minItems``, ``maxItems``.
- values: ``enum``, ``const``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
  ``exclusiveMaximum``, ``minLength``, ``maxLength``, ``pattern``.
- combinators: ``anyOf``, ``oneOf``, ``allOf``.
- references: ``$ref`` to ``#/$defs/NAME`` or ``#/definitions/NAME`` of the root schema.

Every other keyword (``format``, ``description``, ``default``, ``title``, ...) is ignored, so a
schema using more than this subset is checked leniently rather than rejected. A value that is not
a JSON value at all (a `datetime` or pydantic model that a whole-value placeholder passed on from
an earlier tool) is accepted here and left to the tool's own validation.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = ["format_path", "validate_arguments"]

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KINDS: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
    dict: "object",
    list: "array",
    tuple: "array",
}
_KNOWN_TYPES = frozenset(_KINDS.values())
_BOUNDS: tuple[tuple[str, Callable[[float, float], bool], str], ...] = (
    ("minimum", operator.ge, ">="),
    ("maximum", operator.le, "<="),
    ("exclusiveMinimum", operator.gt, ">"),
    ("exclusiveMaximum", operator.lt, "<"),
)
# A `$ref` chain that never reaches a concrete schema would recurse forever.
_MAX_REF_HOPS = 32


def format_path(parts: Iterable[str | int], *, root: str = "arguments") -> str:
    """Render a JSON path like ``arguments.items[0].name`` from its keys and indices."""
    out = [root]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENTIFIER.match(part):
            out.append(f".{part}")
        else:
            out.append(f"[{json.dumps(part, ensure_ascii=False)}]")
    return "".join(out)


def validate_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> list[str]:
    """Return every way `arguments` break `schema` (see the module docstring for the subset).

    An empty list means the arguments are valid.
    """
    validator = _Validator(schema)
    validator.check(schema, arguments, ())
    return validator.errors


def _kind(value: Any) -> str | None:
    """The JSON type of `value`, or None when it is not a JSON value at all."""
    kind = _KINDS.get(type(value))
    if kind is not None:
        return kind
    # Subclasses (IntEnum, StrEnum, OrderedDict, ...) and other mappings.
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return None


def _json_type(value: Any) -> str:
    """Name a Python value by its JSON type, for messages."""
    return _kind(value) or type(value).__name__


def _matches(kind: str | None, value: Any, name: str) -> bool:
    """Whether a value of JSON type `kind` is valid for the schema type `name`."""
    if name == kind:
        return True
    if name == "number":
        return kind == "integer"
    if name == "integer":
        return kind == "number" and math.isfinite(value) and float(value).is_integer()
    # An unknown type name is the schema author's problem; do not punish the model.
    return name not in _KNOWN_TYPES


def _types_of(schema: Mapping[str, Any]) -> list[str] | None:
    declared = schema.get("type")
    if declared is None:
        return None
    if isinstance(declared, str):
        return [declared]
    return [str(t) for t in declared]


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON sees it: `true` is not `1`, but `1` is `1.0`."""
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


def _literal(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _join_or(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]


class _Validator:
    """Walks one value against one schema, collecting messages."""

    __slots__ = ("errors", "root")

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.errors: list[str] = []

    def _error(self, path: tuple[str | int, ...], message: str) -> None:
        self.errors.append(f"{format_path(path)}: {message}")

    def _resolve(
        self, schema: Mapping[str, Any], path: tuple[str | int, ...]
    ) -> Mapping[str, Any] | None:
        hops = 0
        while "$ref" in schema:
            ref = schema["$ref"]
            target = self._lookup(ref) if isinstance(ref, str) else None
            if target is None or hops >= _MAX_REF_HOPS:
                self._error(path, f"the tool's schema has an unresolvable $ref {_literal(ref)}")
                return None
            # Keywords beside a $ref (pydantic puts `description`/`default` there) still apply.
            siblings = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **siblings} if siblings else target
            hops += 1
        return schema

    def _lookup(self, ref: str) -> Mapping[str, Any] | None:
        for prefix in ("#/$defs/", "#/definitions/"):
            if ref.startswith(prefix):
                defs = self.root.get(prefix[2:-1])
                if isinstance(defs, Mapping):
                    found = defs.get(ref[len(prefix) :])
                    if isinstance(found, Mapping):
                        return found
        return None

    def _branch_errors(
        self, schema: Mapping[str, Any], value: Any, path: tuple[str | int, ...]
    ) -> list[str]:
        sub = _Validator(self.root)
        sub.check(schema, value, path)
        return sub.errors

    def check(self, schema: Any, value: Any, path: tuple[str | int, ...]) -> None:
        """Validate `value` at `path` against `schema`, appending to `self.errors`."""
        if not isinstance(schema, dict | Mapping):
            return  # `true` (or anything that is not a schema object) accepts every value
        resolved = self._resolve(schema, path)
        if resolved is None:
            return
        schema = resolved

        kind = _kind(value)
        if kind is None:
            # Only a whole-value placeholder puts a non-JSON object (a datetime, a pydantic
            # model from an earlier tool) into arguments; the tool's own validation judges it.
            return

        types = _types_of(schema)
        if types is not None and not any(_matches(kind, value, t) for t in types):
            self._error(path, f"expected {_join_or(types)}, got {kind}")
            return

        if "const" in schema and not _json_equal(value, schema["const"]):
            self._error(path, f"expected {_literal(schema['const'])}, got {_literal(value)}")
            return
        if "enum" in schema and not any(_json_equal(value, v) for v in schema["enum"]):
            allowed = ", ".join(_literal(v) for v in schema["enum"])
            self._error(path, f"expected one of {allowed}, got {_literal(value)}")
            return

        if kind == "string":
            self._check_string(schema, value, path)
        elif kind in ("integer", "number"):
            self._check_number(schema, value, path)
        elif kind == "object":
            self._check_object(schema, value, path)
        elif kind == "array":
            self._check_array(schema, value, path)

        for sub in schema.get("allOf", ()):
            self.check(sub, value, path)
        if "anyOf" in schema:
            self._check_alternatives(schema["anyOf"], value, path, exactly_one=False)
        if "oneOf" in schema:
            self._check_alternatives(schema["oneOf"], value, path, exactly_one=True)

    def _check_string(
        self, schema: Mapping[str, Any], value: str, path: tuple[str | int, ...]
    ) -> None:
        min_length = schema.get("minLength")
        if isinstance(min_length, int) and len(value) < min_length:
            self._error(path, f"must be at least {min_length} characters long, got {len(value)}")
        max_length = schema.get("maxLength")
        if isinstance(max_length, int) and len(value) > max_length:
            self._error(path, f"must be at most {max_length} characters long, got {len(value)}")
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            try:
                matched = re.search(pattern, value) is not None
            except re.error:
                matched = True  # the schema's regex is not Python's dialect: do not guess
            if not matched:
                self._error(path, f"must match the pattern {_literal(pattern)}")

    def _check_number(
        self, schema: Mapping[str, Any], value: float, path: tuple[str | int, ...]
    ) -> None:
        for keyword, holds, symbol in _BOUNDS:
            limit = schema.get(keyword)
            if (
                isinstance(limit, int | float)
                and not isinstance(limit, bool)
                and not holds(value, limit)
            ):
                self._error(path, f"must be {symbol} {limit}, got {_literal(value)}")

    def _check_object(
        self, schema: Mapping[str, Any], value: Mapping[str, Any], path: tuple[str | int, ...]
    ) -> None:
        properties = schema.get("properties")
        if not isinstance(properties, Mapping):
            properties = {}
        for name in schema.get("required", ()):
            if name not in value:
                self._error((*path, name), "required property is missing")
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                self.check(properties[key], item, (*path, key))
            elif extra is False:
                allowed = ", ".join(properties) or "none"
                self._error((*path, key), f"unexpected property (allowed: {allowed})")
            elif isinstance(extra, Mapping):
                self.check(extra, item, (*path, key))

    def _check_array(
        self, schema: Mapping[str, Any], value: Sequence[Any], path: tuple[str | int, ...]
    ) -> None:
        min_items = schema.get("minItems")
        if isinstance(min_items, int) and len(value) < min_items:
            self._error(path, f"must have at least {min_items} items, got {len(value)}")
        max_items = schema.get("maxItems")
        if isinstance(max_items, int) and len(value) > max_items:
            self._error(path, f"must have at most {max_items} items, got {len(value)}")
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                self.check(items, item, (*path, index))

    def _check_alternatives(
        self,
        alternatives: Sequence[Any],
        value: Any,
        path: tuple[str | int, ...],
        *,
        exactly_one: bool,
    ) -> None:
        failures: list[tuple[list[str] | None, list[str]]] = []
        matches = 0
        for alternative in alternatives:
            errors = self._branch_errors(alternative, value, path)
            if not errors:
                matches += 1
                continue
            # Resolve on a scratch validator: a bad $ref is already in this branch's errors.
            resolved = (
                _Validator(self.root)._resolve(alternative, path)
                if isinstance(alternative, Mapping)
                else None
            )
            failures.append((_types_of(resolved) if resolved is not None else None, errors))
        if exactly_one and matches > 1:
            self._error(path, "matches more than one of the allowed schemas (oneOf)")
            return
        if matches:
            return
        # Prefer the errors of an alternative whose type fits: they are the most specific.
        for types, errors in failures:
            if types is None or any(_matches(_kind(value), value, t) for t in types):
                self.errors.extend(errors)
                return
        expected = [t for types, _ in failures for t in types or ()]
        unique = list(dict.fromkeys(expected))
        self._error(path, f"expected {_join_or(unique)}, got {_json_type(value)}")
