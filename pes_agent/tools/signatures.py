"""Tools as one-line signatures, the compact way prompts show them to a model.

```
search(query: str, limit?: int = 10, mode?: "fast"|"deep") — Search the web. query: the terms
```

A tool's JSON Schema says the same, in about three times the tokens: a planning prompt that
lists twenty tools spends most of its length on `{"type": "string"}`. The signature keeps what
the model needs to write a call — each parameter's name, type, whether it is optional and its
default, enum values, nested objects (`{street: str, zip?: str}`), the common constraints
(`int 1..100`, `str (date)`), and the descriptions the tool's author wrote — and leaves out
JSON Schema's own vocabulary. A schema it cannot render (a keyword it does not know that
matters, a `$ref` it cannot resolve) is shown as compact JSON in its place, never dropped.
Arguments are still checked against the full schema when a call runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from pes_agent.tools.base import ToolSchema

__all__ = ["tool_signature", "type_text"]

_SCALARS: Final = {
    "string": "str",
    "integer": "int",
    "number": "number",
    "boolean": "bool",
    "null": "null",
    "object": "object",
    "array": "array",
}
# Keywords a rendering may leave out: annotations, or what the rendering already shows.
_SHOWN: Final = frozenset(
    {
        "type",
        "properties",
        "required",
        "items",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "default",
        "description",
        "title",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "additionalProperties",
        "$ref",
        "$defs",
        "definitions",
        "examples",
        "$schema",
        "uniqueItems",
    }
)
# Nesting deeper than this is shown as JSON: a signature is read at a glance.
_MAX_DEPTH: Final = 4


def tool_signature(schema: ToolSchema) -> str:
    """`name(param: type, optional?: type = default) — description`, one line per tool, with
    the named object types its parameters use listed after it (`  Addr = {street: str}`)."""
    input_schema = schema.input_schema if isinstance(schema.input_schema, Mapping) else {}
    defs = _definitions(input_schema)
    used: dict[str, None] = {}
    params, notes = _parameters(input_schema, defs, used)
    line = f"{schema.name}({params})"
    description = " ".join((schema.description or "").split())
    details = " ".join(part for part in (description, notes) if part)
    if details:
        line += " — " + details
    lines = [line]
    shown: set[str] = set()
    while len(shown) < len(used):  # a definition may use further ones
        for name in list(used):
            if name not in shown:
                shown.add(name)
                lines.append(f"  {name} = {type_text(defs[name], defs, used)}")
    return "\n".join(lines)


def type_text(
    schema: object,
    defs: Mapping[str, Any] | None = None,
    used: dict[str, None] | None = None,
    depth: int = 0,
) -> str:
    """A JSON Schema as a short type: `str`, `int 1..10`, `[str]`, `{a: int, b?: str}`,
    `"x"|"y"`, a definition's name; compact JSON for what has no short form.

    `defs` are the schema's `$defs`; the names of the ones used are added to `used`.
    """
    defs = defs or {}
    used = used if used is not None else {}
    if not isinstance(schema, Mapping):
        return "any" if schema is True or schema is None else _json(schema)
    if depth > _MAX_DEPTH or not set(schema) <= _SHOWN:
        return _json(schema)
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in defs and ref in (f"#/$defs/{name}", f"#/definitions/{name}"):
            used.setdefault(name, None)
            return name
        return _json(schema)
    if "const" in schema:
        return _json(schema["const"])
    if isinstance(schema.get("enum"), list):
        return "|".join(_json(value) for value in schema["enum"])
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return "|".join(type_text(option, defs, used, depth + 1) for option in options)
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(type_text({**schema, "type": one}, defs, used, depth + 1) for one in kind)
    if kind == "array":
        items = schema.get("items")
        text = f"[{type_text(items, defs, used, depth + 1)}]" if items is not None else "array"
        return text + _range(schema, "minItems", "maxItems", " items")
    if kind == "object" and isinstance(schema.get("properties"), Mapping):
        fields, _ = _fields(schema, defs, used, depth + 1)
        return "{" + fields + "}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), Mapping):
        return "{str: " + type_text(schema["additionalProperties"], defs, used, depth + 1) + "}"
    if kind is None:
        text = "any"
    elif isinstance(kind, str):
        text = _SCALARS.get(kind, kind)
    else:
        text = _json(kind)
    if isinstance(schema.get("format"), str):
        text += f" ({schema['format']})"
    if kind in ("integer", "number"):
        text += _bounds(schema)
    elif kind == "string":
        text += _range(schema, "minLength", "maxLength", " chars")
    return text


def _definitions(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    defs = schema.get("$defs", schema.get("definitions"))
    return defs if isinstance(defs, Mapping) else {}


def _parameters(
    schema: Mapping[str, Any], defs: Mapping[str, Any], used: dict[str, None]
) -> tuple[str, str]:
    """The parameter list and the parameters' descriptions (`name: text; ...`)."""
    if not isinstance(schema.get("properties"), Mapping):
        return ("" if not schema or schema.get("type") == "object" else _json(schema)), ""
    return _fields(schema, defs, used, 0)


def _fields(
    schema: Mapping[str, Any], defs: Mapping[str, Any], used: dict[str, None], depth: int
) -> tuple[str, str]:
    properties: Mapping[str, Any] = schema["properties"]
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    fields: list[str] = []
    notes: list[str] = []
    for name, prop in properties.items():
        text = f"{name}{'' if name in needed else '?'}: {type_text(prop, defs, used, depth)}"
        if isinstance(prop, Mapping):
            if "default" in prop:
                text += " = " + _json(prop["default"])
            description = prop.get("description")
            if isinstance(description, str) and description.strip():
                notes.append(f"{name}: {' '.join(description.split())}")
        fields.append(text)
    return ", ".join(fields), "; ".join(notes)


def _bounds(schema: Mapping[str, Any]) -> str:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    low_open = "minimum" not in schema and "exclusiveMinimum" in schema
    high_open = "maximum" not in schema and "exclusiveMaximum" in schema
    if low is not None and high is not None and not (low_open or high_open):
        return f" {_json(low)}..{_json(high)}"
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '≥'}{_json(low)}")
    if high is not None:
        parts.append(f"{'<' if high_open else '≤'}{_json(high)}")
    return (" " + " ".join(parts)) if parts else ""


def _range(schema: Mapping[str, Any], low_key: str, high_key: str, unit: str) -> str:
    low, high = schema.get(low_key), schema.get(high_key)
    if low is None and high is None:
        return ""
    if low is not None and high is not None:
        return f" ({_json(low)}..{_json(high)}{unit})"
    return f" (≥{_json(low)}{unit})" if low is not None else f" (≤{_json(high)}{unit})"


def _json(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return str(value)
