"""The one streaming-call helper that planning, repair and synthesis share."""

from __future__ import annotations

import json
import logging
import operator
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, assert_never

from pes_agent.config import LLMParams
from pes_agent.durable.effects import RunEffects
from pes_agent.errors import ProviderError, UsageError, UsageLimitExceeded
from pes_agent.observing.logs import enabled_for, get_logger
from pes_agent.observing.relay import StreamPublisher
from pes_agent.observing.streams import StreamEvent, StreamEventKind, StreamSocket
from pes_agent.observing.types import ObservationType
from pes_agent.pes.budget import RunBudget
from pes_agent.pes.recorder import RunRecorder
from pes_agent.protocols import LLMResponse, StreamListener
from pes_agent.providers.base import (
    LLMPhase,
    LLMProvider,
    LLMRequest,
    PromptMessage,
    ServerAddress,
    StreamMetadata,
    StreamRestart,
    ThinkingBlock,
    TokenDelta,
    ToolCallDelta,
    ToolCallEvent,
    ToolChoice,
)
from pes_agent.tools.base import ToolSchema
from pes_agent.usage import Usage

__all__ = ["RunModelCaller"]

_log = get_logger("pes_agent.llm")
_std_log = logging.getLogger("pes_agent.llm")  # asked whether to log (`enabled_for`)


def _calls_text(calls: Sequence[ToolCallEvent]) -> str:
    """Native tool calls as JSON text (unusable arguments as they were sent); "" for none."""
    if not calls:
        return ""
    return json.dumps(
        [
            {
                "id": event.call.id,
                "name": event.call.name,
                "arguments": event.call.arguments if event.error is None else event.raw,
            }
            for event in calls
        ],
        ensure_ascii=False,
        default=str,
    )


# A usage's counts, in `Usage` field order: what `Usage.__add__` adds up.
_COUNTED: tuple[str, ...] = tuple(Usage.model_fields)
_counts: Callable[[Usage], tuple[int, ...]] = operator.attrgetter(*_COUNTED)
_USAGE_SERIALIZER = Usage.__pydantic_serializer__


def _dumped(usage: Usage) -> dict[str, Any]:
    """`usage.model_dump()`: for a plain `Usage`, its serializer called directly (0.74 µs
    against 1.34 µs measured, twice a run: no `model_dump` keyword arguments to pass on); a
    subclass, which may override `model_dump`, is asked the usual way."""
    if type(usage) is Usage:
        dumped: dict[str, Any] = _USAGE_SERIALIZER.to_python(usage)
        return dumped
    return usage.model_dump()


def _label(phase: LLMPhase, name: str, model: str, number: int) -> dict[str, Any]:
    """What each observation of a call names it by."""
    return {
        "phase": phase,
        "provider": name,
        "model": model,
        # Language steps stream side by side in one phase: the number pairs each call's
        # start with its end (the trace's LLM spans).
        "llmCall": number,
    }


def _started(
    request: LLMRequest, provider: LLMProvider, name: str, model: str, number: int
) -> dict[str, Any]:
    """What a call's start (or restart) records: its label and what was asked."""
    return {**_label(request.phase, name, model, number), **_request_details(request, provider)}


def _request_details(request: LLMRequest, provider: LLMProvider) -> dict[str, Any]:
    """What a call's start records besides its label: the parameters sent, whether the answer
    must be JSON (a schema, or one tool forced: structured planning), and the server."""
    details: dict[str, Any] = {}
    if request.temperature is not None:
        details["temperature"] = request.temperature
    if request.max_tokens is not None:
        details["max_tokens"] = request.max_tokens
    forced = request.tool_choice not in (None, "auto", "none", "required")
    if request.response_format is not None or forced:
        details["output_type"] = "json"
    server = getattr(provider, "server", None)
    if isinstance(server, ServerAddress):
        details["server_address"] = server.address
        details["server_port"] = server.port
    return details


class RunModelCaller:
    """Streams model calls for one run: records stream observations, counts calls and usage.

    Implements the `ModelCaller` protocol handed to planners and synthesizers. With a
    `budget`, a call the run has no room for is not made, an answer whose tokens cross a
    limit is not returned, and a stream stops at its next piece once the run has crossed a
    limit elsewhere (a streamed plan's call): each raises `UsageLimitExceeded`.
    """

    # Slotted: one object a run rather than two (no instance dict for the collector to scan).
    __slots__ = (
        "_feed",
        "_recorder",
        "_spent",
        "_stream",
        "budget",
        "calls",
        "effects",
        "outputs",
        "params",
        "provider",
        "thread_id",
        "trace_id",
    )

    def __init__(
        self,
        *,
        provider: LLMProvider,
        recorder: RunRecorder,
        stream: StreamSocket,
        params: LLMParams,
        budget: RunBudget | None = None,
        effects: RunEffects | None = None,
        feed: StreamPublisher | None = None,
    ) -> None:
        self.provider = provider
        self.budget = budget
        self.effects = effects
        self.thread_id = recorder.thread_id
        self.trace_id = recorder.trace_id
        self.params = params
        self.calls = 0
        # The answers' usage summed as plain counts (`_COUNTED`), made a `Usage` when asked:
        # a tuple of ints, which the collector stops tracking, where a kept `Usage` would be
        # two tracked objects (the model and its fields set) in every run from its first
        # answer on. The answers are kept in a tuple that grows by copy (a run makes two or
        # three calls): nothing per run for the collector while it waits.
        self._spent: tuple[int, ...] | None = None
        self.outputs: tuple[tuple[LLMPhase, str], ...] = ()
        self._recorder = recorder
        self._stream = stream
        # A run on an engine also sends its stream to the store's feed, for the subscribers
        # of the process that submitted it (`pes_agent.observing.relay`).
        self._feed = feed

    @property
    def usage(self) -> Usage:
        """The tokens and requests of the run's calls so far (a new `Usage` each time)."""
        spent = self._spent
        if spent is None:
            return Usage()
        return Usage(**dict(zip(_COUNTED, spent, strict=True)))

    @property
    def _streaming(self) -> bool:
        """Whether stream events go anywhere (a subscriber here, or the store's feed)."""
        return self._stream.active or self._feed is not None

    async def _publish(self, phase: LLMPhase, kind: StreamEventKind, text: str = "") -> None:
        if not self._streaming:
            return
        event = StreamEvent(self.thread_id, self.trace_id, phase, kind, text)
        if self._feed is not None:
            self._feed.put(event)
        if self._stream.active:
            await self._stream.publish(event)

    def __call__(
        self,
        messages: Sequence[PromptMessage],
        *,
        phase: LLMPhase,
        tools: Sequence[ToolSchema] = (),
        tool_choice: ToolChoice | None = None,
        response_format: dict[str, Any] | None = None,
        listener: StreamListener | None = None,
    ) -> Coroutine[Any, Any, LLMResponse]:
        """Stream one call to the run's provider and return its text, thoughts, native tool
        calls and usage; the answer's text also goes to `listener` as it streams.

        A plain method handing back the call's coroutine (await it, as any async call): a run
        waiting on its model keeps one coroutine of this caller's rather than two. Nothing
        happens before it is awaited but building the request, a frozen record of the
        arguments.
        """
        request = LLMRequest(
            messages=tuple(messages),
            phase=phase,
            thread_id=self.thread_id,
            trace_id=self.trace_id,
            temperature=self.params.temperature,
            max_tokens=self.params.max_tokens,
            options=dict(self.params.extra),
            tools=tuple(tools),
            tool_choice=tool_choice,
            response_format=response_format,
        )
        effects = self.effects
        if effects is None:
            return self._call_provider(request, listener)
        # A durable run: the call is a step, done once; replayed, it answers from the record
        # (its observations and tokens were recorded when it ran). Nothing listens to the
        # stream: streaming dispatch is an in-process optimisation.
        return self._durable_call(effects, request)

    def _begin(self) -> int:
        """Count a call about to be made, once the budget has room for it; its number."""
        if self.budget is not None:
            self.budget.before_request(self.usage, self.calls)
        self.calls += 1
        return self.calls

    def _took(self, phase: LLMPhase, response: LLMResponse) -> None:
        """Add a call's answer to the run's usage and outputs; past a limit, raise."""
        counts = _counts(response.usage)
        spent = self._spent
        self._spent = counts if spent is None else tuple(map(operator.add, spent, counts))
        answer = response.text
        # A turn that only calls tools (a plan sent through submit_plan) is kept as its calls,
        # so what the model sent still shows, e.g. as the PLAN observation's raw output.
        self.outputs = (*self.outputs, (phase, answer or _calls_text(response.tool_calls)))
        if self.budget is not None:
            self.budget.after_response(self.usage)

    async def _durable_call(self, effects: RunEffects, request: LLMRequest) -> LLMResponse:
        """The call as a durable engine's step (a method of its own, so that no closure cell
        is kept by the in-process call while the model answers)."""
        number = self._begin()

        async def call() -> LLMResponse:
            return await self._call_provider(request, None, step=number)

        response: LLMResponse = await effects.model_call(request.phase, call)
        self._took(request.phase, response)
        return response

    async def _call_provider(
        self, request: LLMRequest, listener: StreamListener | None, *, step: int | None = None
    ) -> LLMResponse:
        """Stream `request` from the provider, recording the call's observations and
        publishing its tokens; the answer with its usage and metadata.

        In process (`step` None) the call is counted, checked against the budget and added
        up here, in the one coroutine a waiting run keeps; a durable engine's step passes the
        call's number, `_durable_call` having done those outside the step."""
        number = self._begin() if step is None else step
        phase = request.phase
        budget = self.budget
        provider = self.provider
        # Each observation's content is built when it is recorded: no dict of this call's
        # stays alive in each run while the model answers (the names are read once, so
        # every observation of the call says the same).
        name, model = provider.name, provider.model
        await self._recorder.record(
            ObservationType.LLM_STREAM_START,
            f"{phase} call started",
            _started(request, provider, name, model, number),
        )
        # Each list is made for its first piece (the text's too: fewer objects alive while
        # the model is still to answer; most answers have no thoughts or calls at all).
        text: list[str] | None = None
        thoughts: list[str] | None = None
        calls: list[ToolCallEvent] | None = None
        metadata: StreamMetadata | None = None
        stream = self._stream
        feed = self._feed
        try:
            async for event in provider.stream(request):
                if budget is not None and budget.breach is not None:
                    raise budget.breach  # crossed elsewhere in the run: stop writing
                if isinstance(event, TokenDelta):
                    if event.kind == "content":
                        if text is None:
                            text = []
                        text.append(event.text)
                        if listener is not None:
                            listener.on_text(event.text)
                        # Asked first (`_streaming` written out): a long answer has many tokens.
                        if stream.active or feed is not None:
                            await self._publish(phase, "token", event.text)
                    elif stream.active or feed is not None:
                        await self._publish(phase, "thinking", event.text)
                elif isinstance(event, StreamMetadata):
                    # Second: every answer ends with one, and the types are disjoint.
                    metadata = event
                elif isinstance(event, ThinkingBlock):
                    if thoughts is None:
                        thoughts = []
                    thoughts.append(event.text)
                    await self._recorder.record(
                        ObservationType.THOUGHTS, "Thinking", {"phase": phase, "text": event.text}
                    )
                elif isinstance(event, StreamRestart):
                    # The provider retries after having streamed: what we have is void.
                    text = thoughts = calls = None
                    if listener is not None:
                        listener.on_restart()
                    await self._recorder.record(
                        ObservationType.LLM_STREAM_ERROR,
                        f"{phase} stream interrupted; retrying",
                        {
                            **_label(phase, name, model, number),
                            "error": event.reason,
                            "attempt": event.attempt,
                            "retrying": True,
                        },
                    )
                    await self._recorder.record(
                        ObservationType.LLM_STREAM_START,
                        f"{phase} call restarted",
                        _started(request, provider, name, model, number),
                    )
                    await self._publish(phase, "restart", event.reason)
                elif isinstance(event, ToolCallDelta):
                    if listener is not None:
                        listener.on_tool_input(event.call_id, event.name, event.text)
                elif isinstance(event, ToolCallEvent):
                    if calls is None:
                        calls = []
                    calls.append(event)
                else:
                    assert_never(event)
        except (ProviderError, UsageLimitExceeded, UsageError) as error:
            # A usage error (a closed provider, a bad argument) stays one: the fix is the
            # caller's, and no fallback or retry may hide it.
            await self._fail(phase, _label(phase, name, model, number), str(error))
            raise
        except Exception as error:
            message = f"{provider.name} stream failed: {type(error).__name__}: {error}"
            await self._fail(phase, _label(phase, name, model, number), message)
            raise ProviderError(
                message, provider=provider.name, thread_id=self.thread_id, trace_id=self.trace_id
            ) from error
        usage = metadata.usage if metadata is not None else Usage(requests=1)
        answer = "" if text is None else "".join(text)
        label = _label(phase, name, model, number)
        await self._recorder.record(
            ObservationType.LLM_STREAM_METADATA,
            f"{phase} call usage",
            {
                **label,
                "usage": _dumped(usage),
                "stop_reason": metadata.stop_reason if metadata else None,
                "response_provider": (metadata.provider if metadata else None) or provider.name,
                "response_model": metadata.model if metadata else None,
                "response_id": metadata.response_id if metadata else None,
                "time_to_first_token_ms": metadata.time_to_first_token_ms if metadata else None,
                "total_ms": metadata.total_ms if metadata else None,
            },
        )
        await self._recorder.record(ObservationType.LLM_STREAM_END, f"{phase} call finished", label)
        if stream.active or feed is not None:  # asked here: no coroutine for a stream unfollowed
            await self._publish(phase, "end")
        if feed is not None:
            await feed.flush()  # the step ends once its tokens are in the store
        if enabled_for(_std_log, logging.DEBUG):
            _log.debug(
                "llm_call",
                thread_id=self.thread_id,
                trace_id=self.trace_id,
                phase=phase,
                provider=provider.name,
                model=provider.model,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
            )
        response = LLMResponse(
            text=answer,
            thoughts=() if thoughts is None else tuple(thoughts),
            tool_calls=() if calls is None else tuple(calls),
            usage=usage,
            metadata=metadata,
        )
        if step is None:
            self._took(phase, response)
        return response

    async def _fail(self, phase: LLMPhase, label: dict[str, Any], message: str) -> None:
        await self._recorder.record(
            ObservationType.LLM_STREAM_ERROR,
            f"{phase} call failed",
            {**label, "error": message, "retrying": False},
        )
        await self._publish(phase, "error", message)
        if self._feed is not None:
            await self._feed.flush()
