"""The plan's JSON Schema, the `submit_plan` tool, and how providers and refusals are told apart."""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest

from pes_agent import ParsedToolCall, ProviderConfig
from pes_agent.errors import ProviderError
from pes_agent.planning.parser import OutputParser
from pes_agent.planning.structured import (
    PLAN_SCHEMA,
    STRICT_PLAN_SCHEMA,
    SUBMIT_PLAN,
    StructuredRefusals,
    plan_schema,
    refused_structured_output,
    structured_output_of,
    submit_plan_tool,
    thinking_enabled,
)
from pes_agent.providers.anthropic import AnthropicProvider
from pes_agent.providers.ollama import OllamaProvider
from pes_agent.providers.openai import OpenAIProvider, openai_response_format
from pes_agent.testing import ScriptedProvider

KEY = "sk-test-0000000000000000"


def _call_items(schema: dict[str, Any]) -> dict[str, Any]:
    items: dict[str, Any] = schema["properties"]["calls"]["items"]
    return items


def test_strict_schema_is_sent_strict_by_the_openai_adapter() -> None:
    """The strict plan schema meets OpenAI's strict rules, so it goes out with strict=True."""
    wire = openai_response_format(plan_schema(["get_weather"], strict=True))
    assert wire["type"] == "json_schema"
    assert wire["json_schema"]["name"] == "plan"
    assert wire["json_schema"]["strict"] is True


def test_free_form_arguments_would_not_be_strict() -> None:
    """The submit_plan schema (free-form arguments) is not strict-compatible: hence the string."""
    assert openai_response_format(PLAN_SCHEMA)["json_schema"]["strict"] is False


def test_strict_schema_encodes_arguments_as_a_string_and_requires_every_field() -> None:
    """In strict form every call field is required and the arguments are a JSON string."""
    items = _call_items(STRICT_PLAN_SCHEMA)
    assert items["properties"]["args"] == {
        "type": "string",
        "description": items["properties"]["args"]["description"],
    }
    assert set(items["required"]) == set(items["properties"]) == {"tool", "args", "after"}
    assert items["additionalProperties"] is False
    assert items["properties"]["after"]["items"] == {"type": "integer"}


def test_the_calls_come_before_the_intent_and_nothing_repeats_them() -> None:
    """The schema asks for the calls first (they start while the rest streams), then the
    intent; no title, plan prose or call ids that would repeat what the calls say."""
    for schema in (STRICT_PLAN_SCHEMA, PLAN_SCHEMA):
        assert list(schema["properties"]) == ["calls", "intent"]
        assert schema["required"] == ["calls", "intent"]


def test_tool_names_become_an_enum_in_both_forms() -> None:
    """Only the offered tools (and language steps) can be named, strict or free-form."""
    strict = _call_items(plan_schema(["a", "b"], strict=True))["properties"]["tool"]
    assert strict["enum"] == ["a", "b", "language_step"]
    loose = _call_items(plan_schema(["a", "b"]))["properties"]["tool"]
    assert loose["enum"] == ["a", "b", "language_step"]
    assert "enum" not in _call_items(PLAN_SCHEMA)["properties"]["tool"]


def test_free_form_schema_takes_arguments_as_an_object_and_a_reason() -> None:
    """The submit_plan input takes arguments as an object, an optional why and after."""
    items = _call_items(PLAN_SCHEMA)
    assert items["properties"]["args"]["type"] == "object"
    assert items["required"] == ["tool"]
    assert {"why", "after"} <= set(items["properties"])


def test_plan_schema_returns_a_fresh_copy() -> None:
    """Changing a returned schema never changes the next one (the schemas are cached)."""
    first = plan_schema(["x"], strict=True)
    first["properties"]["calls"]["items"]["properties"].clear()
    assert _call_items(plan_schema(["x"], strict=True))["properties"]


def test_submit_plan_tool_carries_the_plan_schema() -> None:
    """submit_plan's input schema is the free-form plan schema for the offered tools."""
    schema = submit_plan_tool(["get_weather"])
    assert schema.name == SUBMIT_PLAN
    assert schema.input_schema == plan_schema(["get_weather"])


def test_a_strict_reply_parses_like_the_text_protocol() -> None:
    """Arguments as a JSON string and null fields give the same calls as the text protocol."""
    reply = {
        "title": "Weather",
        "intent": "weather in Paris",
        "plan": "1. look it up\n2. sum up",
        "toolCalls": [
            {
                "callId": "call_1",
                "toolName": "get_weather",
                "instruction": None,
                "arguments": '{"city": "Paris"}',
                "dependsOn": [],
            },
            {
                "callId": "call_2",
                "toolName": None,
                "instruction": "Say {step_1_result} in French.",
                "arguments": "{}",
                "dependsOn": ["call_1"],
            },
        ],
    }
    output = OutputParser().parse_planning_output(json.dumps(reply))
    assert output.errors == []
    assert output.tool_calls == [
        ParsedToolCall(call_id="call_1", tool_name="get_weather", arguments={"city": "Paris"}),
        ParsedToolCall(
            call_id="call_2", instruction="Say {step_1_result} in French.", depends_on=["call_1"]
        ),
    ]


def test_a_compact_structured_reply_parses_like_the_text_protocol() -> None:
    """The schema's own form — args as a JSON string, after as steps, a language step as a
    tool — gives the same calls as the compact text protocol."""
    reply = {
        "calls": [
            {"tool": "get_weather", "args": '{"city": "Paris"}', "after": []},
            {
                "tool": "language_step",
                "args": '{"instruction": "Say {step_1_result} in French."}',
                "after": [1],
            },
        ],
        "intent": "weather in Paris, in French",
    }
    text = (
        '1. get_weather(city="Paris")\n'
        '2. after 1: language_step("Say {step_1_result} in French.")\n'
        "Intent: weather in Paris, in French"
    )
    parser = OutputParser()
    structured = parser.parse_planning_output(json.dumps(reply))
    lines = parser.parse_planning_output(text)
    assert structured.errors == lines.errors == []
    assert (
        structured.tool_calls
        == lines.tool_calls
        == [
            ParsedToolCall(call_id="call_1", tool_name="get_weather", arguments={"city": "Paris"}),
            ParsedToolCall(
                call_id="call_2",
                instruction="Say {step_1_result} in French.",
                depends_on=["call_1"],
            ),
        ]
    )
    assert structured.intent == lines.intent == "weather in Paris, in French"


async def test_providers_declare_their_structured_output() -> None:
    """OpenAI and Ollama take a response_format, Anthropic a forced tool, others nothing."""
    openai = OpenAIProvider(ProviderConfig("openai", "m", api_key=KEY))
    ollama = OllamaProvider(ProviderConfig("ollama", "m"))
    anthropic = AnthropicProvider(ProviderConfig("anthropic", "m", api_key=KEY))
    try:
        assert structured_output_of(openai) == "response_format"
        assert structured_output_of(ollama) == "response_format"
        assert structured_output_of(anthropic) == "forced_tool"
        assert structured_output_of(ScriptedProvider([])) is None
        assert structured_output_of(object()) is None
    finally:
        for provider in (openai, ollama, anthropic):
            await provider.aclose()


async def test_thinking_is_read_from_the_config_options_and_the_call_parameters() -> None:
    """Extended thinking is on when a thinking option other than disabled is set anywhere."""
    thinking = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    on = AnthropicProvider(ProviderConfig("anthropic", "m", api_key=KEY, options=thinking))
    off = AnthropicProvider(ProviderConfig("anthropic", "m", api_key=KEY))
    try:
        assert thinking_enabled(on)
        assert not thinking_enabled(off)
        assert thinking_enabled(off, thinking)
        assert not thinking_enabled(on, {"thinking": {"type": "disabled"}})
    finally:
        await on.aclose()
        await off.aclose()


@pytest.mark.parametrize(
    ("status", "message", "refused"),
    [
        (400, "Invalid parameter: 'response_format' of type 'json_schema' is not supported", True),
        (400, "Thinking may not be enabled when tool_choice forces tool use.", True),
        (422, "Unsupported field: tools", True),
        (400, "This model's maximum context length is 8192 tokens", False),
        (500, "response_format handler crashed", False),
        (None, "connection failed", False),
    ],
)
def test_only_a_refusal_of_the_option_counts_as_refused(
    status: int | None, message: str, refused: bool
) -> None:
    """A 400/422 naming the structured-output option is a refusal; other failures are not."""
    error = ProviderError(message, status_code=status)
    assert refused_structured_output(error) is refused


class _Provider:
    """A weakly referenceable stand-in provider."""


def test_refusals_are_remembered_per_provider_object() -> None:
    """A remembered provider is refused; another one, even of the same class, is not."""
    refusals = StructuredRefusals()
    first, second = _Provider(), _Provider()
    refusals.remember(first)
    assert refusals.refused(first)
    assert not refusals.refused(second)


def test_a_collected_provider_is_forgotten() -> None:
    """Once the provider is garbage collected, its entry goes, so a new object is not refused."""
    refusals = StructuredRefusals()
    provider = _Provider()
    refusals.remember(provider)
    del provider
    gc.collect()
    assert len(refusals) == 0


def test_a_provider_without_weak_references_is_still_remembered() -> None:
    """A slotted provider (no weak references) is kept, and remembered like any other."""
    refusals = StructuredRefusals()
    provider = ScriptedProvider([])
    refusals.remember(provider)
    assert refusals.refused(provider)
    assert not refusals.refused(ScriptedProvider([]))
