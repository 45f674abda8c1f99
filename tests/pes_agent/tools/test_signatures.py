"""Tools as one-line signatures: what a model needs to call them, in few tokens."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from pes_agent.tools import ToolSchema, tool
from pes_agent.tools.signatures import tool_signature, type_text


class Address(BaseModel):
    street: str
    zip: str | None = None


@tool
def search(
    query: Annotated[str, Field(description="what to look for")],
    limit: Annotated[int, Field(ge=1, le=50)] = 10,
    mode: Literal["fast", "deep"] = "fast",
    tags: list[str] | None = None,
    near: Address | None = None,
) -> str:
    """Search the catalogue."""
    return ""


def test_a_tool_is_one_line_with_its_parameters_and_descriptions() -> None:
    """Required and optional parameters, defaults, enums, bounds, nested objects and the
    parameter descriptions all show, in a fraction of the JSON Schema's length."""
    text = tool_signature(search.schema)
    assert text == (
        'search(query: str, limit?: int 1..50 = 10, mode?: "fast"|"deep" = "fast", '
        "tags?: [str]|null = null, near?: Address|null = null) — Search the catalogue. "
        "query: what to look for\n"
        "  Address = {street: str, zip?: str|null = null}"
    )
    assert len(text) < len(json.dumps(search.schema.input_schema)) / 2


def test_types_have_short_forms() -> None:
    """Scalars, formats, arrays, maps and unions read at a glance."""
    assert type_text({"type": "string", "format": "date"}) == "str (date)"
    assert type_text({"type": "number", "exclusiveMinimum": 0}) == "number >0"
    assert type_text({"type": "array", "items": {"type": "integer"}, "maxItems": 3}) == (
        "[int] (≤3 items)"
    )
    assert type_text({"type": "object", "additionalProperties": {"type": "number"}}) == (
        "{str: number}"
    )
    assert type_text({"type": ["string", "null"]}) == "str|null"
    assert type_text({"const": "x"}) == '"x"'
    assert type_text({}) == "any"


def test_what_has_no_short_form_is_shown_as_json_never_dropped() -> None:
    """A keyword the signature cannot say (a pattern, an unresolvable $ref) keeps the schema
    in full, as compact JSON."""
    patterned = {"type": "string", "pattern": "^[A-Z]{3}$"}
    assert type_text(patterned) == '{"pattern":"^[A-Z]{3}$","type":"string"}'
    assert type_text({"$ref": "https://example.com/s.json"}) == (
        '{"$ref":"https://example.com/s.json"}'
    )


def test_a_class_tool_with_an_unusual_schema_still_renders() -> None:
    """A tool whose schema has no properties, or is not an object, is still listed."""
    bare: dict[str, Any] = {}
    assert tool_signature(ToolSchema(name="ping", description="Ping.", input_schema=bare)) == (
        "ping() — Ping."
    )
    odd = ToolSchema(name="odd", description="", input_schema={"type": "array"})
    assert tool_signature(odd) == 'odd({"type":"array"})'
