"""Placeholders: `{step_N_result}` / `<step_N_result>` filled from earlier results."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import BaseModel

from pes_agent.errors import RunError
from pes_agent.execution.placeholders import (
    PlaceholderError,
    find_references,
    resolve_placeholders,
)

WEATHER = {"city": "Paris", "temp": 21, "days": [{"high": 23}, {"high": 19}]}


class Forecast(BaseModel):
    """A structured tool result."""

    city: str
    highs: list[int]


def test_whole_value_placeholder_keeps_the_result_type() -> None:
    """A value that is exactly one placeholder becomes the raw result, not a string."""
    resolved = resolve_placeholders(
        {"data": "{step_1_result}", "n": "{step_2_result}"}, {1: WEATHER, 2: 42}
    )
    assert resolved == {"data": WEATHER, "n": 42}
    assert isinstance(resolved["n"], int)


def test_angle_bracket_syntax_is_the_same_placeholder() -> None:
    """<step_N_result> resolves exactly like {step_N_result}."""
    assert resolve_placeholders({"a": "<step_1_result>"}, {1: [1, 2]}) == {"a": [1, 2]}


def test_whole_value_ignores_surrounding_whitespace() -> None:
    """Whitespace around a lone placeholder (and just inside its braces) is ignored."""
    assert resolve_placeholders({"a": "  { step_1_result }\n"}, {1: 7}) == {"a": 7}


def test_placeholder_inside_text_is_replaced_by_json_for_dicts_and_lists() -> None:
    """Embedded dicts and lists become JSON, keeping non-ASCII characters."""
    resolved = resolve_placeholders(
        {"text": "Data: {step_1_result} and <step_2_result>."},
        {1: {"city": "Zürich"}, 2: [1, "a"]},
    )
    assert resolved == {"text": 'Data: {"city": "Zürich"} and [1, "a"].'}


def test_placeholder_inside_text_uses_str_for_scalars() -> None:
    """Embedded numbers, strings, None and booleans read as str() of the value."""
    resolved = resolve_placeholders(
        {"t": "{step_1_result}|{step_2_result}|{step_3_result}|{step_4_result}"},
        {1: 3.5, 2: "plain", 3: None, 4: True},
    )
    assert resolved == {"t": "3.5|plain|None|True"}


def test_embedded_pydantic_model_becomes_json() -> None:
    """A pydantic model result is embedded as its JSON form."""
    resolved = resolve_placeholders(
        {"t": "f={step_1_result}"}, {1: Forecast(city="Oslo", highs=[3, 4])}
    )
    assert resolved == {"t": 'f={"city": "Oslo", "highs": [3, 4]}'}


def test_field_and_index_access_reach_into_structured_results() -> None:
    """{step_N_result.a.b[i]} follows keys and list indices, negative ones included."""
    resolved = resolve_placeholders(
        {
            "city": "{step_1_result.city}",
            "high": "<step_1_result.days[0].high>",
            "last": "{step_1_result.days[-1]}",
            "text": "High of {step_1_result.days[1].high} in {step_1_result.city}",
        },
        {1: WEATHER},
    )
    assert resolved == {
        "city": "Paris",
        "high": 23,
        "last": {"high": 19},
        "text": "High of 19 in Paris",
    }


def test_field_access_reads_pydantic_model_fields() -> None:
    """.field works on pydantic model results as on dicts."""
    resolved = resolve_placeholders(
        {"h": "{step_1_result.highs[1]}"}, {1: Forecast(city="Oslo", highs=[3, 4])}
    )
    assert resolved == {"h": 4}


def test_placeholders_in_nested_dicts_and_lists_keep_their_types() -> None:
    """Resolution recurses into dict values and list items at any depth."""
    arguments = {"outer": {"items": ["{step_1_result}", ["<step_2_result.temp>", "x"]]}}
    assert resolve_placeholders(arguments, {1: [1], 2: WEATHER}) == {
        "outer": {"items": [[1], [21, "x"]]}
    }


def test_dict_keys_are_never_resolved() -> None:
    """A placeholder written as a key stays as written."""
    assert resolve_placeholders({"{step_1_result}": "v"}, {1: "x"}) == {"{step_1_result}": "v"}


def test_inputs_are_not_mutated_and_containers_are_new() -> None:
    """resolve_placeholders builds new dicts and lists; the arguments stay as they were."""
    arguments: dict[str, Any] = {"a": ["{step_1_result}"], "b": {"c": "{step_1_result}"}}
    before = copy.deepcopy(arguments)
    resolved = resolve_placeholders(arguments, {1: 5})
    assert arguments == before
    assert resolved["a"] is not arguments["a"]
    assert resolved["b"] is not arguments["b"]


@pytest.mark.parametrize(
    "text",
    [
        "{__import__('os').system('echo hi')}",
        "{0}",
        "{step_1_result!r}",
        "{step_1_result:>10}",
        "{}",
        "{{step}}",
        "<script>",
    ],
)
def test_model_text_that_looks_like_format_fields_is_left_literal(text: str) -> None:
    """Braces that are not placeholders are never evaluated or formatted."""
    assert resolve_placeholders({"t": text}, {1: "X"}) == {"t": text}


def test_missing_field_raises_placeholder_error_naming_the_field_and_alternatives() -> None:
    """A field that is not there raises PlaceholderError with the available fields."""
    with pytest.raises(PlaceholderError) as caught:
        resolve_placeholders({"t": "{step_1_result.temperature}"}, {1: WEATHER})
    assert caught.value.message == (
        'Cannot resolve {step_1_result.temperature}: step_1_result has no field "temperature" '
        "(its fields: city, temp, days)."
    )
    assert caught.value.placeholder == "{step_1_result.temperature}"
    assert isinstance(caught.value, RunError)


def test_index_out_of_range_names_the_length() -> None:
    """An index past the end says how many items there are."""
    with pytest.raises(
        PlaceholderError, match=r"step_1_result\.days has 2 items, so there is no index 5"
    ):
        resolve_placeholders({"t": "{step_1_result.days[5].high}"}, {1: WEATHER})


def test_field_of_a_scalar_explains_the_type() -> None:
    """Reading a field of a number says the value is a number."""
    with pytest.raises(
        PlaceholderError, match=r"step_1_result\.temp is a number, which has no field"
    ):
        resolve_placeholders({"t": "{step_1_result.temp.value}"}, {1: WEATHER})


def test_step_without_result_raises() -> None:
    """A placeholder for a step that has no result is an error naming the step."""
    with pytest.raises(PlaceholderError, match="step 3 has no result"):
        resolve_placeholders({"t": "x {step_3_result}"}, {1: "a"})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{step_2_result}", {"k": [1]}),
        ("{step_\u0662_result}", {"k": [1]}),  # an Arabic-Indic 2: a decimal digit, as \\d
        ("{step_\u00b2_result}", "{step_\u00b2_result}"),  # a superscript 2 is no digit
        ("{step__result}", "{step__result}"),
        ("{step_2_result}x", '{"k": [1]}x'),  # inside a longer text: JSON
    ],
)
def test_a_value_that_is_exactly_one_placeholder_reads_digits_as_the_pattern_does(
    text: str, expected: Any
) -> None:
    """Exactly `{step_N_result}`: N in any decimal digits, nothing else; the result copied."""
    results = {2: {"k": [1]}}
    resolved = resolve_placeholders({"v": text}, results)
    assert resolved == {"v": expected}
    if isinstance(expected, dict):
        assert resolved["v"] is not results[2]


def test_exactly_one_placeholder_for_a_step_without_result_raises() -> None:
    """`{step_N_result}` alone, N not done, is the same error as inside a text."""
    with pytest.raises(PlaceholderError, match=r"Cannot resolve \{step_3_result\}: step 3 has"):
        resolve_placeholders({"t": "{step_3_result}"}, {1: "a"})


def test_find_references_collects_step_numbers_from_values_only() -> None:
    """find_references walks values and lists, both syntaxes, and skips keys."""
    arguments = {
        "a": "{step_1_result.x} and <step_3_result>",
        "b": [{"c": "{step_2_result[0]}"}],
        "{step_9_result}": "key ignored",
        "d": 5,
    }
    assert find_references(arguments) == {1, 2, 3}


def test_find_references_reports_step_zero_as_written() -> None:
    """Step 0 is returned so the plan check can call it out."""
    assert find_references({"a": "{step_0_result}"}) == {0}


def test_whole_value_placeholder_is_a_copy_the_tool_may_change_freely() -> None:
    """Changing a resolved structured value leaves the earlier step's result untouched."""
    results = {1: {"items": [1, 2, 3]}}
    resolved = resolve_placeholders({"data": "{step_1_result}"}, results)
    resolved["data"]["items"].append(6)
    assert results[1] == {"items": [1, 2, 3]}
    assert resolved["data"] == {"items": [1, 2, 3, 6]}


def test_a_result_that_cannot_be_copied_is_passed_as_it_is() -> None:
    """An uncopyable object (a lock) still reaches the next tool, as the same object."""
    import threading

    lock = threading.Lock()
    assert resolve_placeholders({"lock": "{step_1_result}"}, {1: lock})["lock"] is lock


def test_a_step_number_too_long_to_be_a_step_is_no_placeholder() -> None:
    """More than 18 digits (past 4,300 Python would refuse to read the number): the text
    stays as written, as a reference nor as an error; 18 digits are still a placeholder."""
    for digits in ("9" * 19, "9" * 5000):
        for text in (f"{{step_{digits}_result}}", f"<step_1_result[{digits}]>"):
            assert find_references({"q": text, "r": [text]}) == set()
            assert resolve_placeholders({"q": text}, {1: [1]}) == {"q": text}
    assert find_references({"q": "{step_" + "9" * 18 + "_result}"}) == {10**18 - 1}
