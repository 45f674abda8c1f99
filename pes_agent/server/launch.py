"""Runs that requests start: each a task of this process (`start_run`), answered with its
response as JSON once it ends, or with its events as they come (`answer_run`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from pes_agent.core import AgentCore
from pes_agent.durable.following import follow_stored
from pes_agent.errors import (
    ConfigurationError,
    NotAwaitingApprovalError,
    ThreadAwaitingApprovalError,
    UsageError,
)
from pes_agent.observing.logs import get_logger
from pes_agent.observing.types import Observation
from pes_agent.run import AgentFinalResponse, AgentProps, ExecutionMetadata
from pes_agent.server.errors import ApiError, awaiting_approval, storage_unusable
from pes_agent.server.history import run_summaries
from pes_agent.server.inputs import is_number, resume_from, wants_stream
from pes_agent.server.runs import RunEvent, RunHandle, bounded_json
from pes_agent.server.state import ApiState
from pes_agent.threads.messages import ConversationMessage, MessageRole

__all__ = ["HEARTBEAT_S", "answer_run", "event_stream", "start_run", "stream_run"]

_log = get_logger("pes_agent.server")

#: Seconds between keep-alive comments on an idle event stream (proxies close silent ones).
HEARTBEAT_S = 15.0


def start_run(
    api: ApiState, props: AgentProps, resume: Mapping[str, Any] | None = None
) -> RunHandle:
    """Start `props` as a run of this process (resuming it with `resume`'s decisions)."""
    assert props.trace_id is not None
    handle = RunHandle(
        props.thread_id,
        props.trace_id,
        props.user_id,
        replay_limit=api.runs.replay_limit,
        query=props.query,
    )
    handle.add("run", {"thread_id": props.thread_id, "trace_id": props.trace_id})
    agent = api.agent

    async def run() -> AgentFinalResponse:
        if resume is None:
            return await agent.process(props)
        return await agent.resume(handle.thread_id, handle.trace_id, resume)

    async def work(handle: RunHandle) -> None:
        try:
            if agent.engine is not None:
                # A worker of the engine runs it, maybe in another process: its observations
                # come through the store, its tokens through the store's stream feed (the
                # agent forwards them to its stream while the run is attached).
                def add(observation: Observation) -> None:
                    handle.add(observation.type.value, observation)

                api.feeds.attach(handle, observations=False)
                async with follow_stored(agent, handle.thread_id, handle.trace_id, add):
                    response = await run()
            else:
                api.feeds.attach(handle)
                response = await run()
        except asyncio.CancelledError:
            # Only the API cancels this task (or the server shutting down): report it.
            response = await _cancelled_response(agent, handle, props)
        except NotAwaitingApprovalError as error:
            handle.fail(404, "run_not_waiting", str(error))
            return
        except ThreadAwaitingApprovalError as error:
            refused = awaiting_approval(error.thread_id, error.trace_id)
            handle.fail(refused.status, refused.type, refused.message)
            return
        except ConfigurationError as error:
            unusable = storage_unusable(error, thread_id=handle.thread_id, trace_id=handle.trace_id)
            handle.fail(unusable.status, unusable.type, unusable.message)
            return
        except UsageError as error:
            handle.fail(409, "conflict", str(error))
            return
        except Exception:
            _log.exception(
                "server_run_failed", thread_id=handle.thread_id, trace_id=handle.trace_id
            )
            handle.fail(500, "internal_error", "the run failed; the server log has details")
            return
        finally:
            api.feeds.detach(handle)
        handle.response = response
        handle.finish("final", response)

    api.runs.start(handle, work)
    # Other workers learn of the run (and can cancel it) through this worker's record.
    assert handle.task is not None
    api.workers.started(handle)
    handle.task.add_done_callback(lambda _: api.workers.ended(handle))
    return handle


async def answer_run(
    api: ApiState, request: Request, handle: RunHandle, cancel_on_disconnect: bool
) -> Response:
    """The run's events when the client asked for a stream, else its response once it ends."""
    headers = api.run_headers(handle.trace_id)
    if wants_stream(request):
        after = last_event_id(request, handle)
        return stream_run(handle, after, cancel_on_disconnect, headers)
    task = handle.task
    assert task is not None
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        if cancel_on_disconnect:
            task.cancel()
        raise
    if handle.failure is not None:
        status, kind, message = handle.failure
        raise ApiError(status, kind, message)
    assert handle.response is not None
    return Response(bounded_json(handle.response), media_type="application/json", headers=headers)


def stream_run(
    handle: RunHandle,
    after: int,
    cancel_on_disconnect: bool,
    headers: dict[str, str],
    encode: Callable[[RunEvent], bytes] | None = None,
) -> StreamingResponse:
    """The run's events after event number `after`, as they come; `encode` writes each (the
    API's own SSE events by default, another protocol's for its routes; b"": none)."""
    write = encode or _sse

    async def events() -> AsyncIterator[bytes]:
        ended = False
        try:
            async for event in handle.follow(after, heartbeat_s=HEARTBEAT_S):
                chunk = write(event)
                if chunk:
                    yield chunk
            ended = True
        finally:
            if not ended and cancel_on_disconnect and handle.task is not None:
                handle.task.cancel()

    return event_stream(events(), headers)


def event_stream(
    chunks: AsyncIterator[bytes], headers: Mapping[str, str] | None = None
) -> StreamingResponse:
    """Server-sent events, kept from caches and from proxies' buffers."""
    return StreamingResponse(
        chunks,
        media_type="text/event-stream",
        headers={**(headers or {}), "Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def last_event_id(request: Request, handle: RunHandle) -> int:
    """Where to resume a run's own stream: an event number, or an observation id (as another
    worker's stream of the run gives them), found among the events kept; else the start."""
    raw = resume_from(request)
    if raw is None:
        return 0
    if is_number(raw) and len(raw) <= 18:
        return int(raw)
    for event in handle.events:
        if event.observation_id == raw:
            return event.id
    return 0


def _sse(event: RunEvent) -> bytes:
    if event.event == "ping":
        return b": ping\n\n"
    head = f"id: {event.id}\n" if event.id else ""
    return f"{head}event: {event.event}\ndata: {event.json()}\n\n".encode()


async def _cancelled_response(
    agent: AgentCore, handle: RunHandle, props: AgentProps
) -> AgentFinalResponse:
    """The answer of a run the API cancelled, with the figures the run list gives it: both
    come from its stored observations (those before a pause for approval included)."""
    try:
        recorded = await agent.observations.get_observations(
            handle.thread_id, trace_id=handle.trace_id
        )
    # A second cancel (the server shutting down) must not keep the run from ending either.
    except (Exception, asyncio.CancelledError) as error:
        _log.warning(
            "server_cancelled_run_figures_unread",
            thread_id=handle.thread_id,
            trace_id=handle.trace_id,
            error_type=type(error).__name__,
        )
        recorded = []
    # None when the run was cancelled before it recorded anything (waiting for its thread).
    summary = next(iter(run_summaries(recorded, ())), None)
    return AgentFinalResponse(
        response=ConversationMessage(
            thread_id=handle.thread_id, role=MessageRole.AI, content="The run was cancelled."
        ),
        metadata=ExecutionMetadata(
            thread_id=handle.thread_id,
            trace_id=handle.trace_id,
            user_id=props.user_id,
            status="cancelled",
            total_duration_ms=summary.duration_ms if summary else 0.0,
            llm_calls=summary.llm_calls if summary else 0,
            tool_calls=summary.tool_calls if summary else 0,
            error="cancelled through the API",
        ),
    )
