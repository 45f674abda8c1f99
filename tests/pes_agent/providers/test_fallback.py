"""FallbackProvider through the real OpenAI and Anthropic SDKs against the loopback server:
which failures move on to the next provider, which never do, and what the answer reports."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pes_agent import (
    AgentProps,
    FallbackProvider,
    ObservationType,
    ProviderConfig,
    ProviderError,
    UsageError,
    create_agent,
    tool,
)
from pes_agent.observing.streams import StreamEvent
from pes_agent.otel import instrument
from pes_agent.providers import LLMProvider, RetryPolicy, should_fall_back
from pes_agent.testing import ScriptedProvider
from tests.pes_agent.test_otel import Traces

from .conftest import ProviderMaker
from .helpers import API_KEY, RecordedSleeps, collect, content, metadata, request
from .model_server import CutStream, Fault, ModelServer, Reply

CONTEXT_LENGTH = {
    "openai": Fault(
        400,
        "This model's maximum context length is 8192 tokens. However, your messages "
        "resulted in 9120 tokens.",
        code="context_length_exceeded",
    ),
    "anthropic": Fault(400, "prompt is too long: 210000 tokens > 200000 maximum"),
}


def pair(make: ProviderMaker, first: str = "openai", **kwargs: Any) -> FallbackProvider:
    """`first` (one retry) falling back to the other API (one retry)."""
    second = "anthropic" if first == "openai" else "openai"
    return FallbackProvider([make(first, max_retries=1), make(second, max_retries=1)], **kwargs)


def apis(server: ModelServer) -> list[str]:
    return [r.api for r in server.requests]


@pytest.mark.parametrize("status", [500, 503, 529])
async def test_an_outage_after_its_retries_falls_back_to_the_next_provider(
    model_server: ModelServer, make_provider: ProviderMaker, status: int
) -> None:
    model_server.script(Fault(status), Fault(status), Reply("from anthropic", input_tokens=7))
    events = await collect(pair(make_provider))

    assert content(events) == "from anthropic"
    assert apis(model_server) == ["openai", "openai", "anthropic"]
    meta = metadata(events)
    assert meta.provider == "anthropic"
    # Usage sums the providers asked: the failed one cost a request and no tokens.
    assert meta.usage.requests == 2
    assert meta.usage.input_tokens == 7


async def test_429_beyond_the_retries_falls_back_but_within_them_does_not(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    model_server.script(Fault(429), Fault(429), Reply("second"))
    events = await collect(pair(make_provider))
    assert (content(events), metadata(events).provider) == ("second", "anthropic")
    assert apis(model_server) == ["openai", "openai", "anthropic"]

    model_server.requests.clear()
    model_server.script(Fault(429), Reply("first, on its retry"))
    events = await collect(pair(make_provider))
    assert content(events) == "first, on its retry"
    assert metadata(events).provider == "openai"
    assert metadata(events).usage.requests == 1
    assert apis(model_server) == ["openai", "openai"]


@pytest.mark.parametrize("first", ["openai", "anthropic"])
async def test_a_prompt_too_long_for_the_first_model_goes_to_the_next(
    model_server: ModelServer, make_provider: ProviderMaker, first: str
) -> None:
    model_server.script(CONTEXT_LENGTH[first], Reply("a bigger window"))
    events = await collect(pair(make_provider, first))

    assert content(events) == "a bigger window"
    # A 400 is not retried: one request to the first provider, then the second.
    assert len(model_server.requests) == 2
    assert model_server.requests[0].api == first
    assert metadata(events).provider != first


async def test_a_content_policy_refusal_goes_to_the_next(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    model_server.script(
        Fault(
            400,
            "The response was filtered due to our content management policy.",
            code="content_filter",
        ),
        Reply("answered elsewhere"),
    )
    events = await collect(pair(make_provider))
    assert content(events) == "answered elsewhere"


@pytest.mark.parametrize(
    ("fault", "status"),
    [(Fault(400, "Invalid value for 'temperature'"), 400), (Fault(401), 401), (Fault(404), 404)],
)
async def test_a_bad_request_or_a_bad_key_does_not_fall_back(
    model_server: ModelServer, make_provider: ProviderMaker, fault: Fault, status: int
) -> None:
    model_server.script(fault, Reply("never asked"))
    with pytest.raises(ProviderError) as raised:
        await collect(pair(make_provider))
    assert raised.value.status_code == status
    assert raised.value.refusal is None
    assert raised.value.provider == "openai"
    assert apis(model_server) == ["openai"]
    assert API_KEY not in str(raised.value)


async def test_a_usage_error_fails_at_once_whatever_fall_back_on_says(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    first = make_provider("openai")
    await first.aclose()  # streaming from a closed provider is the caller's mistake
    fallback = FallbackProvider(
        [first, make_provider("anthropic")], fall_back_on=lambda error: True
    )
    with pytest.raises(UsageError, match="is closed"):
        await collect(fallback)
    assert model_server.requests == []


async def test_a_stream_that_fails_after_tokens_were_sent_is_not_replaced(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    model_server.script(CutStream(Reply("half an answer that"), after_chunks=2), Reply("other"))
    fallback = FallbackProvider(
        [make_provider("openai", max_retries=0), make_provider("anthropic")]
    )
    seen: list[Any] = []

    async def consume() -> None:
        async for event in fallback.stream(request()):
            seen.append(event)

    with pytest.raises(ProviderError) as raised:
        await consume()
    assert raised.value.retryable  # an outage, which would fall back had nothing streamed
    assert content(seen)  # the caller had tokens
    assert apis(model_server) == ["openai"]


async def test_a_retry_that_restarted_the_answer_counts_as_streamed(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """The caller saw tokens and a restart: a later outage of the same provider ends the call."""
    model_server.script(CutStream(after_chunks=2), Fault(500), Reply("other"))
    with pytest.raises(ProviderError):
        await collect(pair(make_provider))
    assert apis(model_server) == ["openai", "openai"]


async def test_when_every_provider_fails_the_last_error_is_raised(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    model_server.script(Fault(500), Fault(500), Fault(503), Fault(503))
    with pytest.raises(ProviderError) as raised:
        await collect(pair(make_provider))
    assert (raised.value.provider, raised.value.status_code) == ("anthropic", 503)


async def test_fall_back_on_chooses_the_failures_that_move_on(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    model_server.script(Fault(401), Reply("the second key works"))
    events = await collect(pair(make_provider, fall_back_on=(ProviderError,)))
    assert content(events) == "the second key works"

    model_server.requests.clear()
    model_server.script(Fault(500), Fault(500), Reply("never asked"))
    with pytest.raises(ProviderError):
        await collect(pair(make_provider, fall_back_on=lambda error: False))
    assert apis(model_server) == ["openai", "openai"]


def test_should_fall_back_reads_the_error() -> None:
    assert should_fall_back(ProviderError("x", status_code=500, retryable=True))
    assert should_fall_back(ProviderError("x", status_code=400, refusal="context_length"))
    assert not should_fall_back(ProviderError("x", status_code=400))
    assert not should_fall_back(UsageError("closed"))
    assert should_fall_back(ConnectionRefusedError())
    assert not should_fall_back(ValueError("a bug"))


def test_bad_arguments_say_what_to_pass() -> None:
    one = ScriptedProvider(["x"])
    with pytest.raises(UsageError, match="at least two providers"):
        FallbackProvider([one])
    with pytest.raises(UsageError, match="takes a list of providers"):
        FallbackProvider("openai:gpt-4o-mini")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="provider 1 is a int"):
        FallbackProvider([one, 3])  # type: ignore[list-item]
    with pytest.raises(UsageError, match="exception classes"):
        FallbackProvider([one, one], fall_back_on=(ValueError, "oops"))  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="function of the exception"):
        FallbackProvider([one, one], fall_back_on=3)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="list of them to fall back along"):
        create_agent(provider=3)  # type: ignore[arg-type]


async def test_structured_output_only_when_every_provider_shares_the_way(
    make_provider: ProviderMaker,
) -> None:
    same = FallbackProvider([make_provider("openai"), make_provider("openai")])
    assert same.structured_output == "response_format"
    mixed = FallbackProvider([make_provider("openai"), make_provider("anthropic")])
    assert mixed.structured_output is None
    assert mixed.name == "fallback"
    assert mixed.model == "openai:test-model,anthropic:test-model"


async def test_it_closes_the_providers_it_built_and_leaves_the_others_open(
    model_server: ModelServer,
) -> None:
    passed_in = ScriptedProvider(["still open"])
    built = FallbackProvider(
        [
            ProviderConfig("openai", "m", api_key=API_KEY, base_url=model_server.openai_base_url),
            passed_in,
        ]
    )
    await built.aclose()
    with pytest.raises(UsageError, match="is closed"):
        await collect(built.providers[0])
    assert content(await collect(passed_in)) == "still open"


# --- in an agent run -----------------------------------------------------------------------


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


PLAN = json.dumps(
    {
        "intent": "a product",
        "toolCalls": [{"callId": "call_1", "toolName": "multiply", "arguments": {"a": 12, "b": 7}}],
    }
)


def configs(server: ModelServer, *, retries: int = 0) -> list[ProviderConfig]:
    return [
        ProviderConfig(
            name,
            "test-model",
            api_key=API_KEY,
            base_url=server.base_url_for(name),
            max_retries=retries,
        )
        for name in ("openai", "anthropic")
    ]


async def test_an_agent_with_a_provider_list_answers_through_the_second(
    model_server: ModelServer, sleeps: RecordedSleeps
) -> None:
    # Each model call asks openai first: the plan and the answer both come from anthropic.
    model_server.script(
        Fault(503),
        Reply(PLAN, input_tokens=100, output_tokens=30),
        Fault(503),
        Reply("12 × 7 = 84.", input_tokens=50, output_tokens=5),
    )
    traces = Traces()
    agent = create_agent(
        provider=configs(model_server),
        tools=[multiply],
        retry_policy=RetryPolicy(sleep=sleeps),
        planning_mode="text",
    )
    try:
        async with agent:
            with instrument(agent, traces.provider):
                result = await agent.process(AgentProps("12 times 7?", "t-fallback"))
            metas = await agent.observations.get_observations(
                "t-fallback", types=[ObservationType.LLM_STREAM_METADATA]
            )
            starts = await agent.observations.get_observations(
                "t-fallback", types=[ObservationType.LLM_STREAM_START]
            )
    finally:
        traces.provider.shutdown()

    assert result.metadata.status == "success", result.metadata.error
    assert result.response.content == "12 × 7 = 84."
    assert apis(model_server) == ["openai", "anthropic", "openai", "anthropic"]
    assert [m.content["response_provider"] for m in metas] == ["anthropic", "anthropic"]
    assert {s.content["provider"] for s in starts} == {"fallback"}
    usage = result.metadata.usage
    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (4, 150, 35)
    chats = traces.named("chat")
    assert [s.attributes["gen_ai.provider.name"] for s in chats] == ["anthropic", "anthropic"]


async def test_an_agent_run_whose_stream_broke_after_tokens_fails_as_without_fallback(
    model_server: ModelServer, sleeps: RecordedSleeps
) -> None:
    model_server.script(CutStream(Reply(PLAN), after_chunks=3), Reply(PLAN))
    agent = create_agent(
        provider=configs(model_server),
        tools=[multiply],
        retry_policy=RetryPolicy(sleep=sleeps),
        planning_mode="text",
    )
    tokens: list[StreamEvent] = []
    agent.stream.subscribe(tokens.append)
    async with agent:
        result = await agent.process(AgentProps("12 times 7?", "t-cut"))
    assert result.metadata.status == "error"
    assert "openai" in (result.metadata.error or "").lower()
    assert [e.kind for e in tokens if e.kind == "token"]  # the subscriber had tokens
    assert apis(model_server) == ["openai"]


async def test_a_usage_error_in_a_model_call_is_not_made_a_provider_error(
    make_provider: ProviderMaker,
) -> None:
    provider = make_provider("openai")
    await provider.aclose()  # a run on a closed provider: the caller's mistake, not an outage
    agent = create_agent(provider=provider)
    async with agent:
        result = await agent.process(AgentProps("hi", "t-usage"))
        errors = await agent.observations.get_observations(
            "t-usage", types=[ObservationType.LLM_STREAM_ERROR]
        )
    assert result.metadata.status == "error"
    assert "is closed; create a new provider" in (result.metadata.error or "")
    assert "stream failed" not in (result.metadata.error or "")
    assert "stream failed" not in errors[0].content["error"]


def test_a_fallback_provider_is_a_provider() -> None:
    fallback = FallbackProvider([ScriptedProvider(["a"]), ScriptedProvider(["b"])])
    assert isinstance(fallback, LLMProvider)
