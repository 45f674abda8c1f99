"""Spans from agent runs: the tree, GenAI attributes, timing as the DAG ran, errors, content."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes import server_attributes as server
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import StatusCode

from ecs_core import Runner, World
from pes_agent import (
    AgentProps,
    Approve,
    ConfigurationError,
    InMemoryStorage,
    ObservationManager,
    ObservationType,
    ProviderConfig,
    UsageError,
    create_agent,
    tool,
)
from pes_agent.ecs.components import (
    AgentIdentityComponent,
    ConversationComponent,
    LLMComponent,
    ToolRegistryComponent,
)
from pes_agent.ecs.lifecycle import ErrorHandlingSystem
from pes_agent.ecs.messages import ChatMessage, ToolCall
from pes_agent.ecs.reasoning import ReasoningSystem
from pes_agent.ecs.services import attach_services, close_services
from pes_agent.ecs.tool_execution import ToolExecutionSystem
from pes_agent.otel import instrument, instrument_world
from pes_agent.planning.structured import SUBMIT_PLAN
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider, ScriptedResponse, plan_call, plan_json
from tests.pes_agent.providers.model_server import Call, ModelServer, Reply

from ..helpers import AgentBuilder


class OpenSpans(SpanProcessor):
    """Counts spans started and not yet ended, to prove none is left dangling."""

    def __init__(self) -> None:
        self.open: set[int] = set()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.open.add(span.context.span_id)

    def on_end(self, span: ReadableSpan) -> None:
        assert span.context is not None
        self.open.discard(span.context.span_id)


class Traces:
    """A tracer provider whose finished spans are kept in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.open_spans = OpenSpans()
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.open_spans)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        """Finished spans whose name starts with `prefix`, by start time."""
        found = [s for s in self.spans if s.name.startswith(prefix)]
        return sorted(found, key=lambda s: s.start_time or 0)

    def run(self) -> ReadableSpan:
        (run,) = self.named("invoke_agent")
        return run


@pytest.fixture
def traces() -> Iterator[Traces]:
    traces = Traces()
    yield traces
    traces.provider.shutdown()


plan = plan_json
call = plan_call


@tool
async def slow_echo(text: str) -> str:
    """Echo text after 50 ms."""
    await asyncio.sleep(0.05)
    return text


@tool
def explode(reason: str) -> str:
    """Always fail."""
    raise RuntimeError(reason)


@tool
async def sleepy(seconds: float) -> str:
    """Sleep for `seconds`."""
    await asyncio.sleep(seconds)
    return "rested"


TOOLS = [slow_echo, explode, sleepy]


async def run_once(
    traces: Traces, script: list[Any], query: str = "go", **kwargs: Any
) -> tuple[Any, Any]:
    agent = create_agent(provider=ScriptedProvider(script), tools=TOOLS)
    async with agent:
        with instrument(agent, traces.provider, **kwargs):
            response = await agent.process(AgentProps(query, "t1"))
    return response, agent


def interval(span: ReadableSpan) -> tuple[int, int]:
    assert span.start_time is not None
    assert span.end_time is not None
    return span.start_time, span.end_time


async def test_a_run_is_one_trace_of_planning_tools_and_synthesis_under_the_run_span(
    traces: Traces,
) -> None:
    """The run span is the root; chat planning, the tool calls and chat synthesis are its
    children, in the order they ran, all in one trace."""
    script = [plan(call(1, "slow_echo", text="a"), call(2, "slow_echo", text="b")), "Done."]
    response, _ = await run_once(traces, script)
    assert response.metadata.status == "success"
    run = traces.run()
    assert run.parent is None
    assert run.context is not None
    children = sorted(
        (s for s in traces.spans if s is not run), key=lambda s: (s.start_time or 0, s.name)
    )
    assert [s.name for s in children] == [
        "chat scripted-model",
        "execute_tool slow_echo",
        "execute_tool slow_echo",
        "chat scripted-model",
    ]
    for span in children:
        assert span.parent is not None
        assert span.parent.span_id == run.context.span_id
        assert span.context is not None
        assert span.context.trace_id == run.context.trace_id
        start, end = interval(span)
        assert interval(run)[0] <= start <= end <= interval(run)[1]
    assert [s.attributes["pes_agent.phase"] for s in traces.named("chat")] == [
        "planning",
        "synthesis",
    ]
    assert traces.open_spans.open == set()


async def test_spans_carry_the_genai_attributes(traces: Traces) -> None:
    """Operation names, model, provider, token counts, tool name and call id are set."""
    response, _ = await run_once(traces, [plan(call(1, "slow_echo", text="a")), "Done."])
    run = traces.run()
    assert run.name == "invoke_agent pes-agent"
    assert run.attributes is not None
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.conversation.id"] == "t1"
    assert run.attributes["pes_agent.trace_id"] == response.metadata.trace_id
    assert run.attributes["gen_ai.usage.input_tokens"] == response.metadata.usage.input_tokens
    planning, synthesis = traces.named("chat")
    for chat in (planning, synthesis):
        assert chat.attributes is not None
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "scripted-model"
        assert chat.attributes["gen_ai.provider.name"] == "scripted"
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
    assert planning.attributes is not None
    assert synthesis.attributes is not None
    per_call = [
        planning.attributes["gen_ai.usage.input_tokens"],
        synthesis.attributes["gen_ai.usage.input_tokens"],
    ]
    assert sum(per_call) == response.metadata.usage.input_tokens
    (tool_span,) = traces.named("execute_tool")
    assert tool_span.attributes is not None
    assert tool_span.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool_span.attributes["gen_ai.tool.name"] == "slow_echo"
    assert tool_span.attributes["gen_ai.tool.call.id"] == "call_1"
    assert tool_span.status.status_code is StatusCode.UNSET


async def test_independent_tool_spans_overlap_as_the_calls_ran_side_by_side(
    traces: Traces,
) -> None:
    """Two independent 50 ms calls ran concurrently: their span intervals intersect."""
    script = [plan(call(1, "slow_echo", text="a"), call(2, "slow_echo", text="b")), "Done."]
    await run_once(traces, script)
    first, second = (interval(s) for s in traces.named("execute_tool"))
    assert first[0] < second[1]
    assert second[0] < first[1]


async def test_dependent_tool_spans_follow_each_other(traces: Traces) -> None:
    """A call that uses another's result starts after that call's span has ended."""
    script = [
        plan(call(1, "slow_echo", text="a"), call(2, "slow_echo", text="{step_1_result}!")),
        "Done.",
    ]
    await run_once(traces, script)
    first, second = (interval(s) for s in traces.named("execute_tool"))
    assert first[1] <= second[0]


async def test_a_failing_tool_is_an_error_span_and_the_run_is_not(traces: Traces) -> None:
    """The failed call's span has status ERROR with error.type; a partial run stays unset."""
    script = [plan(call(1, "explode", reason="kaboom"), call(2, "slow_echo", text="b")), "Ok."]
    response, _ = await run_once(traces, script)
    assert response.metadata.status == "partial"
    failed, fine = traces.named("execute_tool")
    assert failed.name == "execute_tool explode"
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes is not None
    assert failed.attributes["error.type"] == "RuntimeError"
    assert fine.status.status_code is StatusCode.UNSET
    run = traces.run()
    assert run.status.status_code is StatusCode.UNSET
    assert run.attributes is not None
    assert run.attributes["pes_agent.run.status"] == "partial"


async def test_a_failing_provider_makes_error_chat_and_run_spans(traces: Traces) -> None:
    """A model call that fails ends its chat span with ERROR, and the run span with ERROR."""

    def broken(request: LLMRequest) -> str:
        raise RuntimeError("model down")

    response, _ = await run_once(traces, [broken])
    assert response.metadata.status == "error"
    (chat,) = traces.named("chat")
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.attributes is not None
    assert chat.attributes["error.type"] == "RuntimeError"
    run = traces.run()
    assert run.status.status_code is StatusCode.ERROR
    assert run.attributes is not None
    assert run.attributes["error.type"] == "planning"
    assert traces.open_spans.open == set()


async def test_a_cancelled_run_leaves_no_span_open(traces: Traces) -> None:
    """Cancelling process() mid-tool ends the tool span and the run span as cancelled."""
    agent = create_agent(
        provider=ScriptedProvider([plan(call(1, "sleepy", seconds=30)), "never"]), tools=TOOLS
    )
    started = asyncio.Event()
    agent.observations.subscribe(lambda o: started.set(), types=[ObservationType.TOOL_CALL])
    async with agent:
        tracing = instrument(agent, traces.provider)
        task = asyncio.create_task(agent.process(AgentProps("go", "t1")))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        tracing.uninstrument()
    assert traces.open_spans.open == set()
    (tool_span,) = traces.named("execute_tool")
    assert tool_span.status.status_code is StatusCode.ERROR
    run = traces.run()
    assert run.status.status_code is StatusCode.ERROR
    assert run.attributes is not None
    assert run.attributes["error.type"] == "cancelled"


async def test_content_stays_off_spans_by_default(traces: Traces) -> None:
    """Without capture_content no question, argument, output or answer is on any span."""
    script = [plan(call(1, "slow_echo", text="secret-argument")), "secret-answer"]
    await run_once(traces, script, query="secret-question")
    for span in traces.spans:
        text = json.dumps(dict(span.attributes or {}))
        assert "secret" not in text, span.name
        assert "gen_ai.tool.call.arguments" not in text
        assert "gen_ai.input.messages" not in text


async def test_content_is_captured_when_asked(traces: Traces) -> None:
    """capture_content=True puts the question and answer on the run span and the arguments
    and result on the tool span."""
    script = [plan(call(1, "slow_echo", text="hello")), "the answer"]
    await run_once(traces, script, query="the question", capture_content=True)
    run = traces.run()
    assert run.attributes is not None
    assert "the question" in str(run.attributes["gen_ai.input.messages"])
    assert "the answer" in str(run.attributes["gen_ai.output.messages"])
    (tool_span,) = traces.named("execute_tool")
    assert tool_span.attributes is not None
    assert json.loads(str(tool_span.attributes["gen_ai.tool.call.arguments"])) == {"text": "hello"}
    assert json.loads(str(tool_span.attributes["gen_ai.tool.call.result"])) == "hello"


async def test_an_api_key_never_reaches_a_span(traces: Traces) -> None:
    """A provider whose key is set and whose server is unreachable fails without the key on
    any span, even with content captured."""
    secret = "sk-test-NEVER-ON-A-SPAN-1234567890"
    config = ProviderConfig(
        "openai", "gpt-4o-mini", api_key=secret, base_url="http://127.0.0.1:9/v1", max_retries=0
    )
    agent = create_agent(provider=config)
    async with agent:
        with instrument(agent, traces.provider, capture_content=True):
            response = await agent.process(AgentProps("hi", "t1"))
    assert response.metadata.status == "error"
    assert traces.named("chat")
    for span in traces.spans:
        dumped = json.dumps(
            [dict(span.attributes or {}), span.status.description]
            + [dict(event.attributes or {}) for event in span.events],
            default=str,
        )
        assert secret not in dumped, span.name


async def test_uninstrument_stops_making_spans(traces: Traces) -> None:
    """After uninstrument() a run makes no span; instrumenting twice is refused."""
    agent = create_agent(provider=ScriptedProvider(["One.", "Two."]), tools=TOOLS)
    async with agent:
        tracing = instrument(agent, traces.provider)
        with pytest.raises(UsageError, match="instrumented already"):
            instrument(agent, traces.provider)
        await agent.process(AgentProps("go", "t1"))
        tracing.uninstrument()
        await agent.process(AgentProps("go", "t2"))
    assert [s.name for s in traces.named("invoke_agent")] == ["invoke_agent pes-agent"]


async def test_without_opentelemetry_the_error_names_the_extra(
    build_agent: AgentBuilder, traces: Traces, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing OpenTelemetry is a ConfigurationError naming pip install 'pes-agent[otel]'."""
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    agent = build_agent(provider=ScriptedProvider(["x"]))
    with pytest.raises(ConfigurationError, match=r"pip install 'pes-agent\[otel\]'"):
        instrument(agent, traces.provider)


async def test_an_ecs_agent_turn_has_the_same_span_shapes(traces: Traces) -> None:
    """A ReAct entity's turn is one invoke_agent span (provider and model named) with its chat
    and execute_tool spans (tool descriptions) as children, ended when the entity answered."""
    world = World()
    attach_services(world, observations=ObservationManager(InMemoryStorage()))
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(ToolExecutionSystem(), priority=5)
    world.register_system(ErrorHandlingSystem(), priority=99)
    model = ScriptedProvider(
        [
            ScriptedResponse(tool_calls=[ToolCall("c1", "slow_echo", {"text": "a"})]),
            ScriptedResponse(tool_calls=[ToolCall("c2", "explode", {"reason": "no"})]),
            "Finished.",
        ]
    )
    entity = world.create_entity(
        LLMComponent(model),
        ConversationComponent([ChatMessage("user", "Echo a.")]),
        ToolRegistryComponent(TOOLS),
        AgentIdentityComponent("ecs-thread"),
    )
    tracing = instrument_world(world, traces.provider, capture_content=True)
    try:
        await Runner().run(world, until=entity, max_ticks=20)
    finally:
        await close_services(world)
    assert traces.open_spans.open == set()
    run = traces.run()
    assert run.context is not None
    assert run.attributes is not None
    assert run.attributes["gen_ai.conversation.id"] == "ecs-thread"
    assert "Finished." in str(run.attributes["gen_ai.output.messages"])
    children = sorted((s for s in traces.spans if s is not run), key=lambda s: s.start_time or 0)
    assert [s.name for s in children] == [
        "chat scripted-model",
        "execute_tool slow_echo",
        "chat scripted-model",
        "execute_tool explode",
        "chat scripted-model",
    ]
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in children)
    assert children[1].attributes is not None
    assert children[1].attributes["gen_ai.tool.call.id"] == "c1"
    assert children[3].status.status_code is StatusCode.ERROR
    assert children[0].attributes is not None
    assert children[0].attributes["pes_agent.phase"] == "reasoning"
    assert children[1].attributes[gen_ai.GEN_AI_TOOL_DESCRIPTION] == "Echo text after 50 ms."
    assert run.attributes[gen_ai.GEN_AI_PROVIDER_NAME] == "scripted"
    assert run.attributes[gen_ai.GEN_AI_REQUEST_MODEL] == "scripted-model"
    (answer,) = json.loads(str(run.attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES]))
    assert answer["finish_reason"] == "stop"
    tracing.uninstrument()
    assert len(world.systems) == 3  # the turn-ending system went with the instrumentation


def test_instrument_world_needs_observations(traces: Traces) -> None:
    """A world without an observation recorder is refused with the attach_services fix."""
    with pytest.raises(UsageError, match="attach_services"):
        instrument_world(World(), traces.provider)


@tool(requires_approval=True)
async def pay(amount: int) -> str:
    """Pay an amount (needs a person's approval)."""
    return f"paid {amount}"


async def test_a_paused_run_and_its_resume_are_two_run_spans_of_one_trace_id(
    traces: Traces,
) -> None:
    """The paused part is a run span with status awaiting_approval and no span for the gated
    call; `resume()` is a second run span (`pes_agent.resumed`) with the same trace id, holding
    the gated call's tool span and the synthesis chat span."""
    script = [plan(call(1, "slow_echo", text="hi"), call(2, "pay", amount=5)), "Paid."]
    agent = create_agent(provider=ScriptedProvider(script), tools=[slow_echo, pay])
    async with agent:
        with instrument(agent, traces.provider):
            paused = await agent.process(AgentProps("pay 5", "t1"))
            assert paused.metadata.status == "awaiting_approval"
            assert [s.name for s in traces.named("execute_tool")] == ["execute_tool slow_echo"]
            done = await agent.resume("t1", paused.metadata.trace_id, {"call_2": Approve()})
    assert done.metadata.status == "success"
    first, second = traces.named("invoke_agent")
    assert first.attributes is not None
    assert second.attributes is not None
    assert first.attributes["pes_agent.run.status"] == "awaiting_approval"
    assert first.status.status_code is not StatusCode.ERROR
    assert second.attributes["pes_agent.resumed"] is True
    assert second.attributes["pes_agent.run.status"] == "success"
    assert first.attributes["pes_agent.trace_id"] == second.attributes["pes_agent.trace_id"]
    assert first.attributes["pes_agent.trace_id"] == paused.metadata.trace_id
    assert interval(first)[1] <= interval(second)[0]
    assert second.context is not None
    pay_span = traces.named("execute_tool pay")[0]
    assert pay_span.parent is not None
    assert pay_span.parent.span_id == second.context.span_id
    assert (
        interval(second)[0] <= interval(pay_span)[0] <= interval(pay_span)[1] <= interval(second)[1]
    )
    chats = [
        s for s in traces.named("chat") if s.parent and s.parent.span_id == second.context.span_id
    ]
    assert [s.attributes["pes_agent.phase"] for s in chats if s.attributes] == ["synthesis"]
    assert traces.open_spans.open == set()


@tool
async def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


#: The model each API is asked for, and the dated model its answer names.
MODELS = {
    "openai": ("gpt-4o-mini", "gpt-4o-mini-2024-07-18"),
    "anthropic": ("claude-3-5-haiku-latest", "claude-3-5-haiku-20241022"),
}


def weather_plan(api: str, answered_by: str) -> Reply:
    """A structured plan as each API sends it: JSON text (OpenAI), a forced submit_plan call
    (Anthropic); 64 of its 100 input tokens read from the provider's cache."""
    planned = {
        "intent": "weather",
        "plan": "1. look it up",
        "toolCalls": [call(1, "get_weather", city="Paris")],
    }
    usage: dict[str, Any] = {"input_tokens": 100, "cache_read_tokens": 64, "model": answered_by}
    if api == "openai":
        return Reply(json.dumps(planned), **usage)
    return Reply(tool_calls=(Call(SUBMIT_PLAN, planned),), **usage)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_a_run_on_a_real_sdk_carries_the_genai_conventions(traces: Traces, api: str) -> None:
    """Against the real SDK and a server answering a dated model: the run span names provider
    and requested model; chat spans the request's parameters, server, JSON output for the
    plan, and the answer's own model, id, finish reason and cache reads; the tool span its
    description; the captured answer its finish reason."""
    requested, dated = MODELS[api]
    async with ModelServer() as model_server:
        model_server.script(
            weather_plan(api, dated), Reply("Sunny in Paris.", model=dated, input_tokens=30)
        )
        config = ProviderConfig(
            api, requested, api_key="sk-test", base_url=model_server.base_url_for(api)
        )
        agent = create_agent(provider=config, tools=[get_weather], temperature=0.2, max_tokens=512)
        async with agent:
            with instrument(agent, traces.provider, capture_content=True):
                response = await agent.process(AgentProps("Weather in Paris?", "t1"))
        port = int(model_server.url.rsplit(":", 1)[1])
    assert response.metadata.status == "success", response.metadata.error

    run = traces.run()
    assert run.attributes is not None
    assert run.attributes[gen_ai.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert run.attributes[gen_ai.GEN_AI_PROVIDER_NAME] == api
    assert run.attributes[gen_ai.GEN_AI_REQUEST_MODEL] == requested
    (answer,) = json.loads(str(run.attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES]))
    assert answer == {
        "role": "assistant",
        "parts": [{"type": "text", "content": "Sunny in Paris."}],
        "finish_reason": "stop",
    }

    planning, synthesis = traces.named("chat")
    assert planning.name == f"chat {requested}"
    responses = []
    for chat in (planning, synthesis):
        assert chat.attributes is not None
        assert chat.attributes[gen_ai.GEN_AI_PROVIDER_NAME] == api
        assert chat.attributes[gen_ai.GEN_AI_REQUEST_MODEL] == requested
        assert chat.attributes[gen_ai.GEN_AI_RESPONSE_MODEL] == dated
        assert chat.attributes[gen_ai.GEN_AI_REQUEST_TEMPERATURE] == 0.2
        assert chat.attributes[gen_ai.GEN_AI_REQUEST_MAX_TOKENS] == 512
        assert chat.attributes[server.SERVER_ADDRESS] == "127.0.0.1"
        assert chat.attributes[server.SERVER_PORT] == port
        responses.append(str(chat.attributes[gen_ai.GEN_AI_RESPONSE_ID]))
    assert len(set(responses)) == 2
    assert all(r.startswith("chatcmpl-" if api == "openai" else "msg_") for r in responses)
    assert planning.attributes is not None
    assert synthesis.attributes is not None
    assert planning.attributes[gen_ai.GEN_AI_OUTPUT_TYPE] == "json"
    assert gen_ai.GEN_AI_OUTPUT_TYPE not in synthesis.attributes
    assert planning.attributes[gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 64
    assert gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS not in synthesis.attributes
    assert synthesis.attributes[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] == (
        ("stop",) if api == "openai" else ("end_turn",)
    )

    (tool_span,) = traces.named("execute_tool")
    assert tool_span.attributes is not None
    assert tool_span.attributes[gen_ai.GEN_AI_TOOL_NAME] == "get_weather"
    assert tool_span.attributes[gen_ai.GEN_AI_TOOL_DESCRIPTION] == "Current weather for a city."


async def test_a_failed_tool_has_an_error_status_and_no_result(traces: Traces) -> None:
    """With content captured, a failing tool's span carries error.type and an ERROR status,
    never the error text as its gen_ai.tool.call.result."""
    script = [plan(call(1, "explode", reason="kaboom")), "It failed."]
    await run_once(traces, script, capture_content=True)
    (failed,) = traces.named("execute_tool")
    assert failed.attributes is not None
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes[error_attributes.ERROR_TYPE] == "RuntimeError"
    assert gen_ai.GEN_AI_TOOL_CALL_RESULT not in failed.attributes
    assert failed.attributes[gen_ai.GEN_AI_TOOL_DESCRIPTION] == "Always fail."
