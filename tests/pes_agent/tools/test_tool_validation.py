"""`validate_arguments`: the JSON Schema subset tools use, with readable path errors."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from pes_agent.tools import validate_arguments


def obj(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **extra}


def test_valid_arguments_give_no_errors() -> None:
    """Arguments matching every keyword produce an empty list."""
    schema = obj(
        {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        required=["city"],
        additionalProperties=False,
    )
    assert validate_arguments(schema, {"city": "Paris", "days": 3}) == []


@pytest.mark.parametrize(
    ("declared", "value", "actual"),
    [
        ("string", 3, "integer"),
        ("integer", "3", "string"),
        ("integer", 2.5, "number"),
        ("integer", True, "boolean"),
        ("number", False, "boolean"),
        ("boolean", 1, "integer"),
        ("array", {"a": 1}, "object"),
        ("object", [1], "array"),
        ("null", 0, "integer"),
    ],
)
def test_type_mismatch_names_path_expected_and_actual_types(
    declared: str, value: Any, actual: str
) -> None:
    """A wrong type reads `arguments.x: expected <type>, got <type>`."""
    assert validate_arguments(obj({"x": {"type": declared}}), {"x": value}) == [
        f"arguments.x: expected {declared}, got {actual}"
    ]


def test_integer_accepts_a_float_without_fraction_and_number_accepts_int() -> None:
    """3.0 is an integer and 3 is a number, as in JSON Schema."""
    schema = obj({"i": {"type": "integer"}, "n": {"type": "number"}})
    assert validate_arguments(schema, {"i": 3.0, "n": 3}) == []


def test_type_list_accepts_any_listed_type_and_names_them_all() -> None:
    """ "type": ["string", "null"] accepts both and lists both in the error."""
    schema = obj({"x": {"type": ["string", "null"]}})
    assert validate_arguments(schema, {"x": None}) == []
    assert validate_arguments(schema, {"x": 1}) == [
        "arguments.x: expected string or null, got integer"
    ]


def test_missing_required_property_is_reported_at_its_path() -> None:
    """Each missing required property gets its own message."""
    schema = obj({"a": {}, "b": {}}, required=["a", "b"])
    assert validate_arguments(schema, {}) == [
        "arguments.a: required property is missing",
        "arguments.b: required property is missing",
    ]


def test_additional_properties_false_rejects_unknown_keys_listing_allowed_ones() -> None:
    """An unexpected key is named with the allowed keys."""
    schema = obj({"city": {"type": "string"}}, additionalProperties=False)
    assert validate_arguments(schema, {"city": "x", "town": "y"}) == [
        "arguments.town: unexpected property (allowed: city)"
    ]


def test_additional_properties_schema_validates_extra_values() -> None:
    """A schema in additionalProperties applies to every unlisted key."""
    schema = {"type": "object", "additionalProperties": {"type": "number"}}
    assert validate_arguments(schema, {"a": 1, "b": "two"}) == [
        "arguments.b: expected number, got string"
    ]


def test_enum_and_const_show_allowed_values_as_json() -> None:
    """enum lists the choices; const names the one value; true is not 1."""
    schema = obj({"u": {"enum": ["c", "f"]}, "k": {"const": 1}})
    assert validate_arguments(schema, {"u": "k", "k": True}) == [
        'arguments.u: expected one of "c", "f", got "k"',
        "arguments.k: expected 1, got true",
    ]


def test_items_are_validated_with_their_index_in_the_path() -> None:
    """Array items report paths like arguments.tags[1]."""
    schema = obj({"tags": {"type": "array", "items": {"type": "string"}}})
    assert validate_arguments(schema, {"tags": ["a", 2, "c"]}) == [
        "arguments.tags[1]: expected string, got integer"
    ]


def test_numeric_bounds_including_exclusive_ones() -> None:
    """minimum/maximum/exclusiveMinimum/exclusiveMaximum each report the bound."""
    schema = obj(
        {
            "a": {"type": "integer", "minimum": 1},
            "b": {"type": "integer", "maximum": 10},
            "c": {"type": "number", "exclusiveMinimum": 0},
            "d": {"type": "number", "exclusiveMaximum": 1},
        }
    )
    assert validate_arguments(schema, {"a": 0, "b": 11, "c": 0, "d": 1}) == [
        "arguments.a: must be >= 1, got 0",
        "arguments.b: must be <= 10, got 11",
        "arguments.c: must be > 0, got 0",
        "arguments.d: must be < 1, got 1",
    ]


def test_string_length_bounds() -> None:
    """minLength/maxLength report the limit and the actual length."""
    schema = obj({"s": {"type": "string", "minLength": 3}, "t": {"maxLength": 2}})
    assert validate_arguments(schema, {"s": "ab", "t": "abc"}) == [
        "arguments.s: must be at least 3 characters long, got 2",
        "arguments.t: must be at most 2 characters long, got 3",
    ]


def test_any_of_optional_reports_the_union_of_types() -> None:
    """Pydantic's Optional[int] (anyOf integer|null) explains both accepted types."""
    schema = obj({"n": {"anyOf": [{"type": "integer"}, {"type": "null"}]}})
    assert validate_arguments(schema, {"n": None}) == []
    assert validate_arguments(schema, {"n": "x"}) == [
        "arguments.n: expected integer or null, got string"
    ]


def test_any_of_reports_the_specific_errors_of_the_branch_whose_type_fits() -> None:
    """When one alternative has the value's type, its detailed errors are shown."""
    schema = obj(
        {
            "tags": {
                "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
            }
        }
    )
    assert validate_arguments(schema, {"tags": [1]}) == [
        "arguments.tags[0]: expected string, got integer"
    ]


def test_one_of_rejects_a_value_matching_two_alternatives() -> None:
    """oneOf needs exactly one matching alternative."""
    schema = obj({"x": {"oneOf": [{"type": "integer"}, {"type": "number"}]}})
    assert validate_arguments(schema, {"x": 2.5}) == []
    assert validate_arguments(schema, {"x": 2}) == [
        "arguments.x: matches more than one of the allowed schemas (oneOf)"
    ]


def test_ref_into_defs_is_followed() -> None:
    """$ref to #/$defs/Name validates against that definition, nested paths included."""
    schema = {
        "type": "object",
        "properties": {"loc": {"$ref": "#/$defs/Loc"}},
        "required": ["loc"],
        "$defs": {
            "Loc": {
                "type": "object",
                "properties": {"lat": {"type": "number"}},
                "required": ["lat"],
            }
        },
    }
    assert validate_arguments(schema, {"loc": {"lat": 1}}) == []
    assert validate_arguments(schema, {"loc": {"lat": "n"}}) == [
        "arguments.loc.lat: expected number, got string"
    ]
    assert validate_arguments(schema, {"loc": {}}) == [
        "arguments.loc.lat: required property is missing"
    ]


def test_unresolvable_ref_is_an_error_not_a_crash() -> None:
    """A $ref the validator cannot follow is reported once."""
    schema = obj({"x": {"$ref": "https://example.com/schema"}})
    assert validate_arguments(schema, {"x": 1}) == [
        'arguments.x: the tool\'s schema has an unresolvable $ref "https://example.com/schema"'
    ]


def test_keys_that_are_not_identifiers_are_quoted_in_the_path() -> None:
    """A property name with spaces is written as ["the key"] in the path."""
    schema = {"type": "object", "additionalProperties": {"type": "string"}}
    assert validate_arguments(schema, {"the key": 1}) == [
        'arguments["the key"]: expected string, got integer'
    ]


def test_unknown_keywords_are_ignored() -> None:
    """Keywords outside the subset (format, description) never reject a value."""
    schema = obj({"when": {"type": "string", "format": "date-time", "description": "d"}})
    assert validate_arguments(schema, {"when": "not a date"}) == []


def test_non_json_python_values_are_left_to_the_tool() -> None:
    """A datetime passed on by a placeholder is not judged by the JSON checks."""
    schema = obj({"when": {"type": "string"}})
    assert validate_arguments(schema, {"when": dt.datetime(2024, 1, 1)}) == []


def test_pattern_must_match() -> None:
    """pattern is searched in the string."""
    schema = obj({"code": {"type": "string", "pattern": "^[A-Z]{3}$"}})
    assert validate_arguments(schema, {"code": "EUR"}) == []
    assert validate_arguments(schema, {"code": "eu"}) == [
        'arguments.code: must match the pattern "^[A-Z]{3}$"'
    ]
