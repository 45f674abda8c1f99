"""OpenTelemetry traces of agent runs, following the GenAI semantic conventions.

```python
from opentelemetry.sdk.trace import TracerProvider
from pes_agent.otel import instrument

tracing = instrument(agent, provider)       # None: the global tracer provider
await agent.process(AgentProps("question", "thread-1"))
tracing.uninstrument()                      # or `with instrument(...):`
```

Needs `pip install 'pes-agent[otel]'` (the OpenTelemetry API and SDK); add an exporter of your
choice (console, OTLP to Jaeger or Tempo, ...). The spans come from the agent's observation
stream, with the observations' own timestamps as their start and end times, so they show the
run exactly as it went (tool calls that ran side by side overlap):

- `invoke_agent {agent_name}` (INTERNAL), from `process()` / `resume()` entry to return:
  `gen_ai.operation.name="invoke_agent"`, `gen_ai.agent.name`, `gen_ai.conversation.id` (the
  thread), `gen_ai.provider.name` and `gen_ai.request.model` (of the run's first model call;
  `gen_ai.provider.name="_OTHER"` for a run that made none), `gen_ai.usage.input_tokens` /
  `output_tokens`, `pes_agent.trace_id`, `pes_agent.run.status`;
- `chat {model}` (CLIENT), LLM_STREAM_START to LLM_STREAM_END or a final LLM_STREAM_ERROR:
  `gen_ai.operation.name="chat"`, `gen_ai.provider.name`, `gen_ai.request.model`,
  `gen_ai.request.temperature` / `max_tokens` (when set), `gen_ai.output.type="json"` (an
  answer held to a schema: structured planning), `server.address` / `server.port` (SDK
  providers), then from the answer `gen_ai.response.model` (the model the server names, e.g.
  `gpt-4o-mini-2024-07-18`) and `gen_ai.provider.name` of the provider that answered (a
  `FallbackProvider`'s member), `gen_ai.response.id`, `gen_ai.response.finish_reasons`,
  `gen_ai.usage.input_tokens` / `output_tokens` and, when the provider reports them,
  `gen_ai.usage.cache_read.input_tokens` / `cache_creation.input_tokens`; `pes_agent.phase`;
- `execute_tool {tool}` (INTERNAL), TOOL_CALL to TOOL_EXECUTION: `gen_ai.operation.name=
  "execute_tool"`, `gen_ai.tool.name`, `gen_ai.tool.description` (a registered tool's),
  `gen_ai.tool.call.id`, `gen_ai.tool.type`, `pes_agent.tool.kind` (`"tool"` or `"language"`
  for a language step).

Model and tool spans are children of their run's span; the run span is the current span while the
run goes on, so spans your tools open join the same trace. On a durable engine
(`pes_agent.durable`), instrument the workers' agent: a run's spans are made where its steps run,
and a worker taking over the run of a dead one emits the spans of the steps it makes, not again
those the dead one had finished (those it had under way, which run again, once). A failure is span
status ERROR with `error.type` (the exception class, a run's failed phase, `"cancelled"`), a
provider's retry after a broken stream an event on its chat span. Message content goes on spans
only with `capture_content=True`: the question and answer on the run span (`gen_ai.input.messages`,
`gen_ai.output.messages`, with the answering call's `finish_reason`), the arguments and result on
tool spans (`gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`: a failed call has no result,
only its error status). Credentials never do: nothing of a provider's configuration is read.

Every span ends: when a run fails or is cancelled, what it left open ends with it (status
ERROR, `error.type="cancelled"` or `"unfinished"`); `uninstrument()` ends what is still open.

ECS agents: `instrument_world(world, ...)` after `attach_services(world, observations=...)`
gives each entity turn the same spans. A turn starts at the entity's first model or tool
observation and ends, in the tick it finished, when the entity answered (its last message is
an assistant message without tool calls and no plan step is left), became terminal (status
ERROR for `reasoning_failed`, `provider_exhausted`, `user_input_timeout`) or was deleted.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from ecs_core import EntityId, TerminalComponent, World
from pes_agent.ecs._tools import tools_of
from pes_agent.ecs.components import (
    ConversationComponent,
    LLMComponent,
    PendingToolCallsComponent,
    PlanComponent,
    ToolRegistryComponent,
)
from pes_agent.ecs.services import AgentServicesComponent, identity_of
from pes_agent.errors import ConfigurationError, UsageError
from pes_agent.observing.types import Observation, ObservationType, new_id
from pes_agent.run import AgentFinalResponse, AgentProps

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from pes_agent.approvals.models import Decision
    from pes_agent.core import AgentCore
    from pes_agent.durable.effects import RunEffects

__all__ = ["Instrumentation", "instrument", "instrument_world"]

_EXTRA: Final = "pip install 'pes-agent[otel]'"
_SCOPE: Final = "pes_agent"
#: Priority of the system that ends ECS turns: after every agent system of a tick.
TURN_END_PRIORITY: Final = 1000
#: Terminal reasons of ECS entities that mean the turn failed.
_FAILED_REASONS: Final = frozenset({"reasoning_failed", "provider_exhausted", "user_input_timeout"})
_WATCHED: Final = (
    ObservationType.LLM_STREAM_START,
    ObservationType.LLM_STREAM_METADATA,
    ObservationType.LLM_STREAM_END,
    ObservationType.LLM_STREAM_ERROR,
    ObservationType.TOOL_CALL,
    ObservationType.TOOL_EXECUTION,
    ObservationType.ERROR,
)
#: Providers' stop reasons in the conventions' finish-reason words (others are kept as sent).
_FINISH_REASONS: Final = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_calls": "tool_call",
    "tool_use": "tool_call",
    "refusal": "content_filter",
}
#: What names a tool's description: (thread id, trace id) of the turn, tool name.
_Describe = Callable[[tuple[str, str], str], str | None]
_EXCEPTION_NAME = re.compile(r"\b([A-Z][A-Za-z0-9]*(?:Error|Exception|Exhausted))\b")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
#: A call's start observation keys, as the chat span's request attributes.
_REQUEST_ATTRIBUTES: Final = (
    ("temperature", "gen_ai.request.temperature"),
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("output_type", "gen_ai.output.type"),
    ("server_address", "server.address"),
    ("server_port", "server.port"),
)


def _require_otel() -> Any:
    """The `opentelemetry.trace` module, or a `ConfigurationError` naming the extra."""
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise ConfigurationError(f"pes_agent.otel needs OpenTelemetry: {_EXTRA}") from exc
    return trace


def _ns(timestamp: datetime) -> int:
    """An observation's timestamp in nanoseconds since the epoch, exact to the microsecond."""
    if timestamp.tzinfo is None:
        timestamp = timestamp.replace(tzinfo=UTC)
    delta = timestamp - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _error_type(message: object, default: str) -> str:
    """A low-cardinality `error.type`: the exception class named in `message`, else `default`."""
    found = _EXCEPTION_NAME.search(message) if isinstance(message, str) else None
    return found.group(1) if found else default


def _text_messages(role: str, text: str) -> str:
    return _json([{"role": role, "parts": [{"type": "text", "content": text}]}])


def _answer_messages(text: str, stop_reason: str | None) -> str:
    """`gen_ai.output.messages` for an answer: one assistant message with its finish reason."""
    finish = _FINISH_REASONS.get(stop_reason, stop_reason) if stop_reason else "stop"
    parts = [{"type": "text", "content": text}]
    return _json([{"role": "assistant", "parts": parts, "finish_reason": finish}])


def _model_attributes(content: Mapping[str, Any]) -> dict[str, Any]:
    """`gen_ai.provider.name` and `gen_ai.request.model` from a call's start observation."""
    return {
        "gen_ai.provider.name": str(content.get("provider") or "unknown"),
        "gen_ai.request.model": str(content.get("model") or "unknown"),
    }


class _Turn:
    """The open spans of one run (or ECS entity turn)."""

    __slots__ = (
        "chats",
        "context",
        "error_phase",
        "last_ns",
        "model_named",
        "span",
        "stop_reason",
        "tools",
    )

    def __init__(self, span: Span, context: Context, start_ns: int, *, model_named: bool) -> None:
        self.span = span
        self.context = context
        self.chats: dict[object, Span] = {}
        self.tools: dict[str, Span] = {}
        self.error_phase: str | None = None
        self.last_ns = start_ns
        # Whether the run span has its provider and model (from the first model call).
        self.model_named = model_named
        # The latest model call's stop reason: the answer's finish reason.
        self.stop_reason: str | None = None


class _Tracer:
    """Turns observations into spans, one `_Turn` per (thread, trace)."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None,
        *,
        capture_content: bool,
        agent_name: str,
        lazy_turns: bool,
        describe: _Describe,
    ) -> None:
        trace = _require_otel()
        from pes_agent import __version__

        self._trace = trace
        self.tracer: Tracer = trace.get_tracer(_SCOPE, __version__, tracer_provider=tracer_provider)
        self.capture_content = capture_content
        self.agent_name = agent_name
        # ECS turns open on their first observation; PES runs only when process() starts.
        self._lazy = lazy_turns
        self._describe = describe
        self.turns: dict[tuple[str, str], _Turn] = {}

    # -- turns -----------------------------------------------------------------------------

    def open(
        self,
        thread_id: str,
        trace_id: str,
        start_ns: int,
        attributes: Mapping[str, Any] | None = None,
    ) -> _Turn:
        """Start the run span of (thread_id, trace_id) at `start_ns`."""
        trace = self._trace
        attributes = {k: v for k, v in (attributes or {}).items() if v is not None}
        span = self.tracer.start_span(
            f"invoke_agent {self.agent_name}",
            kind=trace.SpanKind.INTERNAL,
            start_time=start_ns,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self.agent_name,
                "gen_ai.conversation.id": thread_id,
                "pes_agent.trace_id": trace_id,
                **attributes,
            },
        )
        named = "gen_ai.provider.name" in attributes
        turn = _Turn(span, trace.set_span_in_context(span), start_ns, model_named=named)
        self.turns[(thread_id, trace_id)] = turn
        return turn

    def close(
        self,
        key: tuple[str, str],
        end_ns: int,
        *,
        error_type: str | None = None,
        description: str | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> None:
        """End the run span of `key` and whatever it left open (as failed: `error_type` or
        ``"unfinished"``)."""
        turn = self.turns.pop(key, None)
        if turn is None:
            return
        left_open = [*turn.chats.values(), *turn.tools.values()]
        turn.chats.clear()
        turn.tools.clear()
        for span in left_open:
            self._fail(span, error_type or "unfinished", "the run ended before this did")
            span.end(end_time=end_ns)
        if attributes:
            turn.span.set_attributes(dict(attributes))
        if not turn.model_named:
            # Required by the conventions; a run that made no model call has no provider.
            turn.span.set_attribute("gen_ai.provider.name", "_OTHER")
        if error_type is not None:
            self._fail(turn.span, error_type, description)
        turn.span.end(end_time=max(end_ns, turn.last_ns))

    def close_all(self) -> None:
        """End every open turn now (instrumentation removed)."""
        now = time.time_ns()
        for key in list(self.turns):
            self.close(key, now, error_type="unfinished", description="tracing was removed")

    def _fail(self, span: Span, error_type: str, description: str | None) -> None:
        trace = self._trace
        span.set_attribute("error.type", error_type)
        span.set_status(trace.Status(trace.StatusCode.ERROR, description))

    # -- observations ----------------------------------------------------------------------

    def on_observation(self, observation: Observation) -> None:
        """Open, annotate or end the span an observation is about."""
        key = (observation.thread_id, observation.trace_id)
        turn = self.turns.get(key)
        ns = _ns(observation.timestamp)
        if turn is None:
            if not self._lazy or observation.type is ObservationType.ERROR:
                return
            started = observation.type is ObservationType.LLM_STREAM_START
            turn = self.open(*key, ns, _model_attributes(observation.content) if started else None)
        turn.last_ns = max(turn.last_ns, ns)
        kind = observation.type
        content = observation.content
        if kind is ObservationType.TOOL_CALL:
            self._tool_started(turn, observation, ns)
        elif kind is ObservationType.TOOL_EXECUTION:
            self._tool_ended(turn, observation, ns)
        elif kind is ObservationType.ERROR:
            phase = content.get("phase")
            turn.error_phase = phase if isinstance(phase, str) else "error"
        else:
            self._chat(turn, kind, content, ns)

    def _chat(self, turn: _Turn, kind: ObservationType, content: dict[str, Any], ns: int) -> None:
        # Language steps stream side by side: "llmCall" pairs each start with its end.
        call = content.get("llmCall", content.get("phase"))
        span = turn.chats.get(call)
        if kind is ObservationType.LLM_STREAM_START:
            if span is None:  # else a restart after a broken stream: the same call goes on
                turn.chats[call] = self._chat_span(turn, content, ns)
            if not turn.model_named:
                turn.model_named = True
                turn.span.set_attributes(_model_attributes(content))
            return
        if span is None:
            return
        if kind is ObservationType.LLM_STREAM_METADATA:
            usage = content.get("usage") or {}
            attributes: dict[str, Any] = {
                "gen_ai.usage.input_tokens": usage.get("input_tokens", 0),
                "gen_ai.usage.output_tokens": usage.get("output_tokens", 0),
            }
            # Zero is also what a provider that reports no caching gives: only counts go on.
            if usage.get("cache_read_tokens"):
                attributes["gen_ai.usage.cache_read.input_tokens"] = usage["cache_read_tokens"]
            if usage.get("cache_write_tokens"):
                attributes["gen_ai.usage.cache_creation.input_tokens"] = usage["cache_write_tokens"]
            if content.get("response_model"):
                attributes["gen_ai.response.model"] = str(content["response_model"])
            if content.get("response_provider"):
                # A fallback provider asked: the span names the one that answered.
                attributes["gen_ai.provider.name"] = str(content["response_provider"])
            if content.get("response_id"):
                attributes["gen_ai.response.id"] = str(content["response_id"])
            stop_reason = content.get("stop_reason")
            if stop_reason:
                turn.stop_reason = str(stop_reason)
                attributes["gen_ai.response.finish_reasons"] = [str(stop_reason)]
            span.set_attributes(attributes)
        elif kind is ObservationType.LLM_STREAM_END:
            del turn.chats[call]
            span.end(end_time=ns)
        elif content.get("retrying"):
            span.add_event(
                "pes_agent.stream_retry",
                {
                    "error.type": _error_type(content.get("error"), "stream_interrupted"),
                    "pes_agent.attempt": int(content.get("attempt") or 0),
                },
                timestamp=ns,
            )
        else:
            del turn.chats[call]
            error = content.get("error")
            self._fail(span, _error_type(error, "provider_error"), str(error or ""))
            span.end(end_time=ns)

    def _chat_span(self, turn: _Turn, content: dict[str, Any], ns: int) -> Span:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            **_model_attributes(content),
            "pes_agent.phase": str(content.get("phase") or ""),
        }
        for key, name in _REQUEST_ATTRIBUTES:
            if content.get(key) is not None:
                attributes[name] = content[key]
        return self.tracer.start_span(
            f"chat {attributes['gen_ai.request.model']}",
            context=turn.context,
            kind=self._trace.SpanKind.CLIENT,
            start_time=ns,
            attributes=attributes,
        )

    def _tool_started(self, turn: _Turn, observation: Observation, ns: int) -> None:
        content = observation.content
        name = str(content.get("toolName") or "unknown")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": str(content.get("callId") or ""),
            "gen_ai.tool.type": "function",
            "pes_agent.tool.kind": str(content.get("kind") or "tool"),
        }
        description = self._describe((observation.thread_id, observation.trace_id), name)
        if description:
            attributes["gen_ai.tool.description"] = description
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = _json(content.get("arguments"))
        turn.tools[observation.id] = self.tracer.start_span(
            f"execute_tool {name}",
            context=turn.context,
            kind=self._trace.SpanKind.INTERNAL,
            start_time=ns,
            attributes=attributes,
        )

    def _tool_ended(self, turn: _Turn, observation: Observation, ns: int) -> None:
        content = observation.content
        span = turn.tools.pop(observation.parent_id, None) if observation.parent_id else None
        if span is None:
            # Refused before it started (denied, not allowed): only its end was recorded.
            self._tool_started(turn, observation, ns)
            span = turn.tools.pop(observation.id)
        if content.get("status") == "success":
            if self.capture_content:
                span.set_attribute("gen_ai.tool.call.result", _json(content.get("output")))
        else:
            error = content.get("error")
            self._fail(span, _error_type(error, "tool_error"), str(error or ""))
        span.end(end_time=ns)

    @contextmanager
    def current(self, turn: _Turn) -> Iterator[None]:
        """Make the turn's run span the current span (spans opened meanwhile join the trace)."""
        with self._trace.use_span(
            turn.span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        ):
            yield


class Instrumentation:
    """What `instrument` or `instrument_world` set up; `uninstrument()` removes it.

    Also a context manager (`with instrument(agent):`). Runs under way when it is removed
    still end their run spans; spans still open are ended (``error.type="unfinished"``).
    """

    def __init__(self, tracer: _Tracer, undo: Callable[[], None]) -> None:
        self._tracer = tracer
        self._undo: Callable[[], None] | None = undo

    @property
    def tracer(self) -> Tracer:
        """The tracer the spans are made with (scope ``"pes_agent"``)."""
        return self._tracer.tracer

    @property
    def active(self) -> bool:
        """Whether spans are still being made."""
        return self._undo is not None

    def uninstrument(self) -> None:
        """Stop making spans and end those still open; calling it twice is harmless."""
        undo, self._undo = self._undo, None
        if undo is not None:
            undo()
            self._tracer.close_all()

    close = uninstrument

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.uninstrument()


def instrument(
    agent: AgentCore,
    tracer_provider: TracerProvider | None = None,
    *,
    capture_content: bool = False,
    agent_name: str = "pes-agent",
) -> Instrumentation:
    """Trace `agent`'s runs: a span per run, per model call and per tool call (module docstring).

    `tracer_provider` None uses OpenTelemetry's global one. `capture_content=True` also puts
    the question, answer, tool arguments and results on spans (they may hold personal data).
    Raises `ConfigurationError` without the OpenTelemetry packages (`pip install
    'pes-agent[otel]'`) and `UsageError` for an agent instrumented already.
    """
    if getattr(agent, "_pes_otel", None) is not None:
        raise UsageError(
            "this agent is instrumented already; call uninstrument() on the Instrumentation "
            "instrument() returned before instrumenting it again"
        )

    def describe(key: tuple[str, str], name: str) -> str | None:
        found = agent.tools.get(name)
        return found.schema.description if found is not None else None

    tracer = _Tracer(
        tracer_provider,
        capture_content=capture_content,
        agent_name=agent_name,
        lazy_turns=False,
        describe=describe,
    )
    original_process = agent.process
    original_resume = agent.resume

    async def process(props: AgentProps) -> AgentFinalResponse:
        if not isinstance(props, AgentProps):
            return await original_process(props)  # its UsageError says what to pass
        if props.trace_id is None:
            # Chosen here rather than in the run, so its observations find this span.
            props = props.model_copy(update={"trace_id": new_id()})
        assert props.trace_id is not None
        question = props.query if capture_content else None
        key = (props.thread_id, props.trace_id)
        return await _traced(tracer, key, lambda: original_process(props), question)

    async def resume(
        thread_id: str, trace_id: str, decisions: Mapping[str, Any]
    ) -> AgentFinalResponse:
        return await _traced(
            tracer,
            (thread_id, trace_id),
            lambda: original_resume(thread_id, trace_id, decisions),
            None,
            resumed=True,
        )

    original_on_engine = agent._process_on_engine
    original_resume_on_engine = agent._resume_on_engine

    async def on_engine(
        key: tuple[str, str], run: Callable[[], Any], *, resumed: bool
    ) -> AgentFinalResponse:
        # A run a durable engine's worker executes here: traced where its steps run (a run
        # taken over from a dead worker traces only the steps it makes itself: those replayed
        # record nothing), unless this very process submitted it and traces it already.
        if key in tracer.turns:
            result: AgentFinalResponse = await run()
            return result
        return await _traced(tracer, key, run, None, resumed=resumed)

    async def process_on_engine(
        props: AgentProps, trace_id: str, effects: RunEffects
    ) -> AgentFinalResponse:
        return await on_engine(
            (props.thread_id, trace_id),
            lambda: original_on_engine(props, trace_id, effects),
            resumed=False,
        )

    async def resume_on_engine(
        thread_id: str, trace_id: str, decisions: dict[str, Decision], effects: RunEffects
    ) -> AgentFinalResponse:
        return await on_engine(
            (thread_id, trace_id),
            lambda: original_resume_on_engine(thread_id, trace_id, decisions, effects),
            resumed=True,
        )

    unsubscribe = agent.observations.subscribe(tracer.on_observation, types=_WATCHED)
    # Instance attributes shadow the methods: every caller of agent.process() is traced, and
    # so is every run an engine's worker executes with this agent.
    vars(agent).update(
        process=process,
        resume=resume,
        _process_on_engine=process_on_engine,
        _resume_on_engine=resume_on_engine,
        _pes_otel=tracer,
    )

    def undo() -> None:
        unsubscribe()
        for name in ("process", "resume", "_process_on_engine", "_resume_on_engine", "_pes_otel"):
            vars(agent).pop(name, None)

    return Instrumentation(tracer, undo)


async def _traced(
    tracer: _Tracer,
    key: tuple[str, str],
    run: Callable[[], Any],
    question: str | None,
    *,
    resumed: bool = False,
) -> AgentFinalResponse:
    turn = tracer.open(
        *key,
        time.time_ns(),
        {
            "gen_ai.input.messages": _text_messages("user", question) if question else None,
            "pes_agent.resumed": True if resumed else None,
        },
    )
    try:
        with tracer.current(turn):
            response: AgentFinalResponse = await run()
    except asyncio.CancelledError:
        tracer.close(key, time.time_ns(), error_type="cancelled", description="run cancelled")
        raise
    except BaseException as exc:
        turn.span.record_exception(exc)
        tracer.close(key, time.time_ns(), error_type=type(exc).__qualname__, description=str(exc))
        raise
    metadata = response.metadata
    attributes: dict[str, Any] = {
        "pes_agent.run.status": metadata.status,
        "gen_ai.usage.input_tokens": metadata.usage.input_tokens,
        "gen_ai.usage.output_tokens": metadata.usage.output_tokens,
    }
    if tracer.capture_content and metadata.status not in ("error", "cancelled"):
        attributes["gen_ai.output.messages"] = _answer_messages(
            response.response.content, turn.stop_reason
        )
    failed = metadata.status in ("error", "cancelled")
    tracer.close(
        key,
        time.time_ns(),
        error_type=(turn.error_phase or metadata.status) if failed else None,
        description=metadata.error,
        attributes=attributes,
    )
    return response


def instrument_world(
    world: World,
    tracer_provider: TracerProvider | None = None,
    *,
    capture_content: bool = False,
    agent_name: str = "pes-agent",
) -> Instrumentation:
    """Trace the ECS agents of `world`: each entity turn as `instrument` traces a run.

    Call it after `attach_services(world, observations=...)` (the spans come from those
    observations). Registers a system at priority 1000 that ends finished turns each tick;
    `uninstrument()` removes it. With `capture_content=True` the turn's last user message and
    its answer go on the turn span.
    """
    services = next((s for _, (s,) in world.query(AgentServicesComponent)), None)
    if services is None or services.observations is None:
        raise UsageError(
            "instrument_world() traces the world's observations, and it has none: call "
            "attach_services(world, observations=ObservationManager(InMemoryStorage())) first"
        )

    def describe(key: tuple[str, str], name: str) -> str | None:
        for entity, (registry,) in world.query(ToolRegistryComponent):
            if identity_of(world, entity) == key:
                found = tools_of(registry).get(name)
                return found.schema.description if found is not None else None
        return None

    tracer = _Tracer(
        tracer_provider,
        capture_content=capture_content,
        agent_name=agent_name,
        lazy_turns=True,
        describe=describe,
    )
    ends = _TurnEnds(tracer)
    unsubscribe = services.observations.subscribe(tracer.on_observation, types=_WATCHED)
    world.register_system(ends, priority=TURN_END_PRIORITY)

    def undo() -> None:
        unsubscribe()
        if ends in world.systems:
            world.remove_system(ends)

    return Instrumentation(tracer, undo)


class _TurnEnds:
    """Ends the turn spans of entities that answered, stopped or went away this tick."""

    name = "otel_turn_ends"

    def __init__(self, tracer: _Tracer) -> None:
        self._tracer = tracer

    async def process(self, world: World) -> None:
        """Check every open turn against its entity."""
        tracer = self._tracer
        if not tracer.turns:
            return
        entities = {identity_of(world, e): e for e, _ in world.query(LLMComponent)}
        for key, turn in list(tracer.turns.items()):
            entity = entities.get(key)
            if entity is None:
                tracer.close(key, turn.last_ns)
                continue
            terminal = world.get_component(entity, TerminalComponent)
            if terminal is not None:
                failed = terminal.reason in _FAILED_REASONS
                tracer.close(
                    key,
                    turn.last_ns,
                    error_type=terminal.reason if failed else None,
                    description=terminal.reason if failed else None,
                    attributes=self._content(world, entity, turn, answered=not failed),
                )
            elif _answered(world, entity):
                tracer.close(key, turn.last_ns, attributes=self._content(world, entity, turn))

    def _content(
        self, world: World, entity: EntityId, turn: _Turn, *, answered: bool = True
    ) -> dict[str, Any]:
        conversation = world.get_component(entity, ConversationComponent)
        if not self._tracer.capture_content or conversation is None:
            return {}
        messages = conversation.messages
        attributes: dict[str, Any] = {}
        question = next((m.content for m in reversed(messages) if m.role == "user"), None)
        if question is not None:
            attributes["gen_ai.input.messages"] = _text_messages("user", question)
        if answered and messages and messages[-1].role == "assistant":
            attributes["gen_ai.output.messages"] = _answer_messages(
                messages[-1].content, turn.stop_reason
            )
        return attributes


def _answered(world: World, entity: EntityId) -> bool:
    if world.has_component(entity, PendingToolCallsComponent):
        return False
    plan = world.get_component(entity, PlanComponent)
    if plan is not None and not plan.completed:
        return False
    conversation = world.get_component(entity, ConversationComponent)
    if conversation is None or not conversation.messages:
        return False
    last = conversation.messages[-1]
    return last.role == "assistant" and not last.tool_calls
