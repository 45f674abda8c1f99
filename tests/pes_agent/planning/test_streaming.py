"""Reading a plan as it streams: each call is submitted the moment it is complete."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pes_agent.planning.parser import OutputParser
from pes_agent.planning.plan import ParsedToolCall, same_call
from pes_agent.planning.streaming import PlanStreamReader

PARSER = OutputParser()

LINES = (
    '1. get_weather(city="Paris")\n'
    '2. get_weather(city="Tokyo")  # the second\n'
    '3. after 1: language_step("Compare {step_1_result} and {step_2_result}.")\n'
    "Intent: compare two cities\n"
)
JSON_PLAN = json.dumps(
    {
        "calls": [
            {"tool": "get_weather", "args": '{"city": "Paris"}', "after": []},
            {"tool": "get_weather", "args": '{"city": "Tokyo"}', "after": []},
        ],
        "intent": "two cities",
    }
)
LEGACY_JSON = json.dumps(
    {
        "title": "t",
        "intent": "i",
        "plan": "1. a\n2. b",
        "toolCalls": [
            {"callId": "c1", "toolName": "a", "arguments": {"x": [1, {"y": "]}"}]}},
            {"callId": "c2", "toolName": "b", "arguments": {}, "dependsOn": ["c1"]},
        ],
    }
)


class Fed:
    """Feeds a text in pieces and notes after which piece each call was submitted."""

    def __init__(self) -> None:
        self.calls: list[ParsedToolCall] = []
        self.at: list[int] = []
        self.reader = PlanStreamReader(self._submit)
        self.fed = 0

    def _submit(self, call: ParsedToolCall) -> None:
        self.calls.append(call)
        self.at.append(self.fed)

    def feed(self, text: str, size: int = 3) -> Fed:
        for start in range(0, len(text), size):
            self.fed = start + size
            self.reader.on_text(text[start : start + size])
        return self


def same_calls(submitted: list[ParsedToolCall], parsed: list[ParsedToolCall] | None) -> bool:
    """The calls submitted are the parsed calls (a call line's `why` comes after its `)`)."""
    parsed = parsed or []
    return len(submitted) == len(parsed) and all(map(same_call, submitted, parsed))


@pytest.mark.parametrize("text", [LINES, JSON_PLAN, LEGACY_JSON, "```json\n" + LEGACY_JSON])
def test_the_calls_submitted_are_the_parsers_calls(text: str) -> None:
    """Whatever the form, the calls submitted are those the parser reads at the end; the
    lines the reader read reach the parser whole, reasons included."""
    fed = Fed().feed(text)
    whole = PARSER.parse_planning_output(text)
    assert same_calls(fed.calls, whole.tool_calls)
    assert PARSER.parse_planning_output(text, read=fed.reader.read) == whole
    assert not fed.reader.stopped


def test_a_call_line_is_submitted_at_its_closing_parenthesis() -> None:
    """Each call goes out with the `)` that closes it, before its `# why` and its line's end,
    long before the answer ends; the reason reaches the final plan through `read`."""
    fed = Fed().feed(LINES, size=1)
    closes = []
    for n in (1, 2, 3):
        start = LINES.index(f"{n}. ")
        closes.append(LINES.rindex(")", start, LINES.index("\n", start)) + 1)
    assert fed.at == closes
    assert fed.calls[1].why is None
    assert fed.calls[2].depends_on == ["call_1"]
    read = PARSER.parse_planning_output(LINES, read=fed.reader.read).tool_calls or []
    assert read[1].why == "the second"


def test_a_reason_that_reads_like_more_of_the_call_changes_nothing() -> None:
    """A `)` inside a string or a reason does not complete a call early: the call goes out at
    its own `)`, once."""
    text = '1. a(x=")")  # b(y=1)\n2. c(z="(")\nIntent: x\n'
    fed = Fed().feed(text, size=1)
    assert [(call.tool_name, call.arguments) for call in fed.calls] == [
        ("a", {"x": ")"}),
        ("c", {"z": "("}),
    ]
    assert fed.at == [text.index(")  #") + 1, text.index('"(")') + 4]
    assert not fed.reader.stopped


def test_after_behind_a_call_stops_the_reader() -> None:
    """`after N` behind a call that already went out at its `)` makes its line unreadable:
    the reader stops, and the parser reports the line (the plan is repaired)."""
    fed = Fed().feed("1. a()\n2. b() after 1\n3. c()\nIntent: x\n", size=1)
    assert [call.tool_name for call in fed.calls] == ["a", "b"]
    assert fed.reader.stopped


def test_a_json_call_is_submitted_when_its_object_closes() -> None:
    """In a JSON plan each call goes out when its object closes; brackets inside strings do
    not fool it."""
    fed = Fed().feed(LEGACY_JSON, size=1)
    first_end = LEGACY_JSON.index('"}]}}') + len('"}]}}')
    assert fed.at[0] == first_end
    assert fed.calls[0].arguments == {"x": [1, {"y": "]}"}]}


@pytest.mark.parametrize(
    "text",
    [
        "Intent: x\nPlan: 1. a\nTool Calls: [" + '{"callId": "c1", "toolName": "a"}]',
        'Here is the plan: {"toolCalls": [{"toolName": "a"}]}',
        "Sure(ly) I can help.\n1. a()\n",
    ],
)
def test_other_forms_are_left_to_the_parser(text: str) -> None:
    """ART's sections and prose before the plan are not streamed: nothing is submitted."""
    assert Fed().feed(text).calls == []


def test_a_call_that_cannot_be_read_stops_the_reader() -> None:
    """At the first unreadable call nothing more is submitted (the plan will be repaired)."""
    fed = Fed().feed("1. a(x=1)\n2. b(x='no')\n3. c()\nIntent: x\n")
    assert [call.tool_name for call in fed.calls] == ["a"]
    assert fed.reader.stopped


def test_a_repeated_call_id_stops_the_reader() -> None:
    """A JSON plan repeating a call id is unusable: the second call is not submitted."""
    text = json.dumps(
        {"toolCalls": [{"callId": "c", "toolName": "a"}, {"callId": "c", "toolName": "b"}]}
    )
    fed = Fed().feed(text)
    assert [call.tool_name for call in fed.calls] == ["a"]
    assert fed.reader.stopped


def test_thinking_before_the_plan_is_skipped() -> None:
    """A leading <think> block is skipped, braces and call-like text inside it included."""
    fed = Fed().feed("<think>maybe a(x=1) or {no}</think>\n" + LINES)
    assert [call.call_id for call in fed.calls] == ["call_1", "call_2", "call_3"]


def test_a_restart_submits_only_what_is_new() -> None:
    """After a restart the answer is read from the start; calls already submitted are not
    submitted twice, later ones are."""
    fed = Fed().feed(LINES[:40])
    assert len(fed.calls) == 1
    fed.reader.on_restart()
    fed.feed(LINES)
    assert [call.call_id for call in fed.calls] == ["call_1", "call_2", "call_3"]
    assert not fed.reader.stopped


def test_a_restart_with_another_answer_stops_the_reader() -> None:
    """When the restarted answer's call differs from the one submitted at its place, the
    reader stops: what started is not this plan."""
    fed = Fed().feed(LINES[:40])
    fed.reader.on_restart()
    fed.feed('1. get_weather(city="Rome")\n2. b()\n')
    assert len(fed.calls) == 1
    assert fed.reader.stopped


@given(st.integers(min_value=1, max_value=40), st.sampled_from([LINES, JSON_PLAN, LEGACY_JSON]))
def test_how_the_text_is_cut_changes_nothing(size: int, text: str) -> None:
    """The calls submitted do not depend on how the stream is cut into pieces."""
    fed = Fed().feed(text, size=size)
    assert same_calls(fed.calls, PARSER.parse_planning_output(text).tool_calls)
    assert PARSER.parse_planning_output(text, read=fed.reader.read).tool_calls == (
        PARSER.parse_planning_output(text).tool_calls
    )


@pytest.mark.parametrize("label", ["Intent: x", "**Intent:** x", "* Title: x", "## Plan: a(1)"])
def test_a_label_line_ends_the_calls(label: str) -> None:
    """Once a label line streams, the calls are over: a call line after it is not submitted."""
    fed = Fed().feed(f"1. a(x=1)\n{label}\n2. b(x=2)\n")
    assert [call.tool_name for call in fed.calls] == ["a"]
    assert not fed.reader.stopped


def test_a_tool_named_like_a_label_is_a_call() -> None:
    """A call to a tool named `intent` or `plan` is a call, not the intent line."""
    fed = Fed().feed("1. intent(x=1)\n2. plan (x=2)\n* title(x=3)\nIntent: x\n")
    assert [call.tool_name for call in fed.calls] == ["intent", "plan", "title"]
    assert PARSER.parse_planning_output(
        "1. intent(x=1)\n2. plan (x=2)\n* title(x=3)\nIntent: x\n", read=fed.reader.read
    ) == PARSER.parse_planning_output("1. intent(x=1)\n2. plan (x=2)\n* title(x=3)\nIntent: x\n")
