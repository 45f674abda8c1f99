"""The compact planning protocol: a call per line, then a line of intent."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from pes_agent.planning.call_lines import (
    CallLine,
    LineProblem,
    read_call_line,
    render_call,
    render_calls,
)
from pes_agent.planning.parser import OutputParser
from pes_agent.planning.plan import LANGUAGE_STEP, ParsedToolCall, same_call

PARSER = OutputParser()


def test_a_plan_is_its_calls_then_an_intent_that_is_also_the_title() -> None:
    """Numbered call lines become the calls (ids by position), the Intent line the intent
    and the title; no plan prose is needed."""
    output = PARSER.parse_planning_output(
        '1. get_weather(city="Paris")\n'
        '2. get_weather(city="Tokyo")  # the second city\n'
        '3. calculator(expression="{step_1_result.temp_c} - {step_2_result.temp_c}")\n'
        "Intent: how much warmer Tokyo is\n"
    )
    assert output.errors == []
    assert output.intent == output.title == "how much warmer Tokyo is"
    assert output.plan is None
    assert output.tool_calls == [
        ParsedToolCall(call_id="call_1", tool_name="get_weather", arguments={"city": "Paris"}),
        ParsedToolCall(
            call_id="call_2",
            tool_name="get_weather",
            arguments={"city": "Tokyo"},
            why="the second city",
        ),
        ParsedToolCall(
            call_id="call_3",
            tool_name="calculator",
            arguments={"expression": "{step_1_result.temp_c} - {step_2_result.temp_c}"},
        ),
    ]


def test_values_are_json_and_python_literals_are_read_too() -> None:
    """Strings, numbers, booleans, null, arrays and objects are JSON; True/False/None too."""
    (call,) = (
        PARSER.parse_planning_output(
            'search(q="a, b", n=3, x=1.5, on=true, off=False, none=None, tags=["a", "b"], '
            'where={"lang": "en"})\n'
        ).tool_calls
        or []
    )
    assert call.arguments == {
        "q": "a, b",
        "n": 3,
        "x": 1.5,
        "on": True,
        "off": False,
        "none": None,
        "tags": ["a", "b"],
        "where": {"lang": "en"},
    }


def test_after_adds_dependencies_by_step_and_language_steps_take_an_instruction() -> None:
    """`after N, M:` before a call waits for those steps; `language_step("...")` is a
    language step."""
    output = PARSER.parse_planning_output(
        "1. a()\n2. b()\n"
        '3. after 1, 2: language_step("Compare {step_1_result} and {step_2_result}.")\n'
        '4. language_step(instruction="Shorten {step_3_result}.")\n'
        "5. After step 4: c(x=1)  # once it is short\n"
        "Intent: compare\n"
    )
    calls = output.tool_calls or []
    assert output.errors == []
    assert calls[2].instruction == "Compare {step_1_result} and {step_2_result}."
    assert calls[2].depends_on == ["call_1", "call_2"]
    assert calls[3].kind == "language"
    assert (calls[4].tool_name, calls[4].depends_on, calls[4].why) == (
        "c",
        ["call_4"],
        "once it is short",
    )
    assert [call.call_id for call in calls] == [f"call_{n}" for n in range(1, 6)]


def test_after_behind_a_call_is_refused_with_where_to_write_it() -> None:
    """`after N` behind the `)` comes too late (the call may have started at its `)`): the
    line is refused, and the message shows the form to write."""
    output = PARSER.parse_planning_output("1. a()\n2. b(x=1) after 1\nIntent: x\n")
    assert len(output.errors) == 1
    assert "N. after 1: b(...)" in output.errors[0]


def test_no_calls_is_an_intent_line_alone() -> None:
    """An answer with only the Intent line plans no call."""
    output = PARSER.parse_planning_output("Intent: just chat\n")
    assert output.errors == []
    assert output.intent == "just chat"
    assert not output.tool_calls


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("1. search(query='a')", "strings need double quotes"),
        ('1. search("a")', "argument without a name"),
        ('1. search(query="a", query="b")', "given twice"),
        ('1. search(query="a" limit=3)', "Expected ',' or ')'"),
        ('1. search(query="a"', "not closed"),
        ('1. search(query="a") please', "Unexpected text after the call"),
        ("1. language_step()", "exactly one instruction"),
    ],
)
def test_a_call_that_cannot_be_read_is_an_error_for_the_model(line: str, fragment: str) -> None:
    """A line that starts like a call but cannot be read is reported, with what to fix."""
    output = PARSER.parse_planning_output(line + "\nIntent: x\n")
    assert len(output.errors) == 1
    assert output.errors[0].startswith("Call 1:")
    assert fragment in output.errors[0]


def test_a_broken_call_keeps_the_later_steps_numbered() -> None:
    """A bad line still counts as a step, so the steps after it keep their numbers."""
    output = PARSER.parse_planning_output("1. a(x=')\n2. b(y=1)\nIntent: x\n")
    assert [call.call_id for call in output.tool_calls or []] == ["call_2"]


def test_prose_fences_and_thinking_around_the_calls_are_ignored() -> None:
    """Code fences, a <think> block and lines of prose do not change the calls."""
    output = PARSER.parse_planning_output(
        '<think>two lookups</think>\n```\nweb_search(query="x")\n```\nThat is all.\n'
        "Intent: look it up\n"
    )
    assert output.thoughts == ["two lookups"]
    assert [call.tool_name for call in output.tool_calls or []] == ["web_search"]


def test_json_plans_and_art_sections_are_still_read() -> None:
    """Today's JSON plan and ART's section format stay accepted beside the compact one."""
    json_plan = PARSER.parse_planning_output(
        '{"intent": "x", "toolCalls": [{"callId": "c1", "toolName": "a", "arguments": {}}]}'
    )
    sections = PARSER.parse_planning_output(
        'Intent: x\nPlan: 1. do(it)\nTool Calls: [{"callId": "c1", "toolName": "a"}]'
    )
    assert [c.call_id for c in json_plan.tool_calls or []] == ["c1"]
    assert [c.call_id for c in sections.tool_calls or []] == ["c1"]
    assert sections.plan == "1. do(it)"


def test_read_call_line_completes_a_streaming_call_at_its_closing_parenthesis() -> None:
    """Mid-stream a call is complete at its `)`: nothing later on the line can change it (a
    `# why` only explains it), so it is read then, without its reason, and its line's end is
    not known yet (-1)."""
    assert read_call_line("a(x=1", final=False) is None
    assert read_call_line('a(x="Par', final=False) is None
    assert read_call_line('a(x=")', final=False) is None  # the ")" is inside a string
    for partial in ("a(x=1)", "a(x=1)  ", "a(x=1)  #", "a(x=1) # to che", "a(x=1) /"):
        read = read_call_line(partial, final=False)
        assert isinstance(read, CallLine), partial
        assert (read.name, read.arguments, read.why, read.end) == ("a", {"x": 1}, None, -1)
    ended = read_call_line("a(x=1) # to check\n", final=False)
    assert isinstance(ended, CallLine)
    assert (ended.why, ended.end) == ("to check", len("a(x=1) # to check\n"))
    after = read_call_line("after 2: a(x=1)", final=False)
    assert isinstance(after, CallLine)
    assert after.after == (2,)
    assert read_call_line("a(x=1) aft", final=False) is None  # the line's end decides
    assert isinstance(read_call_line("a(x=1) after 2\n", final=False), LineProblem)
    assert isinstance(read_call_line("a(x=')\n", final=False), LineProblem)


def test_same_call_ignores_only_why() -> None:
    """`same_call` compares every field of a call but its reason: changing any other field
    (one at a time, over all of `ParsedToolCall`'s fields) makes the calls differ."""
    base = ParsedToolCall(call_id="call_1", tool_name="a", arguments={"x": 1})
    assert same_call(base, base.model_copy(update={"why": "because"}))
    changes: dict[str, object] = {
        "call_id": "call_2",
        "tool_name": "b",
        "arguments": {"x": 2},
        "depends_on": ["call_0"],
        "instruction": "Say hi.",
    }
    assert set(changes) | {"why"} == set(ParsedToolCall.model_fields)
    for field, value in changes.items():
        assert not same_call(base, base.model_copy(update={field: value})), field


def test_render_call_writes_the_protocol_back() -> None:
    """Rendered calls read back as the same calls (the PLAN observation's text)."""
    calls = [
        ParsedToolCall(call_id="call_1", tool_name="a", arguments={"q": 'say "hi"', "n": 2}),
        ParsedToolCall(
            call_id="call_2", instruction="Shorten {step_1_result}.", depends_on=["call_1"]
        ),
        ParsedToolCall(call_id="call_3", tool_name="b", why="to check"),
    ]
    text = render_calls(calls)
    assert text.splitlines()[2] == "3. b()  # to check"
    assert render_call(calls[2], why=False) == "b()"
    assert PARSER.parse_planning_output(text).tool_calls == calls


_KEYS = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


@given(st.dictionaries(_KEYS, _VALUES, max_size=4))
def test_any_arguments_survive_a_round_trip(arguments: dict[str, object]) -> None:
    """Whatever JSON arguments a call has, its rendered line reads back to the same call."""
    call = ParsedToolCall(call_id="call_1", tool_name="tool", arguments=arguments)
    output = PARSER.parse_planning_output(render_calls([call]) + "\nIntent: x")
    assert output.errors == []
    assert output.tool_calls == [call]


def _validated(call: ParsedToolCall) -> ParsedToolCall:
    return ParsedToolCall(**{name: getattr(call, name) for name in call.model_fields_set})


@pytest.mark.parametrize(
    "line",
    [
        'after 1, 2: search(query="x", n=3, nested={"a": [1, 2]})  # why not',
        "ping()",
        'language_step("Summarise {step_1_result}.")  # short',
        'after 2: language_step(instruction="Compare.")',
    ],
)
def test_a_read_call_is_the_call_validation_builds(line: str) -> None:
    read = read_call_line(line)
    assert isinstance(read, CallLine)
    call = read.call(3)
    same = _validated(call)
    assert call == same
    assert call.model_fields_set == same.model_fields_set
    assert call.model_dump_json() == same.model_dump_json()
    # Its arguments are its own, as validation makes them.
    assert call.arguments is not read.arguments or not read.arguments
    assert read.call(3) == call


def test_a_call_line_built_by_hand_is_still_validated() -> None:
    with pytest.raises(ValidationError, match="reserved for language steps"):
        CallLine(LANGUAGE_STEP, {}, (), None, 0).call(1)
    with pytest.raises(ValidationError, match="non-empty instruction"):
        CallLine(LANGUAGE_STEP, {}, (), None, 0, instruction="  ").call(1)
    with pytest.raises(ValidationError):
        CallLine("f", {1: "x"}, (), None, 0).call(1)


class _Text(str):
    pass


class _Number(int):
    pass


@pytest.mark.parametrize(
    "value",
    [
        *(1, -5, 10**30, True, None, 1.5, float("nan"), 'é"\n', _Text("x"), _Number(3)),
        *([1, {"a": "é"}], {"k": (1, 2)}, object(), {1: 2}, {(1,): 2}),
    ],
    ids=repr,
)
def test_a_rendered_value_is_what_json_dumps_writes(value: object) -> None:
    """Argument values render as json.dumps(ensure_ascii=False) writes them, or as the JSON
    string of their str() when JSON cannot hold them."""
    try:
        expected = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        expected = json.dumps(str(value), ensure_ascii=False)
    call = ParsedToolCall(call_id="call_1", tool_name="f", arguments={"v": value})
    assert render_call(call) == f"f(v={expected})"


_SPACES = st.sampled_from(["", " ", "  ", "\t", "\n", " \r\n "])
_KEYS = st.sampled_from(["x", "_a1", '"quoted key"', '""', "True", "x", "1bad"])
_VALUES = st.sampled_from(
    [
        "0", "-0", "7", "-12", "01", "1.5", "1e3", "12345678901234567890", '""', '"text"',
        '"é ü"', '"tab\there"', '"esc\\"aped"', '"open', "true", "false", "null", "True",
        "False", "None", "truex", "NaN", "[1, 2]", '{"a": 1}', "", "x",
    ]
)  # fmt: skip
_SEPARATORS = st.sampled_from([",", ", ", ")", ",)", ", )", " ", "", ";", "=1)"])


@given(
    st.lists(st.tuples(_SPACES, _KEYS, _SPACES, st.sampled_from(["=", ":", " "]), _VALUES)),
    st.lists(_SEPARATORS, min_size=1),
    _SPACES,
)
def test_the_plain_argument_shortcut_reads_what_the_general_reading_reads(
    arguments: list[tuple[str, str, str, str, str]], separators: list[str], before: str
) -> None:
    """Arguments read in one regular-expression match each are read as the general
    reading reads them, and anything else is left to it (its error wording included)."""
    from pes_agent.planning import call_lines

    text = "f(" + before
    for index, (space, key, around, equals, value) in enumerate(arguments):
        text += f"{space}{key}{around}{equals}{around}{value}{separators[index % len(separators)]}"
    if not arguments:
        text += separators[0]
    text += "  # why\nnext line"

    def outcome(reader: object) -> object:
        try:
            return reader(text, 2)  # type: ignore[operator]
        except Exception as error:
            return type(error), str(error)

    assert outcome(call_lines._arguments) == outcome(call_lines._any_arguments)
