"""ScriptedProvider streams scripted answers like a real provider and fails clearly when done."""

from __future__ import annotations

import json

import pytest

from pes_agent import (
    AgentProps,
    OutputParser,
    PlanningContext,
    PlanningOutput,
    ScriptExhaustedError,
    UsageError,
)
from pes_agent.protocols import LLMResponse
from pes_agent.providers.base import (
    LLMProvider,
    LLMRequest,
    PromptMessage,
    ProviderEvent,
    StreamMetadata,
    ThinkingBlock,
    TokenDelta,
    ToolCallEvent,
)
from pes_agent.testing import (
    REPEAT_KEEPS_REQUESTS,
    ScriptedProvider,
    ScriptedResponse,
    plan_call,
    plan_json,
)
from pes_agent.tools.base import ToolSchema
from pes_agent.tools.calls import ToolCall
from pes_agent.usage import Usage

from ..helpers import AgentBuilder


def _request(text: str = "hello there", phase: str = "planning") -> LLMRequest:
    return LLMRequest(
        messages=(PromptMessage("user", text),),
        phase=phase,  # type: ignore[arg-type]
        thread_id="t",
        trace_id="r",
    )


async def _collect(provider: ScriptedProvider, request: LLMRequest) -> list[ProviderEvent]:
    return [event async for event in provider.stream(request)]


def test_scripted_provider_satisfies_the_provider_protocol() -> None:
    """A ScriptedProvider is an LLMProvider, usable wherever a real one is."""
    assert isinstance(ScriptedProvider(["x"]), LLMProvider)


async def test_text_streams_in_chunks_then_metadata_with_usage() -> None:
    """The response arrives in chunk_size pieces followed by one metadata event with usage."""
    events = await _collect(ScriptedProvider(["abcdefghij"], chunk_size=4), _request())
    assert [e.text for e in events if isinstance(e, TokenDelta)] == ["abcd", "efgh", "ij"]
    meta = events[-1]
    assert isinstance(meta, StreamMetadata)
    assert meta.usage.input_tokens == 3
    assert meta.usage.output_tokens == 3
    assert meta.usage.total_tokens == 6
    assert meta.stop_reason == "stop"
    assert meta.time_to_first_token_ms is not None


async def test_estimated_usage_rounds_each_message_up_to_whole_tokens() -> None:
    """Each prompt message counts ceil(characters / 4) tokens (an empty one none), and so
    does the answer: 0, 1, 4 and 5 characters are 0 + 1 + 1 + 2 tokens in."""
    request = LLMRequest(
        messages=tuple(PromptMessage("user", "x" * size) for size in (0, 1, 4, 5)),
        phase="planning",
        thread_id="t",
        trace_id="r",
    )
    for answer, output_tokens in (("", 0), ("abcde", 2), ("abcdefgh", 2)):
        meta = (await _collect(ScriptedProvider([answer]), request))[-1]
        assert isinstance(meta, StreamMetadata)
        assert (meta.usage.input_tokens, meta.usage.output_tokens) == (4, output_tokens)
        assert meta.usage.total_tokens == 4 + output_tokens


async def test_thinking_blocks_stream_before_the_text_and_count_as_reasoning() -> None:
    """Each thinking block streams as thinking tokens and ends with one ThinkingBlock event."""
    response = ScriptedResponse("answer", thinking=["hmm", "aha"])
    events = await _collect(ScriptedProvider([response], chunk_size=100), _request())
    assert events[:4] == [
        TokenDelta("hmm", "thinking"),
        ThinkingBlock("hmm"),
        TokenDelta("aha", "thinking"),
        ThinkingBlock("aha"),
    ]
    assert events[4] == TokenDelta("answer")
    meta = events[-1]
    assert isinstance(meta, StreamMetadata)
    assert meta.usage.reasoning_tokens == 2


async def test_function_responses_see_the_request() -> None:
    """A callable entry is called with the request and its answer is streamed."""
    provider = ScriptedProvider([lambda r: f"phase={r.phase}"])
    events = await _collect(provider, _request(phase="synthesis"))
    assert events[0] == TokenDelta("phase=synthesis")
    assert provider.calls == 1
    assert provider.requests[0].phase == "synthesis"


async def test_explicit_usage_is_reported_unchanged() -> None:
    """A ScriptedResponse with usage reports exactly that usage."""
    usage = Usage(input_tokens=7, output_tokens=5, total_tokens=12, requests=1)
    events = await _collect(ScriptedProvider([ScriptedResponse("x", usage=usage)]), _request())
    meta = events[-1]
    assert isinstance(meta, StreamMetadata)
    assert meta.usage == usage


async def test_running_out_of_responses_is_a_clear_error() -> None:
    """The call after the last response raises ScriptExhaustedError saying what to do."""
    provider = ScriptedProvider(["only one"])
    await _collect(provider, _request())
    with pytest.raises(ScriptExhaustedError, match="ran out of responses after 1 call"):
        await _collect(provider, _request())


async def test_repeat_cycles_the_script() -> None:
    """With repeat=True the script starts over instead of running out."""
    provider = ScriptedProvider(["a", "b"], repeat=True)
    texts = []
    for _ in range(3):
        events = await _collect(provider, _request())
        texts.append(events[0].text)  # type: ignore[union-attr]
    assert texts == ["a", "b", "a"]


async def _call_times(provider: ScriptedProvider, count: int) -> list[str]:
    """Make `count` calls, each with a distinct prompt, and return the prompts in order."""
    prompts = [f"prompt {i}" for i in range(count)]
    for prompt in prompts:
        await _collect(provider, _request(prompt))
    return prompts


async def test_repeat_keeps_only_the_latest_requests_by_default() -> None:
    """With repeat=True, requests holds the latest REPEAT_KEEPS_REQUESTS, oldest first."""
    provider = ScriptedProvider(["a"], repeat=True)
    prompts = await _call_times(provider, REPEAT_KEEPS_REQUESTS + 5)
    kept = [r.messages[0].content for r in provider.requests]
    assert kept == prompts[5:]


async def test_calls_counts_requests_the_window_dropped() -> None:
    """calls counts every model call, also those no longer kept in requests."""
    provider = ScriptedProvider(["a"], repeat=True, keep_requests=2)
    await _call_times(provider, 5)
    assert (provider.calls, len(provider.requests)) == (5, 2)


async def test_keep_requests_sets_the_window() -> None:
    """keep_requests=N keeps the latest N requests, in the order they came."""
    provider = ScriptedProvider(["a"], repeat=True, keep_requests=3)
    prompts = await _call_times(provider, 7)
    assert [r.messages[0].content for r in provider.requests] == prompts[-3:]


async def test_keep_requests_none_keeps_every_request_of_a_repeating_script() -> None:
    """keep_requests=None keeps every request even when the script repeats."""
    provider = ScriptedProvider(["a"], repeat=True, keep_requests=None)
    prompts = await _call_times(provider, REPEAT_KEEPS_REQUESTS + 5)
    assert [r.messages[0].content for r in provider.requests] == prompts


async def test_keep_requests_zero_keeps_none() -> None:
    """keep_requests=0 keeps no request while still answering and counting calls."""
    provider = ScriptedProvider(["a"], repeat=True, keep_requests=0)
    events = await _collect(provider, _request())
    assert events[0] == TokenDelta("a")
    assert (provider.calls, provider.requests) == (1, [])


async def test_a_finite_script_keeps_every_request_by_default() -> None:
    """Without repeat, requests keeps all of them, as many as the script is long."""
    count = REPEAT_KEEPS_REQUESTS + 5
    provider = ScriptedProvider(["a"] * count)
    prompts = await _call_times(provider, count)
    assert [r.messages[0].content for r in provider.requests] == prompts


async def test_a_finite_script_keeps_a_window_when_asked() -> None:
    """keep_requests applies to a finite script too."""
    provider = ScriptedProvider(["a", "b", "c"], keep_requests=1)
    prompts = await _call_times(provider, 3)
    assert [r.messages[0].content for r in provider.requests] == prompts[-1:]
    assert provider.calls == 3


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("just a string",), {}, "list of responses"),
        ((["x"],), {"chunk_size": 0}, "chunk_size"),
        ((["x"],), {"latency_s": -1}, "latency_s"),
        ((["x"],), {"keep_requests": -1}, r"keep_requests must be an int >= 0, None .* 'auto'"),
        ((["x"],), {"keep_requests": "all"}, r"keep_requests must be .*keep_requests=100"),
        ((["x"],), {"keep_requests": 2.5}, "keep_requests must be an int"),
        ((["x"],), {"keep_requests": True}, "keep_requests must be an int"),
    ],
)
def test_bad_arguments_raise_usage_errors(
    args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    """A string instead of a list, a non-positive chunk size, a negative latency or a
    request window that is not a count is refused at once, saying what to pass."""
    with pytest.raises(UsageError, match=message):
        ScriptedProvider(*args, **kwargs)  # type: ignore[arg-type]


async def test_a_function_returning_the_wrong_type_is_a_usage_error() -> None:
    """A scripted function must return text or a ScriptedResponse."""
    provider = ScriptedProvider([lambda r: 42])  # type: ignore[list-item, return-value]
    with pytest.raises(UsageError, match="must return a str or ScriptedResponse"):
        await _collect(provider, _request())


async def test_tool_calls_stream_after_the_text_with_stop_reason_tool_calls() -> None:
    """Scripted tool calls come as ToolCallEvents after the text; the stop reason says so."""
    calls = [ToolCall("call_1", "add", {"a": 1, "b": 2}), ToolCall("call_2", "clock")]
    response = ScriptedResponse("Adding.", tool_calls=calls)
    events = await _collect(ScriptedProvider([response], chunk_size=4), _request())

    assert [type(e).__name__ for e in events] == [
        "TokenDelta",
        "TokenDelta",
        "ToolCallEvent",
        "ToolCallEvent",
        "StreamMetadata",
    ]
    assert events[2:4] == [ToolCallEvent(calls[0]), ToolCallEvent(calls[1])]
    meta = events[-1]
    assert isinstance(meta, StreamMetadata)
    assert meta.stop_reason == "tool_calls"
    assert meta.usage.output_tokens > 2, "the calls count as output, not only the text"


async def test_an_explicit_stop_reason_wins_over_tool_calls() -> None:
    """A scripted stop_reason is reported as given, even with tool calls."""
    response = ScriptedResponse(tool_calls=[ToolCall("c", "clock")], stop_reason="length")
    events = await _collect(ScriptedProvider([response]), _request())
    meta = events[-1]
    assert isinstance(meta, StreamMetadata)
    assert meta.stop_reason == "length"


async def test_scripted_tool_calls_are_fresh_copies_each_time() -> None:
    """Changing a streamed call's arguments leaves the script as written for the next call."""
    script = ScriptedResponse(tool_calls=[ToolCall("c", "add", {"nums": [1, 2]})])
    provider = ScriptedProvider([script], repeat=True)
    first = [e for e in await _collect(provider, _request()) if isinstance(e, ToolCallEvent)]
    first[0].call.arguments["nums"].append(3)
    second = [e for e in await _collect(provider, _request()) if isinstance(e, ToolCallEvent)]
    assert second[0].call.arguments == {"nums": [1, 2]}


class _NativePlanner:
    """Makes one planning call offering the run's tools and keeps what the caller returns."""

    def __init__(self) -> None:
        self.response: LLMResponse | None = None

    async def plan(self, ctx: PlanningContext) -> PlanningOutput:
        self.response = await ctx.llm(
            [PromptMessage("user", ctx.props.query)],
            phase="planning",
            tools=[ToolSchema(name="clock", description="The time.")],
            tool_choice="clock",
        )
        return PlanningOutput(intent="tell the time", tool_calls=[])


async def test_the_model_caller_returns_scripted_tool_calls(build_agent: AgentBuilder) -> None:
    """A planner's model call gets the scripted calls in LLMResponse.tool_calls, text apart."""
    call = ToolCall("call_7", "clock", {"zone": "UTC"})
    model = ScriptedProvider([ScriptedResponse("One moment.", tool_calls=[call]), "It is noon."])
    planner = _NativePlanner()
    agent = build_agent(provider=model, planner=planner)
    result = await agent.process(AgentProps("What time is it?", "t"))

    assert result.metadata.status == "success"
    assert planner.response is not None
    assert planner.response.text == "One moment."
    assert planner.response.tool_calls == (ToolCallEvent(call),)
    assert planner.response.metadata is not None
    assert planner.response.metadata.stop_reason == "tool_calls"
    request = model.requests[0]
    assert [tool.name for tool in request.tools] == ["clock"]
    assert request.tool_choice == "clock"


def test_plan_json_writes_a_plan_the_parser_reads_back() -> None:
    """A plan built with plan_json and plan_call parses into the same calls, title and intent."""
    text = plan_json(
        plan_call(1, "add", a=3, b=4),
        plan_call("second", "add", a="{step_1_result}", b=1),
        intent="add",
        title="Sums",
    )
    parsed = OutputParser().parse_planning_output(text)
    assert parsed.errors == []
    assert (parsed.title, parsed.intent, parsed.plan) == ("Sums", "add", "1. do it")
    assert [(c.call_id, c.tool_name, c.arguments) for c in parsed.tool_calls or []] == [
        ("call_1", "add", {"a": 3, "b": 4}),
        ("second", "add", {"a": "{step_1_result}", "b": 1}),
    ]


def test_plan_json_leaves_the_title_out_unless_given() -> None:
    """Without a title the plan has none, so a run records no TITLE observation."""
    assert OutputParser().parse_planning_output(plan_json()).title is None
    assert json.loads(plan_json()) == {"intent": "help", "plan": "1. do it", "toolCalls": []}
