"""RecordingProvider writes real runs to a cassette; ReplayProvider plays them back offline."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from pes_agent import (
    AgentFinalResponse,
    AgentProps,
    ProviderConfig,
    create_agent,
    tool,
)
from pes_agent.errors import CassetteMissError, ConfigurationError, ProviderError
from pes_agent.observing.types import Observation
from pes_agent.planning.structured import SUBMIT_PLAN
from pes_agent.providers import LLMRequest, PromptMessage, create_provider
from pes_agent.providers.base import (
    LLMProvider,
    ProviderEvent,
    StreamMetadata,
    ThinkingBlock,
    ToolCallEvent,
)
from pes_agent.testing import (
    RecordingProvider,
    ReplayProvider,
    ScriptedProvider,
    ScriptedResponse,
    plan_call,
    plan_json,
)
from pes_agent.tools.base import ToolSchema
from pes_agent.tools.calls import ToolCall
from pes_agent.usage import Usage
from tests.pes_agent.providers.model_server import Call, Fault, ModelServer, Reply

from .runs import APIS, CONFIG_KEY, comparable, get_weather, multiply, sdk_provider

ANSWER = "It is sunny and 18 °C in Paris, and 12 × 7 = 84."
QUERY = "Weather in Paris, and 12*7?"
# Not shaped like API keys: only the cassette's own scrubbing can keep them out.
HEADER_TOKEN = "HeaderSecret0042xyzwUV"
ENV_TOKEN = "EnvSecret7777abcdEFGH"


@tool
async def describe(weather: dict[str, Any], product: int) -> str:
    """Describe a weather report and a product in one sentence."""
    return f"{weather['sky']} and {weather['celsius']} °C; the product is {product}"


@tool
def service_token() -> str:
    """The service token from the environment (a tool that leaks a credential into the prompt)."""
    return os.environ["SERVICE_TOKEN"]


def _openai(server: ModelServer, **options: Any) -> LLMProvider:
    config = ProviderConfig(
        "openai",
        "test-model",
        api_key=CONFIG_KEY,
        base_url=server.openai_base_url,
        max_retries=0,
        options=options,
    )
    return create_provider(config)


def _request(text: str = "Hello?", **kwargs: Any) -> LLMRequest:
    kwargs.setdefault("phase", "synthesis")
    return LLMRequest(
        messages=(PromptMessage("user", text),), thread_id="t", trace_id="tr", **kwargs
    )


async def _collect(provider: LLMProvider, request: LLMRequest) -> list[ProviderEvent]:
    return [event async for event in provider.stream(request)]


def assert_same_run(
    recorded: tuple[AgentFinalResponse, list[Observation]],
    replayed: tuple[AgentFinalResponse, list[Observation]],
) -> None:
    """The replayed run gave the recorded one's answer, usage and observations (types, order and
    contents, apart from ids and timings)."""
    (first, first_seen), (second, second_seen) = recorded, replayed
    assert second.metadata.status == first.metadata.status, second.metadata.error
    assert second.response.content == first.response.content
    assert second.metadata.usage == first.metadata.usage
    assert second.metadata.tool_calls == first.metadata.tool_calls
    assert [o.type for o in second_seen] == [o.type for o in first_seen]
    assert comparable(second_seen) == comparable(first_seen)


async def _run(
    provider: LLMProvider, thread_id: str = "thread-cassette"
) -> tuple[AgentFinalResponse, list[Observation]]:
    agent = create_agent(provider=provider, tools=[get_weather, multiply, describe])
    try:
        result = await agent.process(AgentProps(QUERY, thread_id))
        observations = await agent.observations.get_observations(thread_id)
    finally:
        await agent.aclose()
        await provider.aclose()
    return result, observations


# A plan of three calls, the third waiting for the first two and taking their results.
PLAN_CALLS: list[dict[str, Any]] = [
    {"tool": "get_weather", "args": {"city": "Paris"}, "after": []},
    {"tool": "multiply", "args": {"a": 12, "b": 7}, "after": []},
    {
        "tool": "describe",
        "args": {"weather": "{step_1_result}", "product": "{step_2_result}"},
        "after": [1, 2],
    },
]


def _plan_reply(api: str) -> Reply:
    """The planning answer each API's structured planning asks for, with thinking before it:
    OpenAI a strict JSON schema's text (each call's args a JSON string), Anthropic a call of
    the forced `submit_plan` tool."""
    if api == "openai":
        strict = [{**call, "args": json.dumps(call["args"])} for call in PLAN_CALLS]
        text = json.dumps({"calls": strict, "intent": "weather and a product"})
        return Reply(
            text,
            thinking="Two lookups, then describe.",
            input_tokens=120,
            output_tokens=40,
            cache_read_tokens=30,
        )
    plan = {"calls": PLAN_CALLS, "intent": "weather and a product"}
    return Reply(
        thinking=("Two lookups,", " then describe."),
        tool_calls=(Call(SUBMIT_PLAN, plan, fragments=3),),
        input_tokens=120,
        output_tokens=40,
        cache_read_tokens=30,
    )


@pytest.mark.parametrize("api", APIS)
async def test_a_run_through_a_real_sdk_is_recorded_then_replayed_with_the_server_stopped(
    api: str, tmp_path: Path
) -> None:
    """A PES run (thinking, a plan of dependent tool calls, a synthesis) through the real SDK
    replays offline with the same answer, usage and observations."""
    cassette = tmp_path / "run.jsonl"
    async with ModelServer() as server:
        server.script(_plan_reply(api), Reply(ANSWER, input_tokens=200, output_tokens=20))
        recorded = await _run(RecordingProvider(sdk_provider(server, api), cassette))
        assert len(server.requests) == 2
    result, observations = recorded
    assert result.metadata.status == "success", result.metadata.error
    assert result.metadata.tool_calls == 3
    usage = result.metadata.usage
    assert (usage.requests, usage.output_tokens, usage.cache_read_tokens) == (2, 60, 30)
    described = [o for o in observations if "the product is 84" in json.dumps(o.content)]
    assert described, "the third call did not get the first two's results"
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert [line["request"]["phase"] for line in lines] == ["planning", "synthesis"]
    recorded_kinds = {event["type"] for event in lines[0]["events"]}
    assert "thinking" in recorded_kinds or any(
        event["type"] == "token" and event["kind"] == "thinking" for event in lines[0]["events"]
    )
    if api == "anthropic":
        assert "tool_call" in recorded_kinds  # the plan came as a submit_plan call

    replay = ReplayProvider(cassette)  # the server is stopped: only the cassette answers
    replayed = await _run(replay)

    assert_same_run(recorded, replayed)
    assert replayed[0].response.content == ANSWER
    assert (replay.name, replay.model) == (api, "test-model")
    assert replay.structured_output == ("response_format" if api == "openai" else "forced_tool")
    assert replay.remaining == 0


async def test_thinking_and_tool_call_events_round_trip(tmp_path: Path) -> None:
    """Thinking deltas and blocks, native tool calls and metadata replay exactly as streamed."""
    cassette = tmp_path / "events.jsonl"
    usage = Usage(input_tokens=5, output_tokens=7, total_tokens=12, reasoning_tokens=3, requests=1)
    scripted = ScriptedProvider(
        [
            ScriptedResponse(
                "Calling.",
                thinking=["First, think.", "Then decide."],
                tool_calls=[ToolCall("call_9", "add", {"a": 1, "b": [2, 3]})],
                usage=usage,
            )
        ],
        chunk_size=4,
    )
    recorded = await _collect(RecordingProvider(scripted, cassette), _request())
    replayed = await _collect(ReplayProvider(cassette), _request())

    assert replayed == recorded
    assert [e.text for e in replayed if isinstance(e, ThinkingBlock)] == [
        "First, think.",
        "Then decide.",
    ]
    assert [e.call for e in replayed if isinstance(e, ToolCallEvent)] == [
        ToolCall("call_9", "add", {"a": 1, "b": [2, 3]})
    ]
    meta = replayed[-1]
    assert isinstance(meta, StreamMetadata)
    assert (meta.usage, meta.stop_reason) == (usage, "tool_calls")


async def test_tool_call_arguments_replay_in_the_order_the_model_wrote_them(
    tmp_path: Path,
) -> None:
    """Regression: arguments came back with their keys sorted, so a prompt that renders them
    (a plan's results, in synthesis) differed from the recorded one and replay missed."""
    cassette = tmp_path / "order.jsonl"
    arguments = {"zebra": {"y": 1, "x": 2}, "apple": 3}
    scripted = ScriptedProvider([ScriptedResponse(tool_calls=[ToolCall("c", "f", arguments)])])
    await _collect(RecordingProvider(scripted, cassette), _request())
    replayed = await _collect(ReplayProvider(cassette), _request())
    (call,) = [e.call for e in replayed if isinstance(e, ToolCallEvent)]
    assert json.dumps(call.arguments) == json.dumps(arguments)


async def test_openai_native_tool_call_fragments_round_trip(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """The OpenAI SDK's tool-call fragments, joined calls and stop reason replay as recorded."""
    cassette = tmp_path / "tools.jsonl"
    model_server.script(Reply(tool_calls=(Call("add", {"a": 1, "b": 2}, fragments=3),)))
    offered = (ToolSchema(name="add", description="Add two numbers."),)
    request = _request(tools=offered, tool_choice="required")
    provider = _openai(model_server)
    try:
        recorded = await _collect(RecordingProvider(provider, cassette), request)
    finally:
        await provider.aclose()
    replayed = await _collect(ReplayProvider(cassette), request)

    assert replayed == recorded
    calls = [e.call for e in replayed if isinstance(e, ToolCallEvent)]
    assert [(c.name, c.arguments) for c in calls] == [("add", {"a": 1, "b": 2})]
    assert isinstance(replayed[-1], StreamMetadata)
    assert replayed[-1].stop_reason == "tool_calls"


async def test_the_wrapped_provider_gets_the_request_object_unchanged(tmp_path: Path) -> None:
    """Structured output, tools and tool choice reach the wrapped provider as they were sent."""
    scripted = ScriptedProvider(["{}"])
    scripted_with_mode: Any = scripted
    recording = RecordingProvider(scripted, tmp_path / "c.jsonl")
    request = _request(
        phase="planning",
        tools=(ToolSchema(name="add", description="Add."),),
        tool_choice="add",
        response_format={"type": "object", "properties": {"x": {"type": "integer"}}},
        temperature=0.2,
        max_tokens=50,
        options={"top_p": 0.5},
    )
    await _collect(recording, request)
    assert scripted.requests == [request]
    assert scripted.requests[0] is request
    assert getattr(scripted_with_mode, "structured_output", None) is None
    assert recording.structured_output is None
    line = json.loads((tmp_path / "c.jsonl").read_text())
    assert line["request"]["tool_choice"] == "add"
    assert line["request"]["response_format"] == request.response_format
    assert line["request"]["options"] == {"top_p": 0.5}


async def test_a_changed_prompt_is_a_miss_showing_the_closest_request_and_a_diff(
    tmp_path: Path,
) -> None:
    """A request the cassette does not hold fails with the nearest recording and what differs."""
    cassette = tmp_path / "c.jsonl"
    recording = RecordingProvider(ScriptedProvider(["one", "two"]), cassette)
    await _collect(recording, _request("What is the weather in Paris?"))
    await _collect(recording, _request("Something else entirely, about cooking pasta."))

    replay = ReplayProvider(cassette)
    with pytest.raises(CassetteMissError) as caught:
        await _collect(replay, _request("What is the weather in Rome?"))

    message = caught.value.message
    assert str(cassette) in message
    assert '-      "content": "What is the weather in Paris?",' in message
    assert '+      "content": "What is the weather in Rome?",' in message
    assert "pasta" not in message
    assert "RecordingProvider" in message
    assert isinstance(caught.value, ProviderError)
    assert caught.value.trace_id == "tr"


async def test_equal_requests_replay_in_recorded_order_and_then_miss(tmp_path: Path) -> None:
    """The same request asked twice gets the first then the second answer; a third is a miss."""
    cassette = tmp_path / "c.jsonl"
    recording = RecordingProvider(ScriptedProvider(["first", "other", "second"]), cassette)
    for text in ("same", "different", "same"):
        await _collect(recording, _request(text))

    replay = ReplayProvider(cassette)

    async def answer(text: str) -> str:
        events = await _collect(replay, _request(text))
        return "".join(getattr(e, "text", "") for e in events if not isinstance(e, ThinkingBlock))

    assert await answer("same") == "first"
    assert await answer("same") == "second"
    assert await answer("different") == "other"
    with pytest.raises(CassetteMissError, match="already replayed"):
        await answer("same")


async def test_no_secret_reaches_the_cassette(
    model_server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key in the config, a token in the headers and one in the environment are never written,
    even when a tool and the model repeat them."""
    monkeypatch.setenv("SERVICE_TOKEN", ENV_TOKEN)
    cassette = tmp_path / "secret.jsonl"
    model_server.script(
        Reply(plan_json(plan_call(1, "service_token"), intent="token")),
        Reply(f"Token {ENV_TOKEN}, key {CONFIG_KEY}, header {HEADER_TOKEN}."),
    )
    provider = _openai(model_server, extra_headers={"X-Service-Token": HEADER_TOKEN})
    agent = create_agent(provider=RecordingProvider(provider, cassette), tools=[service_token])
    try:
        result = await agent.process(AgentProps("What is my token?", "thread-secret"))
    finally:
        await agent.aclose()
        await provider.aclose()

    assert result.metadata.status == "success", result.metadata.error
    sent = model_server.requests[1]
    assert sent.headers["x-service-token"] == HEADER_TOKEN
    assert ENV_TOKEN in json.dumps(sent.body)  # the tool did put it in the prompt
    text = cassette.read_text()
    assert len(text.splitlines()) == 2
    for secret in (CONFIG_KEY, HEADER_TOKEN, ENV_TOKEN):
        assert secret not in text
    assert "[REDACTED]" in text


async def test_credential_options_in_a_request_are_redacted(tmp_path: Path) -> None:
    """Credential-named options and headers of a request are written as [REDACTED]."""
    cassette = tmp_path / "c.jsonl"
    request = _request(
        options={
            "api_key": "plain-option-secret",
            "extra_headers": {"Authorization": "Bearer abc", "X-Trace": "visible"},
            "max_tokens": 9,
        }
    )
    await _collect(RecordingProvider(ScriptedProvider(["ok"]), cassette), request)
    options = json.loads(cassette.read_text())["request"]["options"]
    assert options == {
        "api_key": "[REDACTED]",
        "extra_headers": {"Authorization": "[REDACTED]", "X-Trace": "visible"},
        "max_tokens": 9,
    }
    # The same request replays: matching scrubs the request the same way.
    assert await _collect(ReplayProvider(cassette), request)


async def test_each_call_is_on_disk_before_the_next_starts(tmp_path: Path) -> None:
    """A call's line is written when it ends, so a crash later loses nothing recorded."""
    cassette = tmp_path / "c.jsonl"
    recording = RecordingProvider(ScriptedProvider(["a", "b"]), cassette)
    await _collect(recording, _request("one"))
    assert len(cassette.read_text().splitlines()) == 1
    await _collect(recording, _request("two"))
    assert len(cassette.read_text().splitlines()) == 2


async def test_a_recorded_failure_is_raised_again_on_replay(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """A call that failed is recorded and fails the same way on replay."""
    cassette = tmp_path / "c.jsonl"
    model_server.script(Fault(400))
    provider = _openai(model_server)
    try:
        with pytest.raises(ProviderError) as recorded:
            await _collect(RecordingProvider(provider, cassette), _request())
    finally:
        await provider.aclose()
    assert CONFIG_KEY not in cassette.read_text()

    with pytest.raises(ProviderError) as replayed:
        await _collect(ReplayProvider(cassette), _request())
    assert not isinstance(replayed.value, CassetteMissError)
    assert (replayed.value.message, replayed.value.status_code) == (
        recorded.value.message,
        400,
    )
    assert replayed.value.retryable is recorded.value.retryable


def test_a_missing_cassette_names_the_path_and_how_to_record_it(tmp_path: Path) -> None:
    """ReplayProvider on a path with no file says where it looked and how to record one."""
    path = tmp_path / "nothing.jsonl"
    with pytest.raises(ConfigurationError) as caught:
        ReplayProvider(path)
    assert str(path) in caught.value.message
    assert "RecordingProvider(provider" in caught.value.message


@pytest.mark.parametrize(
    "line",
    ["{not json", '{"version": 99, "request": {}, "events": []}', '{"version": 1, "events": []}'],
)
def test_a_damaged_cassette_names_the_path_and_line(tmp_path: Path, line: str) -> None:
    """A cassette that cannot be read back is refused with its path, the line and the fix."""
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ConfigurationError) as caught:
        ReplayProvider(path)
    assert str(path) in caught.value.message
    assert "line 1" in caught.value.message
    assert "RecordingProvider" in caught.value.message
