"""Native tool calling through the real `openai` and `anthropic` SDKs, against the wire server.

Requests offer tools, steer them with `tool_choice` and ask for a `response_format`; streamed
tool calls are joined from their fragments into one `ToolCallEvent` each; tool results go back
as the APIs' real tool messages.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pes_agent import (
    AgentProps,
    ParsedToolCall,
    PlanningContext,
    PlanningOutput,
    ProviderConfig,
    RetryPolicy,
    create_agent,
    tool,
)
from pes_agent.errors import UsageError
from pes_agent.providers import (
    PromptMessage,
    TokenDelta,
    ToolCallEvent,
    create_provider,
)
from pes_agent.providers.base import StreamMetadata
from pes_agent.tools.base import ToolSchema
from pes_agent.tools.calls import ToolCall

from .conftest import ProviderMaker
from .helpers import API_KEY, collect, content, metadata, request, restarts, thinking, tool_calls
from .model_server import Call, CutStream, ModelServer, Reply

PROVIDERS = ["openai", "anthropic"]

WEATHER = ToolSchema(
    name="get_weather",
    description="Current weather for a city.",
    input_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
CLOCK = ToolSchema(name="clock", description="The current time.")


def _calls(events: list[Any]) -> list[ToolCall]:
    return [event.call for event in tool_calls(events)]


# requests ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        (None, None),
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ("clock", {"type": "function", "function": {"name": "clock"}}),
    ],
)
async def test_openai_request_offers_function_tools_and_tool_choice(
    model_server: ModelServer, make_provider: ProviderMaker, choice: str | None, wire: Any
) -> None:
    """Tools go out as `function` tools; tool_choice as a keyword or a named function."""
    model_server.script(Reply("ok"))
    await collect(make_provider("openai"), request(tools=(WEATHER, CLOCK), tool_choice=choice))

    body = model_server.requests[0].body
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER.input_schema,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "clock",
                "description": "The current time.",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ]
    assert body.get("tool_choice") == wire


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        (None, None),
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        ("clock", {"type": "tool", "name": "clock"}),
    ],
)
async def test_anthropic_request_offers_tools_and_tool_choice(
    model_server: ModelServer, make_provider: ProviderMaker, choice: str | None, wire: Any
) -> None:
    """Tools go out with an `input_schema`; tool_choice as auto, none, any or a named tool."""
    model_server.script(Reply("ok"))
    await collect(make_provider("anthropic"), request(tools=(WEATHER, CLOCK), tool_choice=choice))

    body = model_server.requests[0].body
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": WEATHER.input_schema,
        },
        {
            "name": "clock",
            "description": "The current time.",
            "input_schema": {"type": "object", "properties": {}},
        },
    ]
    assert body.get("tool_choice") == wire


async def test_a_request_without_tools_sends_no_tool_fields(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """No tools and tool_choice 'auto' or 'none' leave tools, tool_choice and formats off."""
    model_server.script(Reply("a"), Reply("b"))
    await collect(make_provider("openai"), request(tool_choice="auto"))
    await collect(make_provider("anthropic"), request(tool_choice="none"))
    for sent in model_server.requests:
        assert not {"tools", "tool_choice", "response_format", "output_config"} & set(sent.body)


@pytest.mark.parametrize("name", PROVIDERS)
@pytest.mark.parametrize(
    ("tools", "choice", "message"),
    [
        ((), "required", "needs tools"),
        ((), "clock", "needs tools"),
        ((WEATHER,), "clock", "names no offered tool"),
    ],
)
async def test_a_tool_choice_that_cannot_be_honoured_is_a_usage_error(
    model_server: ModelServer,
    make_provider: ProviderMaker,
    name: str,
    tools: tuple[ToolSchema, ...],
    choice: str,
    message: str,
) -> None:
    """Forcing a tool with none offered, or one not offered, fails before anything is sent."""
    provider = make_provider(name)
    with pytest.raises(UsageError, match=message):
        await collect(provider, request(tools=tools, tool_choice=choice))
    assert model_server.requests == []


CLOSED_SCHEMA: dict[str, Any] = {
    "title": "Plan Output!",
    "type": "object",
    "properties": {
        "intent": {"type": "string"},
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"tool": {"type": "string"}, "arguments": {"type": "string"}},
                "required": ["tool", "arguments"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["intent", "steps"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("schema", "name", "strict"),
    [
        (CLOSED_SCHEMA, "Plan_Output", True),
        # A nested object that leaves additionalProperties open cannot be strict.
        (
            {
                **CLOSED_SCHEMA,
                "title": None,
                "properties": {**CLOSED_SCHEMA["properties"], "extra": {"type": "object"}},
                "required": ["intent", "steps", "extra"],
            },
            "response",
            False,
        ),
        # An optional property cannot be strict either.
        ({**CLOSED_SCHEMA, "required": ["intent"]}, "Plan_Output", False),
    ],
)
async def test_openai_response_format_is_a_json_schema_strict_when_it_can_be(
    model_server: ModelServer,
    make_provider: ProviderMaker,
    schema: dict[str, Any],
    name: str,
    strict: bool,
) -> None:
    """response_format goes out as json_schema, named from its title, strict only if allowed."""
    model_server.script(Reply("{}"))
    await collect(make_provider("openai"), request(response_format=schema))
    assert model_server.requests[0].body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": name, "schema": schema, "strict": strict},
    }


async def test_anthropic_response_format_is_structured_output_config(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """response_format goes out as output_config.format, keeping the options' other settings."""
    model_server.script(Reply("{}"))
    provider = make_provider("anthropic", options={"output_config": {"effort": "low"}})
    await collect(provider, request(response_format=CLOSED_SCHEMA))
    assert model_server.requests[0].body["output_config"] == {
        "effort": "low",
        "format": {"type": "json_schema", "schema": CLOSED_SCHEMA},
    }


# streamed tool calls -----------------------------------------------------------------------


async def test_openai_joins_interleaved_fragments_by_index(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """Three calls whose fragments alternate arrive as three whole calls, in index order."""
    model_server.script(
        Reply(
            "Let me check.",
            thinking="Two cities and the time.",
            tool_calls=(
                Call("get_weather", {"city": "Paris"}, fragments=4),
                Call("clock", {}),
                Call("get_weather", {"city": "Rome, Italy", "units": ["C", "F"]}, fragments=7),
            ),
            interleave_calls=True,
        )
    )
    events = await collect(make_provider("openai"), request(tools=(WEATHER, CLOCK)))

    assert _calls(events) == [
        ToolCall("call_1", "get_weather", {"city": "Paris"}),
        ToolCall("call_2", "clock", {}),
        ToolCall("call_3", "get_weather", {"city": "Rome, Italy", "units": ["C", "F"]}),
    ]
    assert all(event.error is None for event in tool_calls(events))
    assert content(events) == "Let me check."
    assert thinking(events) == ["Two cities and the time."]
    assert metadata(events).stop_reason == "tool_calls"
    first_call = next(i for i, e in enumerate(events) if isinstance(e, ToolCallEvent))
    assert not any(isinstance(e, TokenDelta) for e in events[first_call:])


async def test_anthropic_joins_input_json_deltas_per_tool_use_block(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """Each tool_use block's partial JSON is joined into one call when the block stops."""
    model_server.script(
        Reply(
            "Checking both.",
            thinking="Weather, then time.",
            tool_calls=(
                Call("get_weather", {"city": "Paris", "days": [1, 2]}, fragments=6),
                Call("clock", {}),
            ),
        )
    )
    events = await collect(make_provider("anthropic"), request(tools=(WEATHER, CLOCK)))

    assert _calls(events) == [
        ToolCall("toolu_1", "get_weather", {"city": "Paris", "days": [1, 2]}),
        ToolCall("toolu_2", "clock", {}),
    ]
    assert all(event.error is None for event in tool_calls(events))
    assert content(events) == "Checking both."
    assert thinking(events) == ["Weather, then time."]
    assert metadata(events).stop_reason == "tool_use"


@pytest.mark.parametrize("name", PROVIDERS)
@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ('{"city": "Par', "not valid JSON"),
        ('["Paris"]', "a JSON list, not an object"),
        ("42", "a JSON int, not an object"),
    ],
)
async def test_unusable_arguments_give_an_error_event_not_a_crash(
    model_server: ModelServer, make_provider: ProviderMaker, name: str, raw: str, error: str
) -> None:
    """A call whose arguments are no JSON object gets an error and its raw text; others stand."""
    model_server.script(
        Reply(
            tool_calls=(
                Call("get_weather", raw, id="bad", fragments=2),
                Call("get_weather", {"city": "Oslo"}, id="good"),
            )
        )
    )
    events = await collect(make_provider(name), request(tools=(WEATHER,)))

    bad, good = tool_calls(events)
    assert bad.call == ToolCall("bad", "get_weather", {})
    assert bad.error is not None
    assert error in bad.error
    assert "'bad'" in bad.error
    assert bad.raw == raw
    assert good == ToolCallEvent(ToolCall("good", "get_weather", {"city": "Oslo"}))
    assert isinstance(events[-1], StreamMetadata)


@pytest.mark.parametrize("name", PROVIDERS)
async def test_empty_arguments_are_an_empty_object(
    model_server: ModelServer, make_provider: ProviderMaker, name: str
) -> None:
    """A call streamed with no argument text at all has arguments {} and no error."""
    model_server.script(Reply(tool_calls=(Call("clock", ""),)))
    events = await collect(make_provider(name), request(tools=(CLOCK,)))
    (event,) = tool_calls(events)
    assert event.error is None
    assert event.call.name == "clock"
    assert event.call.arguments == {}


# retries -----------------------------------------------------------------------------------

WHOLE = (
    Call("get_weather", {"city": "Paris"}, id="c1", fragments=3),
    Call("get_weather", {"city": "Lima"}, id="c2", fragments=3),
)
# Cut inside the second call's arguments: OpenAI after the role chunk has the first call's
# 4 fragments and 2 of the second's; Anthropic after the first block's start has the rest of
# that block (5 events) and the second block's start and first 2 deltas.
CUT_INSIDE_SECOND_CALL = {"openai": 6, "anthropic": 8}


@pytest.mark.parametrize("name", PROVIDERS)
async def test_a_retried_stream_yields_each_call_once_after_the_restart(
    model_server: ModelServer, make_provider: ProviderMaker, name: str
) -> None:
    """Fragments of a cut attempt never surface; after the restart each call comes once."""
    model_server.script(
        CutStream(Reply(tool_calls=WHOLE), after_chunks=CUT_INSIDE_SECOND_CALL[name], abort=False),
        Reply(tool_calls=WHOLE),
    )
    events = await collect(make_provider(name), request(tools=(WEATHER,)))

    assert len(model_server.requests) == 2, "the cut attempt was retried"
    # OpenAI yields calls only once a stream has finished, so its cut attempt yielded nothing
    # and needs no restart; Anthropic yields each call as its block stops, so the first call
    # may precede the restart.
    found = restarts(events)
    before = events[: events.index(found[0])] if found else []
    before_calls = [e.call for e in before if isinstance(e, ToolCallEvent)]
    assert before_calls in ([], [ToolCall("c1", "get_weather", {"city": "Paris"})]), (
        "only a call whose block had finished may precede the restart"
    )
    assert _calls(events) == [
        ToolCall("c1", "get_weather", {"city": "Paris"}),
        ToolCall("c2", "get_weather", {"city": "Lima"}),
    ]
    everything = [e for e in events if isinstance(e, ToolCallEvent)]
    assert len(everything) == len(before_calls) + 2
    assert all(e.error is None for e in everything), "no half-joined call ever surfaces"


# round trips -------------------------------------------------------------------------------

RESULT = json.dumps({"city": "Paris", "sky": "sunny", "celsius": 18})


@pytest.mark.parametrize("name", PROVIDERS)
async def test_two_rounds_send_the_tool_result_as_a_real_tool_message(
    model_server: ModelServer, make_provider: ProviderMaker, name: str
) -> None:
    """Round 1 calls a tool; round 2 sends that call and its result in the API's own form."""
    model_server.script(
        Reply("Looking it up.", tool_calls=(Call("get_weather", {"city": "Paris"}),)),
        Reply("Sunny and 18 °C in Paris."),
    )
    provider = make_provider(name)
    question = PromptMessage("user", "Weather in Paris?")
    first = await collect(provider, request(question, tools=(WEATHER,)))
    (call,) = _calls(first)
    second = await collect(
        provider,
        request(
            question,
            PromptMessage("assistant", content(first), tool_calls=(call,)),
            PromptMessage("tool", RESULT, name="get_weather", tool_call_id=call.id),
            tools=(WEATHER,),
        ),
    )
    assert content(second) == "Sunny and 18 °C in Paris."

    sent = model_server.requests[1].body
    assert sent["tools"] == model_server.requests[0].body["tools"]
    if name == "openai":
        user, assistant, result = sent["messages"]
        assert user == {"role": "user", "content": "Weather in Paris?"}
        (wire_call,) = assistant.pop("tool_calls")
        assert assistant == {"role": "assistant", "content": "Looking it up."}
        assert json.loads(wire_call["function"].pop("arguments")) == {"city": "Paris"}
        assert wire_call == {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather"},
        }
        assert result == {"role": "tool", "tool_call_id": "call_1", "content": RESULT}
    else:
        assert sent["messages"] == [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Looking it up."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": RESULT}],
            },
        ]


async def test_openai_turn_that_only_calls_tools_has_null_content(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """An assistant turn with tool calls and no text is sent with content null."""
    model_server.script(Reply("ok"))
    call = ToolCall("call_9", "clock", {})
    await collect(
        make_provider("openai"),
        request(
            PromptMessage("user", "Time?"),
            PromptMessage("assistant", "", tool_calls=(call,)),
            PromptMessage("tool", "12:00", tool_call_id="call_9"),
            tools=(CLOCK,),
        ),
    )
    assistant = model_server.requests[0].body["messages"][1]
    assert assistant["content"] is None
    assert assistant["tool_calls"][0]["function"] == {"name": "clock", "arguments": "{}"}


async def test_anthropic_merges_tool_results_into_one_user_turn_ahead_of_text(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """Consecutive results join one user turn, before any text; an id-less result stays text."""
    model_server.script(Reply("ok"))
    calls = (ToolCall("toolu_a", "clock", {}), ToolCall("toolu_b", "get_weather", {"city": "X"}))
    await collect(
        make_provider("anthropic"),
        request(
            PromptMessage("tool", "from an earlier run", name="clock"),
            PromptMessage("user", "Time and weather?"),
            PromptMessage("assistant", "", tool_calls=calls),
            PromptMessage("user", "Be brief."),
            PromptMessage("tool", "12:00", tool_call_id="toolu_a"),
            PromptMessage("tool", "rain", tool_call_id="toolu_b"),
            tools=(CLOCK, WEATHER),
        ),
    )
    assert model_server.requests[0].body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "[tool result: clock]\nfrom an earlier run"},
                {"type": "text", "text": "Time and weather?"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_a", "name": "clock", "input": {}},
                {
                    "type": "tool_use",
                    "id": "toolu_b",
                    "name": "get_weather",
                    "input": {"city": "X"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "12:00"},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "rain"},
                {"type": "text", "text": "Be brief."},
            ],
        },
    ]


async def test_ollama_speaks_tools_like_openai(
    model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'ollama:MODEL' offers function tools and joins the streamed call like OpenAI."""
    monkeypatch.setenv("OLLAMA_BASE_URL", model_server.openai_base_url)
    model_server.script(Reply(tool_calls=(Call("get_weather", {"city": "Bern"}),)))
    provider = create_provider("ollama:qwen3")
    try:
        events = await collect(provider, request(tools=(WEATHER,), tool_choice="required"))
    finally:
        await provider.aclose()
    assert _calls(events) == [ToolCall("call_1", "get_weather", {"city": "Bern"})]
    body = model_server.requests[0].body
    assert body["tools"][0]["function"]["name"] == "get_weather"
    assert body["tool_choice"] == "required"


# through the agent -------------------------------------------------------------------------

ran: list[str] = []


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    ran.append(city)
    return f"sunny in {city}"


class NativeToolPlanner:
    """Plans with one native-tool model call: the model's tool calls are the plan."""

    def __init__(self) -> None:
        self.responses: list[Any] = []

    async def plan(self, ctx: PlanningContext) -> PlanningOutput:
        response = await ctx.llm(
            [PromptMessage("user", ctx.props.query)],
            phase="planning",
            tools=ctx.tools,
            tool_choice="required",
        )
        self.responses.append(response)
        return PlanningOutput(
            intent="look up",
            tool_calls=[
                ParsedToolCall(call_id=e.call.id, tool_name=e.call.name, arguments=e.call.arguments)
                for e in response.tool_calls
            ],
        )


@pytest.mark.parametrize("name", PROVIDERS)
async def test_a_planner_gets_each_native_call_once_from_a_retried_stream(
    model_server: ModelServer, name: str
) -> None:
    """The model caller drops a cut attempt's calls, so each planned tool runs exactly once."""
    calls = (Call("lookup", {"city": "Paris"}, id="c1"), Call("lookup", {"city": "Lima"}, id="c2"))
    model_server.script(
        CutStream(Reply(tool_calls=calls), after_chunks=CUT_INSIDE_SECOND_CALL[name], abort=False),
        Reply(tool_calls=calls),
        Reply("Sunny in both."),
    )
    ran.clear()
    planner = NativeToolPlanner()
    config = ProviderConfig(
        name, "test-model", api_key=API_KEY, base_url=model_server.base_url_for(name)
    )
    async with create_agent(
        provider=config,
        tools=[lookup],
        planner=planner,
        retry_policy=RetryPolicy(initial_backoff_s=0, jitter_s=0),
    ) as agent:
        result = await agent.process(AgentProps("Weather in Paris and Lima?", "t-native"))

    assert result.metadata.status == "success", result.metadata.error
    assert len(model_server.requests) == 3, "cut planning call, its retry, synthesis"
    (response,) = planner.responses
    assert [e.call for e in response.tool_calls] == [
        ToolCall("c1", "lookup", {"city": "Paris"}),
        ToolCall("c2", "lookup", {"city": "Lima"}),
    ]
    assert sorted(ran) == ["Lima", "Paris"]
    assert result.metadata.tool_calls == 2
    planning_body = model_server.requests[0].body
    tool_names = [t.get("name") or t["function"]["name"] for t in planning_body["tools"]]
    assert tool_names == ["lookup"]
