"""Language steps in plans: a call with an "instruction" and no tool, as parsed and modelled."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from pes_agent.planning.parser import OutputParser
from pes_agent.planning.plan import LANGUAGE_STEP, ParsedToolCall, PlanningOutput


def parse(calls: list[Any]) -> PlanningOutput:
    text = json.dumps({"intent": "x", "plan": "1. x", "toolCalls": calls})
    return OutputParser().parse_planning_output(text)


def test_instruction_without_tool_name_is_a_language_step() -> None:
    """An entry with only an instruction becomes a language step with the marker tool name."""
    output = parse(
        [
            {"callId": "call_1", "toolName": "search", "arguments": {"q": "tides"}},
            {
                "callId": "call_2",
                "instruction": "Summarise {step_1_result} in one line.",
                "dependsOn": ["call_1"],
            },
        ]
    )
    assert output.errors == []
    assert output.tool_calls is not None
    step = output.tool_calls[1]
    assert step.kind == "language"
    assert step.tool_name == LANGUAGE_STEP
    assert step.instruction == "Summarise {step_1_result} in one line."
    assert step.arguments == {}
    assert step.depends_on == ["call_1"]
    assert output.tool_calls[0].kind == "tool"
    assert output.tool_calls[0].instruction is None


def test_language_step_marker_as_tool_name_is_accepted() -> None:
    """`"toolName": "language_step"` with an instruction is the same language step."""
    output = parse([{"toolName": "language_step", "instruction": "Write a haiku."}])
    assert output.errors == []
    assert output.tool_calls == [ParsedToolCall(call_id="call_1", instruction="Write a haiku.")]


def test_instruction_key_is_matched_in_any_case_and_an_openai_shape() -> None:
    """`Instruction` and an instruction inside an OpenAI-shaped `function` are both read."""
    output = parse(
        [
            {"id": "a", "Instruction": "Say hi."},
            {"id": "b", "type": "function", "function": {"instruction": "Say bye."}},
        ]
    )
    assert output.errors == []
    assert [(c.call_id, c.instruction) for c in output.tool_calls or []] == [
        ("a", "Say hi."),
        ("b", "Say bye."),
    ]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"toolName": "search", "instruction": "Find it."}, 'both "toolName" and "instruction"'),
        ({"instruction": "   "}, "not a non-empty text"),
        ({"instruction": 42}, "not a non-empty text"),
        ({"instruction": "Sum them.", "arguments": {"a": 1}}, "a language step takes none"),
    ],
)
def test_unusable_language_steps_are_errors_for_the_repair_round_trip(
    entry: dict[str, Any], problem: str
) -> None:
    """A language step that is also a tool call, empty, or given arguments is reported."""
    output = parse([{"callId": "ok", "toolName": "search"}, entry])
    assert [c.call_id for c in output.tool_calls or []] == ["ok"]
    assert len(output.errors) == 1
    assert output.errors[0].startswith("Tool call 2 (a language step)")
    assert problem in output.errors[0]


def test_null_instruction_is_an_ordinary_tool_call() -> None:
    """`"instruction": null` next to a tool name leaves an ordinary tool call."""
    output = parse([{"toolName": "search", "instruction": None, "arguments": {"q": "x"}}])
    assert output.errors == []
    assert output.tool_calls == [
        ParsedToolCall(call_id="call_1", tool_name="search", arguments={"q": "x"})
    ]


def test_section_format_reads_language_steps_too() -> None:
    """ART's section format carries language steps in its Tool Calls section."""
    text = 'Intent: x\nPlan: 1. x\nTool Calls: [{"callId": "c1", "instruction": "Say hi."}]'
    output = OutputParser().parse_planning_output(text)
    assert output.errors == []
    assert output.tool_calls is not None
    assert output.tool_calls[0].kind == "language"


def test_model_keeps_the_existing_keyword_constructor() -> None:
    """`ParsedToolCall(call_id, tool_name, arguments, depends_on)` builds a tool call as before."""
    call = ParsedToolCall(call_id="c", tool_name="t", arguments={"a": 1}, depends_on=["b"])
    assert (call.kind, call.instruction, call.tool_name) == ("tool", None, "t")


@pytest.mark.parametrize(
    "fields",
    [
        {"call_id": "c"},
        {"call_id": "c", "tool_name": "search", "instruction": "Find it."},
        {"call_id": "c", "instruction": ""},
        {"call_id": "c", "instruction": "Sum.", "arguments": {"a": 1}},
    ],
)
def test_model_refuses_calls_that_are_neither_or_both(fields: dict[str, Any]) -> None:
    """A call needs a tool name or an instruction, never both, and a step takes no arguments."""
    with pytest.raises(ValidationError):
        ParsedToolCall(**fields)


def test_marker_tool_name_without_instruction_is_an_error() -> None:
    """`"toolName": "language_step"` without an instruction is reported, not run as a tool."""
    output = parse([{"callId": "c1", "toolName": "language_step", "arguments": {}}])
    assert output.tool_calls == []
    assert output.errors == [
        'Tool call 1 ("language_step") is a language step without an "instruction": '
        '{"callId": "c1", "toolName": "language_step", "arguments": {}}. Give it an '
        '"instruction", or name a tool from the list.'
    ]
