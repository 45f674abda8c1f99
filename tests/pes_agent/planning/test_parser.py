"""OutputParser: what it reads from planning and synthesis output, and what it tolerates."""

from __future__ import annotations

import json
import re
import string
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pes_agent.planning.parser import OutputParser
from pes_agent.planning.plan import ParsedToolCall, PlanningOutput

PARSER = OutputParser()


def parse(text: str) -> PlanningOutput:
    return PARSER.parse_planning_output(text)


def calls(output: PlanningOutput) -> list[tuple[str, str, dict[str, Any], list[str]]]:
    assert output.tool_calls is not None
    return [(c.call_id, c.tool_name, c.arguments, c.depends_on) for c in output.tool_calls]


PLAN_OBJECT = {
    "title": "Weather and maths",
    "intent": "Get the weather in Paris and compute 12*7.",
    "plan": "1. Look up the weather.\n2. Multiply.",
    "toolCalls": [
        {"callId": "call_1", "toolName": "get_weather", "arguments": {"city": "Paris"}},
        {
            "callId": "call_2",
            "toolName": "calculator",
            "arguments": {"expression": "12*7", "note": "{step_1_result}"},
            "dependsOn": ["call_1"],
        },
    ],
}
PLAN_CALLS = [
    ("call_1", "get_weather", {"city": "Paris"}, []),
    ("call_2", "calculator", {"expression": "12*7", "note": "{step_1_result}"}, ["call_1"]),
]


# ------------------------------------------------------------------------------------------
# The JSON object format
# ------------------------------------------------------------------------------------------


def test_json_object_gives_title_intent_plan_and_tool_calls() -> None:
    """A bare JSON plan object fills every field and reports no errors."""
    output = parse(json.dumps(PLAN_OBJECT))
    assert output.title == "Weather and maths"
    assert output.intent == "Get the weather in Paris and compute 12*7."
    assert output.plan == "1. Look up the weather.\n2. Multiply."
    assert calls(output) == PLAN_CALLS
    assert output.thoughts is None
    assert output.errors == []


@pytest.mark.parametrize("fence", ["```json", "```", "```JSON"])
def test_json_object_in_a_code_fence_is_read(fence: str) -> None:
    """A fenced JSON plan object reads the same as a bare one."""
    output = parse(f"{fence}\n{json.dumps(PLAN_OBJECT, indent=2)}\n```")
    assert output.intent == PLAN_OBJECT["intent"]
    assert calls(output) == PLAN_CALLS


def test_json_object_with_prose_around_it_is_read() -> None:
    """Prose before and after the JSON plan object is ignored."""
    text = f"Sure! Here is my plan (as asked):\n{json.dumps(PLAN_OBJECT)}\nLet me know [if] needed."
    output = parse(text)
    assert output.title == PLAN_OBJECT["title"]
    assert calls(output) == PLAN_CALLS
    assert output.errors == []


def test_trailing_commas_outside_strings_are_tolerated() -> None:
    """Commas before a closing bracket are ignored, while commas inside strings are kept."""
    text = """{
      "intent": "List, then count",
      "plan": "a,]",
      "toolCalls": [
        {"callId": "c1", "toolName": "count", "arguments": {"items": [1, 2,], "sep": ",}",},},
      ],
    }"""
    output = parse(text)
    assert output.intent == "List, then count"
    assert output.plan == "a,]"
    assert calls(output) == [("c1", "count", {"items": [1, 2], "sep": ",}"}, [])]
    assert output.errors == []


def test_plan_given_as_a_list_of_steps_becomes_numbered_lines() -> None:
    """A list plan is joined into numbered lines, without doubling numbers already there."""
    output = parse(json.dumps({"intent": "x", "plan": ["Search", "2. Summarise", "Answer"]}))
    assert output.plan == "1. Search\n2. Summarise\n3. Answer"


def test_plan_steps_given_as_objects_use_their_description() -> None:
    """Steps written as objects are rendered from their description text."""
    steps = [{"step": 1, "description": "Search"}, {"step": 2, "description": "Answer"}]
    output = parse(json.dumps({"intent": "x", "plan": steps}))
    assert output.plan == "1. Search\n2. Answer"


def test_missing_fields_of_a_json_object_are_none() -> None:
    """Keys the model left out are None, including toolCalls."""
    output = parse('{"intent": "Just chat"}')
    assert output.intent == "Just chat"
    assert output.title is None
    assert output.plan is None
    assert output.tool_calls is None
    assert output.errors == []


def test_snake_case_keys_are_read_like_camel_case() -> None:
    """`tool_calls`, `tool_name`, `call_id` and `depends_on` are synonyms of the camelCase keys."""
    text = json.dumps(
        {
            "intent": "x",
            "tool_calls": [
                {"call_id": "a", "tool_name": "t", "arguments": {}},
                {"call_id": "b", "tool_name": "t", "depends_on": "a"},
            ],
        }
    )
    assert calls(parse(text)) == [("a", "t", {}, []), ("b", "t", {}, ["a"])]


def test_null_tool_calls_mean_no_tool_calls() -> None:
    """`"toolCalls": null` is an empty list, not an error."""
    output = parse('{"intent": "x", "plan": "answer directly", "toolCalls": null}')
    assert output.tool_calls == []
    assert output.errors == []


def test_a_single_tool_call_object_in_a_json_plan_is_a_one_element_list() -> None:
    """A JSON plan whose toolCalls is one object instead of a list still yields that call."""
    text = json.dumps({"intent": "x", "toolCalls": {"toolName": "search", "arguments": {}}})
    assert calls(parse(text)) == [("call_1", "search", {}, [])]


def test_tool_calls_given_as_a_json_string_are_decoded() -> None:
    """A toolCalls field holding JSON text is decoded like a section."""
    inner = json.dumps([{"toolName": "search", "arguments": {"q": "x"}}])
    assert calls(parse(json.dumps({"intent": "x", "toolCalls": inner}))) == [
        ("call_1", "search", {"q": "x"}, [])
    ]


def test_thoughts_key_of_a_json_plan_is_kept() -> None:
    """A `thoughts` string in the JSON plan object becomes one thought."""
    output = parse(json.dumps({"intent": "x", "thoughts": "The user wants x."}))
    assert output.thoughts == ["The user wants x."]


def test_json_object_before_labels_wins_and_objects_inside_sections_do_not() -> None:
    """An object with plan keys inside a Tool Calls section is an argument, not the plan."""
    text = (
        "Intent: Classify\nPlan: Call classify.\n"
        'Tool Calls: [{"toolName": "classify", "arguments": {"intent": "buy", "plan": "b"}}]'
    )
    output = parse(text)
    assert output.intent == "Classify"
    assert calls(output) == [("call_1", "classify", {"intent": "buy", "plan": "b"}, [])]


# ------------------------------------------------------------------------------------------
# The section format
# ------------------------------------------------------------------------------------------


def test_section_format_reads_every_section() -> None:
    """Title, Intent, Plan and Tool Calls sections are each read up to the next label."""
    text = (
        "Title: Paris weather\n"
        "Intent: Get the weather.\n"
        "Plan:\n1. Call get_weather.\n2. Report it.\n"
        'Tool Calls: [{"callId": "w", "toolName": "get_weather", "arguments": {"city": "Paris"}}]'
    )
    output = parse(text)
    assert output.title == "Paris weather"
    assert output.intent == "Get the weather."
    assert output.plan == "1. Call get_weather.\n2. Report it."
    assert calls(output) == [("w", "get_weather", {"city": "Paris"}, [])]
    assert output.errors == []


def test_labels_in_any_case_and_any_order_are_read() -> None:
    """Labels are matched in any case, and sections may come in any order."""
    text = "TOOL CALLS: []\nplan: Reply.\nInTeNt: Greet the user.\ntitle: Hi"
    output = parse(text)
    assert output.intent == "Greet the user."
    assert output.plan == "Reply."
    assert output.title == "Hi"
    assert output.tool_calls == []


@pytest.mark.parametrize(
    "label", ["**Intent:**", "**Intent**:", "## Intent:", "Intent :", "  intent:"]
)
def test_markdown_decorated_labels_are_read(label: str) -> None:
    """Bold, heading and indented labels are labels too."""
    output = parse(f"{label} Greet.\n**Plan:** Reply.")
    assert output.intent == "Greet."
    assert output.plan == "Reply."


@pytest.mark.parametrize("label", ["Tool Calls:", "tool_calls:", "ToolCalls:", "Tool Call:"])
def test_tool_calls_label_variants_are_read(label: str) -> None:
    """Spelling variants of the Tool Calls label start the tool-call section."""
    output = parse(f'Intent: x\n{label} [{{"toolName": "t"}}]')
    assert calls(output) == [("call_1", "t", {}, [])]


def test_a_label_word_inside_a_line_does_not_start_a_section() -> None:
    """Only a label at the start of a line starts a section, so `plan:` mid-sentence stays text."""
    output = parse("Intent: Make a plan: then act. Tool calls: none yet\nPlan: Act.")
    assert output.intent == "Make a plan: then act. Tool calls: none yet"
    assert output.plan == "Act."
    assert output.tool_calls is None


def test_missing_sections_are_none() -> None:
    """A section the model did not write is None, and that is not an error."""
    output = parse("Intent: Just answer.")
    assert output.intent == "Just answer."
    assert output.plan is None
    assert output.title is None
    assert output.tool_calls is None
    assert output.errors == []


def test_a_repeated_tool_calls_section_is_reported() -> None:
    """Two Tool Calls sections give the first one's calls and an error asking for one section."""
    output = parse('Intent: x\nTool Calls: [{"name": "a"}]\nPlan: y\nTool Calls: [{"name": "b"}]')
    assert calls(output) == [("call_1", "a", {}, [])]
    assert output.errors == [
        "Found 2 Tool Calls sections; only the first was read. "
        "Write exactly one Tool Calls section."
    ]


def test_repeated_intent_or_plan_sections_are_joined() -> None:
    """A repeated Intent or Plan section is appended to the first, so no text is lost."""
    output = parse("Plan: Search.\nIntent: x\nPlan: Then answer.")
    assert output.plan == "Search.\nThen answer."


@pytest.mark.parametrize("text", ["", "none", "None.", "N/A", "No tool calls needed."])
def test_a_tool_calls_section_saying_none_is_an_empty_list(text: str) -> None:
    """An empty or 'none' Tool Calls section means no calls, without an error."""
    output = parse(f"Intent: x\nPlan: y\nTool Calls: {text}")
    assert output.tool_calls == []
    assert output.errors == []


def test_tool_calls_after_introductory_prose_and_fences_are_read() -> None:
    """Prose and a code fence around the tool-call array do not hide it."""
    text = (
        "Intent: x\nTool Calls: Here they are (see [docs]):\n```json\n"
        '[{"callId": "a", "toolName": "t", "arguments": {"n": [1, [2, 3]]}}]\n```\nThanks.'
    )
    assert calls(parse(text)) == [("a", "t", {"n": [1, [2, 3]]}, [])]


def test_unstructured_text_gives_no_fields_and_no_errors() -> None:
    """Plain prose has no sections, so every field is None and nothing is reported."""
    output = parse("Paris is the capital of France.")
    assert output == PlanningOutput()


# ------------------------------------------------------------------------------------------
# Tool-call shapes
# ------------------------------------------------------------------------------------------


def test_openai_shaped_tool_calls_are_read() -> None:
    """`{"id", "type": "function", "function": {"name", "arguments": "<json>"}}` is one call."""
    openai_call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "search", "arguments": json.dumps({"query": "x", "k": [1, 2]})},
    }
    output = parse(json.dumps({"intent": "x", "toolCalls": [openai_call]}))
    assert calls(output) == [("call_abc", "search", {"query": "x", "k": [1, 2]}, [])]


@pytest.mark.parametrize("key", ["arguments", "parameters", "args", "input"])
def test_argument_key_synonyms_are_read(key: str) -> None:
    """`parameters`, `args` and `input` mean the same as `arguments`."""
    text = f'Tool Calls: [{{"callId": "a", "toolName": "t", "{key}": {{"q": 1}}}}]'
    assert calls(parse(text)) == [("a", "t", {"q": 1}, [])]


@pytest.mark.parametrize("key", ["toolName", "tool_name", "name", "tool"])
def test_tool_name_key_synonyms_are_read(key: str) -> None:
    """`tool_name`, `name` and `tool` mean the same as `toolName`."""
    assert calls(parse(f'Tool Calls: [{{"{key}": "search"}}]')) == [("call_1", "search", {}, [])]


@pytest.mark.parametrize("key", ["callId", "call_id", "id"])
def test_call_id_key_synonyms_are_read(key: str) -> None:
    """`call_id` and `id` mean the same as `callId`."""
    assert calls(parse(f'Tool Calls: [{{"{key}": "x1", "name": "t"}}]')) == [("x1", "t", {}, [])]


def test_missing_call_ids_are_generated_by_position() -> None:
    """A call without an id gets `call_N`, N being its 1-based position in the list."""
    text = 'Tool Calls: [{"name": "a"}, {"callId": "mine", "name": "b"}, {"name": "c"}]'
    assert [call[0] for call in calls(parse(text))] == ["call_1", "mine", "call_3"]


def test_arguments_given_as_a_json_string_are_decoded() -> None:
    """An arguments value holding JSON text is decoded into an object."""
    text = json.dumps({"toolCalls": [{"name": "t", "arguments": '{"a": {"b": [1, 2]}}'}]})
    assert calls(parse(text)) == [("call_1", "t", {"a": {"b": [1, 2]}}, [])]


def test_nested_arrays_in_arguments_without_fences_are_kept_whole() -> None:
    """Brackets are matched, so nested arrays and trailing bracketed prose do not cut the JSON."""
    text = (
        'Intent: Sum\nTool Calls: [{"callId": "s", "toolName": "sum", '
        '"arguments": {"rows": [[1, 2], [3, [4, 5]]], "opts": {"a": [{"b": []}]}}}] '
        "and [this] is a note."
    )
    args = {"rows": [[1, 2], [3, [4, 5]]], "opts": {"a": [{"b": []}]}}
    assert calls(parse(text)) == [("s", "sum", args, [])]


def test_brackets_quotes_and_escapes_inside_strings_do_not_confuse_matching() -> None:
    """Brackets, escaped quotes and backslashes inside JSON strings are just text."""
    args = {"s": 'a]b}c"d\\', "t": "[{", "u": '\\\\"]'}
    text = f"Intent: x\nTool Calls: [{json.dumps({'name': 't', 'arguments': args})}]"
    assert calls(parse(text)) == [("call_1", "t", args, [])]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('"call_1"', ["call_1"]),
        ('["call_1", "call_2"]', ["call_1", "call_2"]),
        ('"call_1, call_2"', ["call_1", "call_2"]),
        ("[]", []),
        ("null", []),
    ],
)
def test_depends_on_accepts_a_string_or_a_list(value: str, expected: list[str]) -> None:
    """`dependsOn`/`depends_on` may be one id, a comma-separated string or a list of ids."""
    for key in ("dependsOn", "depends_on"):
        text = f'Tool Calls: [{{"name": "t", "callId": "x", "{key}": {value}}}]'
        assert calls(parse(text)) == [("x", "t", {}, expected)]


def test_parsed_calls_are_public_models() -> None:
    """Tool calls come back as ParsedToolCall models."""
    output = parse('Tool Calls: [{"name": "t"}]')
    assert output.tool_calls == [ParsedToolCall(call_id="call_1", tool_name="t")]


# ------------------------------------------------------------------------------------------
# Unusable output: [] plus errors that say what is wrong
# ------------------------------------------------------------------------------------------


def test_invalid_tool_calls_json_reports_the_decoder_message_and_place() -> None:
    """Broken JSON gives [] and an error naming the JSON problem, its line and column."""
    text = 'Intent: x\nTool Calls: [\n  {"name": "a"}\n  {"name": "b"}\n]'
    output = parse(text)
    assert output.tool_calls == []
    assert len(output.errors) == 1
    error = output.errors[0]
    assert error.startswith("Tool Calls section is not valid JSON: Expecting ',' delimiter")
    assert "line 3 column 3" in error
    assert "⟨here⟩" in error


def test_tool_calls_section_without_json_reports_what_it_found() -> None:
    """A section with no JSON at all quotes the text it got."""
    output = parse("Intent: x\nTool Calls: search(query='x')")
    assert output.tool_calls == []
    assert output.errors == ["Tool Calls section contains no JSON array: \"search(query='x')\"."]


def test_a_single_object_in_a_tool_calls_section_is_reported_as_art_does() -> None:
    """ART's section format requires an array, so one object is [] plus an error that says so."""
    output = parse('Intent: x\nTool Calls: {"callId": "c1", "toolName": "t"}')
    assert output.tool_calls == []
    assert output.errors == [
        "Tool Calls section must be a JSON array of tool calls, got a single object: "
        '{"callId": "c1", "toolName": "t"}. Wrap the calls in [ ].'
    ]


def test_tool_calls_that_are_not_a_list_are_reported() -> None:
    """A toolCalls value of the wrong type is [] plus an error naming the type."""
    output = parse('{"intent": "x", "toolCalls": 42}')
    assert output.tool_calls == []
    assert output.errors == [
        'The "toolCalls" field must be a JSON array of tool calls, got a number: 42.'
    ]


def test_invalid_entries_are_reported_and_valid_ones_kept() -> None:
    """Each invalid entry gets its own error, and the valid entries are still returned."""
    entries = [
        {"callId": "ok1", "toolName": "a"},
        {"wrongField": "wrongValue"},
        "search",
        {"callId": "bad_args", "toolName": "b", "arguments": 42},
        {"callId": "bad_json", "toolName": "c", "arguments": "{not json"},
        {"callId": "ok1", "toolName": "d"},
        {"callId": "ok2", "toolName": "e", "dependsOn": {"x": 1}},
        {"callId": "ok3", "toolName": "f"},
    ]
    output = parse(json.dumps({"intent": "x", "toolCalls": entries}))
    assert [call[0] for call in calls(output)] == ["ok1", "ok3"]
    assert output.errors[0] == (
        'Tool call 2 has no tool name (expected "toolName", or "instruction" for a language '
        'step): {"wrongField": "wrongValue"}.'
    )
    assert output.errors[1] == 'Tool call 3 must be a JSON object, got a string: "search".'
    assert output.errors[2].startswith(
        'Tool call 4 ("b") has arguments that are not a JSON object of named parameters '
        "(got a number: 42)"
    )
    assert output.errors[3].startswith(
        'Tool call 5 ("c") has an arguments string that is not valid JSON: '
    )
    assert output.errors[4] == (
        'Tool call 6 ("d") repeats callId "ok1"; give every call a unique callId.'
    )
    assert output.errors[5] == (
        'Tool call 7 ("e") has dependsOn that is not a list of callIds: {"x": 1}.'
    )
    assert len(output.errors) == 6


def test_a_broken_json_plan_object_is_reported() -> None:
    """A JSON plan object that does not parse gives an error quoting the decoder's message."""
    output = parse('```json\n{"intent": "x" "plan": "y", "toolCalls": []}\n```')
    assert output.intent is None
    assert output.tool_calls is None
    assert len(output.errors) == 1
    assert output.errors[0].startswith(
        "The JSON plan object is not valid JSON: Expecting ',' delimiter at line 1 column 16"
    )


def test_a_truncated_json_plan_object_is_reported() -> None:
    """A plan object cut off before its end is reported as unfinished JSON."""
    output = parse('{"intent": "x", "plan": "y", "toolCalls": [{"name": "a", "argum')
    assert len(output.errors) == 1
    assert output.errors[0].startswith("The JSON plan object is not valid JSON: ")


def test_deeply_nested_tool_calls_are_an_error_not_a_crash() -> None:
    """JSON nested beyond what the decoder can read is reported, not raised."""
    output = parse("Tool Calls: " + "[" * 5000 + "]" * 5000)
    assert output.tool_calls == []
    assert output.errors == ["Tool Calls section is not valid JSON: it is nested too deeply."]


# ------------------------------------------------------------------------------------------
# Thinking blocks
# ------------------------------------------------------------------------------------------


def test_think_blocks_become_one_thought_each_and_leave_the_text() -> None:
    """Every <think> block is one thought, and the plan around them is read as usual."""
    text = (
        "<think>\nThe user wants weather.\n</think>\n"
        f"{json.dumps(PLAN_OBJECT)}\n"
        "<think>Double-check the city.</think>"
    )
    output = parse(text)
    assert output.thoughts == ["The user wants weather.", "Double-check the city."]
    assert calls(output) == PLAN_CALLS
    assert output.errors == []


def test_a_plan_without_a_tag_has_no_thoughts_and_marks_both_fields_set() -> None:
    """An answer with no `<` at all has no thoughts; like every parse, its output marks
    `thoughts` and `errors` as set fields, as a model built with them would."""
    for text in ('1. get_weather(city="Paris")\nIntent: weather', json.dumps(PLAN_OBJECT)):
        output = parse(text)
        assert output.thoughts is None
        assert output.errors == []
        assert {"thoughts", "errors"} <= output.model_fields_set
    problem = parse("1. get_weather(city=)\nIntent: weather")
    assert problem.errors
    assert {"thoughts", "errors"} <= problem.model_fields_set


def test_a_less_than_sign_that_is_not_a_tag_keeps_the_text() -> None:
    """A `<` in a call's argument is text, not the start of a thought."""
    output = parse('1. compare(expression="a < b")\nIntent: x')
    assert output.thoughts is None
    assert calls(output) == [("call_1", "compare", {"expression": "a < b"}, [])]


def test_thinking_tags_in_any_case_are_thoughts_too() -> None:
    """`<thinking>` and `<THINK>` blocks are thoughts like `<think>`."""
    output = parse("<Thinking>first</Thinking>Intent: x<THINK>second</THINK>\nPlan: y")
    assert output.thoughts == ["first", "second"]
    assert output.intent == "x"
    assert output.plan == "y"


def test_json_thoughts_follow_think_block_thoughts() -> None:
    """Thoughts from <think> blocks come first, then the plan object's own thoughts."""
    output = parse('<think>a</think>{"intent": "x", "thoughts": ["b", "c"]}')
    assert output.thoughts == ["a", "b", "c"]


def test_empty_think_blocks_are_not_thoughts() -> None:
    """An empty think block (models with thinking switched off emit one) is dropped."""
    output = parse("<think>\n\n</think>\nIntent: x")
    assert output.thoughts is None
    assert output.intent == "x"


def test_an_unclosed_think_block_ends_where_the_plan_begins() -> None:
    """A <think> never closed runs until a section label or a JSON line, not over the plan."""
    output = parse("<think>\nI should search.\nIntent: Search\nPlan: Search once.")
    assert output.thoughts == ["I should search."]
    assert output.intent == "Search"
    assert output.plan == "Search once."

    output = parse(f"<think>I should search.\n{json.dumps(PLAN_OBJECT)}")
    assert output.thoughts == ["I should search."]
    assert calls(output) == PLAN_CALLS


def test_an_unclosed_think_block_with_no_plan_after_it_is_all_thought() -> None:
    """A response cut off while thinking has thoughts and nothing else."""
    output = parse("<think>Let me consider the options")
    assert output.thoughts == ["Let me consider the options"]
    assert output.intent is None
    assert output.tool_calls is None


def test_a_leading_closing_tag_ends_a_thought_opened_by_the_prompt() -> None:
    """Text before a `</think>` with no opener is a thought (the template opened the block)."""
    output = parse("The user wants x.\n</think>\nIntent: x\nPlan: y")
    assert output.thoughts == ["The user wants x."]
    assert output.intent == "x"


def test_a_stray_closing_tag_after_the_plan_does_not_swallow_it() -> None:
    """A `</think>` with labels before it drops only the tag, never the sections."""
    output = parse("Intent: x\nPlan: y </think>")
    assert output.thoughts is None
    assert output.intent == "x"
    assert output.plan == "y"


# ------------------------------------------------------------------------------------------
# A `<` that is not a think tag never loses text
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "plan",
    [
        "if a < b then swap",
        "Show <b>bold</b> and <i>it</i>",
        "Use <step_1_result> in step 2",
        "<thinker> is a word, <thin> too, and <<x>> stays",
        "a <!-- comment --> b <br/> c",
    ],
)
def test_less_than_in_the_plan_never_loses_text(plan: str) -> None:
    """Tags and `<` characters other than think blocks are kept verbatim, in both formats."""
    assert parse(f"Intent: {plan}\nPlan: {plan}\nTool Calls: []").plan == plan
    assert parse(f"Intent: {plan}\nPlan: {plan}").intent == plan
    assert parse(json.dumps({"intent": plan, "plan": plan})).plan == plan


# ------------------------------------------------------------------------------------------
# Synthesis
# ------------------------------------------------------------------------------------------


def test_synthesis_strips_think_blocks_and_surrounding_whitespace() -> None:
    """The answer is the text outside think blocks, trimmed."""
    text = "<think>plan the answer</think>\n\n  It is 18°C in Paris.\n"
    assert PARSER.parse_synthesis_output(text) == "It is 18°C in Paris."


def test_synthesis_keeps_a_fenced_answer_as_written() -> None:
    """A code-fenced answer is the answer; the fence is not removed."""
    text = "```python\nprint('hi')\n```"
    assert PARSER.parse_synthesis_output(f"  {text}\n") == text


def test_synthesis_keeps_less_than_and_other_tags() -> None:
    """`<` and tags in the answer are kept."""
    text = "Since 3 < 4, use <code>min</code>."
    assert PARSER.parse_synthesis_output(text) == text


def test_synthesis_with_only_an_unclosed_think_block_is_empty() -> None:
    """An answer cut off while thinking has no answer text (the vLLM/DeepSeek convention)."""
    assert PARSER.parse_synthesis_output("<think>still thinking") == ""


def test_synthesis_after_a_leading_closing_tag_is_the_text_after_it() -> None:
    """Text before a `</think>` with no opener is thinking, not answer."""
    assert PARSER.parse_synthesis_output("reasoning\n</think>\nThe answer.") == "The answer."


# ------------------------------------------------------------------------------------------
# Robustness: never raises, linear time
# ------------------------------------------------------------------------------------------

INTERNAL_FAILURE = "The parser failed unexpectedly"

N = 200_000
PATHOLOGICAL = {
    "open brackets": "[" * N,
    "open braces": "{" * N,
    "quotes": '"' * N,
    "bracket then quotes": "[" + '"' * N,
    "mismatched pairs": "Tool Calls: " + "[}" * (N // 2),
    "unclosed objects": "Tool Calls: " + "[{" * (N // 2),
    "commas": "Tool Calls: [" + " ," * N + "]",
    "unterminated string": '{"intent": "' + "a" * N,
    "balanced pairs": "[]" * N,
    "deep nesting": "[" * (N // 2) + "]" * (N // 2),
    "backslashes": '["' + "\\" * N + '"]',
    "think tags": "<think>" * (N // 7),
    "closing think tags": "</think>" * (N // 8),
    "labels": "Intent:\n" * (N // 8),
    "whitespace": " \t" * N + "x",
    "hashes": "#" * N + "Plan",
    "mixed": 'Plan: a < b [x {y "z\\" } ] <think> </think> ```json\n' * (N // 50),
    "huge number": 'Tool Calls: [{"name": "x", "arguments": {"a": ' + "1" * 5000 + "}}]",
}


@pytest.mark.parametrize("text", list(PATHOLOGICAL.values()), ids=list(PATHOLOGICAL))
def test_pathological_input_is_handled_quickly(text: str) -> None:
    """Long adversarial inputs parse in roughly linear time and never raise."""
    started = time.perf_counter()
    output = parse(text)
    PARSER.parse_synthesis_output(text)
    assert time.perf_counter() - started < 10.0  # linear is well under 1 s; quadratic is minutes
    assert not any(error.startswith(INTERNAL_FAILURE) for error in output.errors)


def check_invariants(output: PlanningOutput) -> None:
    assert not any(error.startswith(INTERNAL_FAILURE) for error in output.errors), output.errors
    if output.tool_calls is not None:
        ids = [call.call_id for call in output.tool_calls]
        assert len(ids) == len(set(ids))
        assert all(call.tool_name.strip() for call in output.tool_calls)


FRAGMENTS = [
    "Intent:",
    "Plan:",
    "Tool Calls:",
    "Title:",
    "**Plan:**",
    "\n",
    " ",
    "```json",
    "```",
    "[",
    "]",
    "{",
    "}",
    '"',
    "\\",
    ",",
    ":",
    "<",
    ">",
    "<think>",
    "</think>",
    "<thinking>",
    '"callId"',
    '"toolName"',
    '"toolCalls"',
    '"intent"',
    '"arguments"',
    '"function"',
    '"dependsOn"',
    "null",
    "1",
    '"x"',
    "{step_1_result}",
]
structured_text = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4)), max_size=60
).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_parses_without_raising(text: str) -> None:
    """Arbitrary text gives a PlanningOutput and an answer string, never an exception."""
    check_invariants(parse(text))
    assert isinstance(PARSER.parse_synthesis_output(text), str)


@settings(max_examples=300, deadline=None)
@given(structured_text)
def test_plan_like_fragments_parse_without_raising(text: str) -> None:
    """Random mixes of labels, brackets, quotes, fences and think tags never raise."""
    check_invariants(parse(text))
    assert isinstance(PARSER.parse_synthesis_output(text), str)


json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**12), max_value=10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)
identifiers = st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=1, max_size=10)
tool_call_lists = st.lists(
    st.fixed_dictionaries(
        {
            "callId": identifiers,
            "toolName": identifiers,
            "arguments": st.dictionaries(st.text(max_size=8), json_values, max_size=4),
            "dependsOn": st.lists(identifiers, max_size=3),
        }
    ),
    max_size=4,
    unique_by=lambda call: str(call["callId"]),
)
# Prose with `<`, quotes and punctuation, but no brackets or colons (so no JSON and no labels).
prose = st.text(alphabet=string.ascii_letters + string.digits + " \n\t.,!?'\"<>/=&;-", max_size=80)


def has_think_tag(text: str) -> bool:
    return re.search(r"<\s*/?\s*think", text, re.IGNORECASE) is not None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tool_calls=tool_call_lists,
    intent=st.text(max_size=40),
    before=prose,
    after=prose,
    style=st.sampled_from(["json", "json-indented", "fenced", "sections"]),
)
def test_a_valid_plan_round_trips_through_prose_and_less_than_signs(
    tool_calls: list[dict[str, Any]], intent: str, before: str, after: str, style: str
) -> None:
    """A valid plan with prose and `<` around it gives back exactly the tool calls written."""
    if style == "sections":
        body = f"Intent: plan\nPlan: do it\nTool Calls: {json.dumps(tool_calls)}"
    else:
        plan = {"intent": intent, "plan": "p", "toolCalls": tool_calls}
        body = json.dumps(plan, indent=2 if style == "json-indented" else None)
        if style == "fenced":
            body = f"```json\n{body}\n```"
    text = f"{before}\n{body}\n{after}"
    assume(not has_think_tag(text))

    output = parse(text)

    expected = [
        (call["callId"], call["toolName"], call["arguments"], call["dependsOn"])
        for call in tool_calls
    ]
    assert calls(output) == expected
    assert output.errors == []
    if style != "sections":
        assert output.intent == intent.strip()


less_than_text = st.lists(
    st.one_of(
        st.sampled_from(
            ["<", "<<", "a < b", "<b>bold</b>", "<br/>", "<step_1_result>", "<thinker>", "</x>"]
        ),
        st.text(max_size=6),
    ),
    min_size=1,
    max_size=12,
).map("".join)
LABEL_LINE = re.compile(r"^\W*(title|intent|plan|tool\W*calls?)\W*:", re.IGNORECASE | re.MULTILINE)


@settings(max_examples=300, deadline=None)
@given(intent=less_than_text, plan=less_than_text, as_json=st.booleans())
def test_text_with_less_than_signs_keeps_all_non_think_text(
    intent: str, plan: str, as_json: bool
) -> None:
    """Intent and plan text containing `<` come back whole (apart from surrounding whitespace)."""
    assume(not has_think_tag(intent + plan))
    if as_json:
        text = json.dumps({"intent": intent, "plan": plan, "toolCalls": []})
    else:
        assume(not LABEL_LINE.search(intent) and not LABEL_LINE.search(plan))
        text = f"Intent: {intent}\nPlan: {plan}\nTool Calls: []"

    output = parse(text)

    assert output.intent == intent.strip()
    assert output.plan == plan.strip()
