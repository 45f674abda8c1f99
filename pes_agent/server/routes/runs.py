"""Runs: starting one on a thread and listing a thread's runs, a run's trace page, following a
run's events and cancelling it, on whichever worker executes it (`/v1/threads/{thread_id}/runs…`,
`/v1/runs/{trace_id}/…`)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from pes_agent.errors import StorageError
from pes_agent.run import AgentProps
from pes_agent.server.auth import Caller
from pes_agent.server.console import trace_policy
from pes_agent.server.errors import ApiError, awaiting_approval, finished, no_run
from pes_agent.server.feeds import SharedRunFeed
from pes_agent.server.history import run_summaries, trace_page
from pes_agent.server.inputs import flag, resume_from, thread_id_of, wants_stream
from pes_agent.server.launch import (
    HEARTBEAT_S,
    answer_run,
    event_stream,
    last_event_id,
    start_run,
    stream_run,
)
from pes_agent.server.models import CancelResult, RunList, RunRequest
from pes_agent.server.runs import RunHandle
from pes_agent.server.state import ApiEndpoint, ApiState
from pes_agent.server.workers import SharedRun

__all__ = ["routes"]


def routes(auth: Sequence[Middleware]) -> list[Route]:
    """The run routes, each behind the bearer-token middleware `auth`."""
    return [
        Route("/v1/threads/{thread_id}/runs", ThreadRuns, methods=["GET", "POST"], middleware=auth),
        Route(
            "/v1/threads/{thread_id}/runs/{trace_id}/trace", Trace, methods=["GET"], middleware=auth
        ),
        Route("/v1/runs/{trace_id}/events", RunEvents, methods=["GET"], middleware=auth),
        Route("/v1/runs/{trace_id}/cancel", CancelRun, methods=["POST"], middleware=auth),
    ]


class ThreadRuns(ApiEndpoint):
    """A thread's runs: listed, or one started."""

    async def get(self, request: Request) -> Response:
        """The thread's runs, past, paused and executing (here or on another worker)."""
        caller: Caller = request.user
        api = self.api
        thread_id = thread_id_of(request)
        await api.authorize(caller, thread_id)
        observations = await api.agent.observations.get_observations(thread_id)
        messages = await api.agent.conversation.get_messages(thread_id)
        running = {run.trace_id for run in api.runs.running() if run.thread_id == thread_id}
        running |= await api.running_elsewhere(thread_id)
        # A run's query is saved with its turn: a run that ended without one (cancelled,
        # failed) is named by what this process kept of it, a paused run by its stored state.
        queries = {
            run.trace_id: run.query
            for run in api.runs.kept()
            if run.thread_id == thread_id and run.query is not None
        }
        queries |= {
            run.trace_id: run.props.query for run in await api.agent.pending_runs(thread_id)
        }
        summaries = run_summaries(observations, messages, running=running, queries=queries)
        body = RunList(runs=summaries)
        return JSONResponse(body.model_dump(mode="json"))

    async def post(self, request: Request) -> Response:
        """Start a run (or answer the one this request repeats, by its trace id)."""
        caller: Caller = request.user
        api = self.api
        thread_id = thread_id_of(request)
        # Every parameter is checked before the run starts: a refused request runs nothing.
        cancel_on_disconnect = flag(request, "cancel_on_disconnect")
        body = await api.body(request, RunRequest)
        if caller.scoped and body.user_id not in (None, caller.user_id):
            raise ApiError(403, "user_id_forbidden", "this token runs as its own user only")
        api.check_provider(body.options is not None and body.options.provider_config is not None)
        await api.authorize(caller, thread_id, create=True)
        if body.trace_id is not None:
            existing = _same_run(api, caller, thread_id, body.trace_id)
            if existing is not None:
                return await answer_run(api, request, existing, cancel_on_disconnect)
            elsewhere = await api.find_run(body.trace_id)
            if elsewhere is not None:
                # Started again here, it would run twice (its second turn is not saved).
                raise ApiError(
                    409,
                    "trace_id_in_use",
                    "a run with that trace id executes on another worker (or lately ended "
                    "there): GET /v1/runs/{trace_id}/events follows it from here",
                )
        # The run itself refuses a thread with a run waiting for approval (`start_run`
        # answers 409). A stream is looked at first, so that its client gets the 409 as a
        # status, not as an event; a JSON request is spared the extra read.
        if wants_stream(request):
            waiting = await api.agent.pending_runs(thread_id)
            if waiting:
                raise awaiting_approval(thread_id, waiting[0].trace_id)
        props = AgentProps(
            body.query,
            thread_id,
            session_id=body.session_id,
            user_id=caller.user_id if caller.scoped else body.user_id,
            trace_id=body.trace_id or uuid.uuid4().hex,
            options=body.options,
        )
        if body.trace_id is not None:
            # A request repeating this one may have started the run during the awaits above.
            existing = _same_run(api, caller, thread_id, body.trace_id)
            if existing is not None:
                return await answer_run(api, request, existing, cancel_on_disconnect)
        return await answer_run(api, request, start_run(api, props), cancel_on_disconnect)


def _same_run(api: ApiState, caller: Caller, thread_id: str, trace_id: str) -> RunHandle | None:
    """The run of this process a request naming `trace_id` repeats (None: there is none);
    a 409 when that trace id is another thread's or user's run."""
    existing = api.runs.get(trace_id)
    if existing is not None and (
        existing.thread_id != thread_id or (caller.scoped and existing.user_id != caller.user_id)
    ):
        raise ApiError(409, "trace_id_in_use", "that trace id belongs to another run")
    return existing


class Trace(ApiEndpoint):
    """A run's trace page."""

    async def get(self, request: Request) -> Response:
        """The run's timeline as a self-contained HTML page."""
        caller: Caller = request.user
        api = self.api
        thread_id = thread_id_of(request)
        trace_id: str = request.path_params["trace_id"]
        await api.authorize(caller, thread_id)
        observations = await api.agent.observations.get_observations(thread_id, trace_id=trace_id)
        messages = await api.agent.conversation.get_messages(thread_id)
        page = trace_page(observations, messages, trace_id)
        if page is None:
            raise ApiError(404, "run_not_found", "no run with that trace id on this thread")
        return HTMLResponse(
            page,
            headers={
                "Content-Security-Policy": trace_policy(),
                "X-Content-Type-Options": "nosniff",
            },
        )


class RunEvents(ApiEndpoint):
    """A run's events, wherever it executes."""

    async def get(self, request: Request) -> Response:
        """The run's events (from `Last-Event-ID` on), from this worker or through the store."""
        caller: Caller = request.user
        api = self.api
        trace_id: str = request.path_params["trace_id"]
        cancel_on_disconnect = flag(request, "cancel_on_disconnect")
        handle = api.runs.get(trace_id)
        # A run that paused here may have been resumed on another worker: follow that one.
        shared = await _shared_run(api, caller, trace_id, local=handle)
        if handle is not None and (shared is None or not shared.running):
            if caller.scoped and handle.user_id != caller.user_id:
                raise no_run()
            after = last_event_id(request, handle)
            return stream_run(handle, after, cancel_on_disconnect, api.run_headers(trace_id))
        # Executed by another worker: its observations, stored and live, through the store.
        assert shared is not None
        feed = await SharedRunFeed.open(api.agent, shared, api.find_run, resume_from(request))

        async def events() -> AsyncIterator[bytes]:
            ended = False
            try:
                async for chunk in feed.events(api.agent, heartbeat_s=HEARTBEAT_S):
                    yield chunk
                ended = True
            finally:
                if not ended and cancel_on_disconnect:
                    api.spawn(api.request_cancel(trace_id))

        return event_stream(events(), api.run_headers(trace_id))


async def _shared_run(
    api: ApiState, caller: Caller, trace_id: str, *, local: RunHandle | None = None
) -> SharedRun | None:
    """The run `trace_id` of another worker, if the caller may see it. With a `local`
    run of that trace id still executing here there is none to look for (None); with a
    finished one, None when no other worker has it either."""
    if local is not None and not local.done:
        return None
    shared = await api.find_run(trace_id)
    if shared is None and local is not None:
        return None
    if shared is None or (caller.scoped and shared.user_id != caller.user_id):
        raise no_run()
    return shared


class CancelRun(ApiEndpoint):
    """Cancelling a run, wherever it executes or waits."""

    async def post(self, request: Request) -> Response:
        """Cancel the run: at once here, or by asking the worker executing it (a 202)."""
        caller: Caller = request.user
        api = self.api
        trace_id: str = request.path_params["trace_id"]
        handle = api.runs.get(trace_id)
        if handle is not None and not handle.done:
            if caller.scoped and handle.user_id != caller.user_id:
                raise no_run()
            assert handle.task is not None
            handle.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(handle.task)
            result = CancelResult(
                trace_id=trace_id,
                thread_id=handle.thread_id,
                was="running",
                query=handle.query,
                response=handle.response,
            )
            return JSONResponse(result.model_dump(mode="json"))
        for paused in await api.agent.pending_runs():
            if paused.trace_id != trace_id:
                continue
            if caller.scoped and not await api.owns(caller, paused.thread_id):
                break  # another user's run: answered below as if there were none
            await api.agent.cancel_pending(paused.thread_id)
            result = CancelResult(
                trace_id=trace_id,
                thread_id=paused.thread_id,
                was="awaiting_approval",
                query=paused.props.query,
            )
            return JSONResponse(result.model_dump(mode="json"))
        # Executed by another worker (perhaps resumed there after pausing here): ask it,
        # through its record in the store.
        shared = await _shared_run(api, caller, trace_id, local=handle)
        if handle is not None and (shared is None or not shared.running):
            if caller.scoped and handle.user_id != caller.user_id:
                raise no_run()
            raise finished(trace_id, handle.response.metadata.status if handle.response else None)
        assert shared is not None
        if shared.running:
            try:
                requested = await api.request_cancel(trace_id)
            except StorageError as error:
                raise ApiError(503, "busy", error.message) from None
            if requested is None:
                raise no_run()
            shared = requested
        if not shared.running:
            raise finished(trace_id, shared.status)
        result = CancelResult(
            trace_id=trace_id,
            thread_id=shared.thread_id,
            was="running",
            pending=True,
            worker_id=shared.worker_id,
        )
        return JSONResponse(result.model_dump(mode="json"), status_code=202)
