"""The ASGI application: routes, validation, auth and server-sent event streams."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.authentication import AuthenticationError
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Match, Route

from pes_agent.config import ThreadConfig
from pes_agent.core import AgentCore
from pes_agent.errors import (
    ConfigurationError,
    NotAwaitingApprovalError,
    StorageError,
    ThreadAwaitingApprovalError,
    UsageError,
)
from pes_agent.observing.logs import get_logger
from pes_agent.run import AgentFinalResponse, AgentProps, ExecutionMetadata
from pes_agent.server.auth import (
    BearerTokens,
    Caller,
    OwnerStore,
    TokenTable,
    is_reserved_thread,
)
from pes_agent.server.console import console_routes, trace_policy
from pes_agent.server.feeds import SharedRunFeed, ThreadFeed
from pes_agent.server.history import run_summaries, trace_page
from pes_agent.server.models import (
    ApprovalList,
    CancelResult,
    DecisionsRequest,
    MessageList,
    ObservationList,
    RunList,
    RunRequest,
    ThreadList,
)
from pes_agent.server.openapi import openapi_document
from pes_agent.server.runs import (
    RunEvent,
    RunFeeds,
    RunHandle,
    RunRegistry,
    bounded_json,
)
from pes_agent.server.workers import SharedRun, WorkerDirectory
from pes_agent.threads.ids import thread_id_problem
from pes_agent.threads.messages import ConversationMessage, MessageRole

__all__ = ["ApiError", "create_app"]

_log = get_logger("pes_agent.server")

M = TypeVar("M", bound=BaseModel)

#: Seconds between keep-alive comments on an idle event stream (proxies close silent ones).
HEARTBEAT_S = 15.0

#: How deep arrays and objects may nest in a request body.
MAX_JSON_DEPTH = 64


class ApiError(Exception):
    """An error answered as `{"error": {"type", "message"}}` with an HTTP status."""

    def __init__(self, status: int, type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message


def _error_response(error: ApiError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
    return JSONResponse(
        {"error": {"type": error.type, "message": error.message}},
        status_code=error.status,
        headers=headers,
    )


def _unauthorized(conn: HTTPConnection, error: AuthenticationError) -> Response:
    return _error_response(ApiError(401, "unauthorized", str(error)))


def _validation_message(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "body"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def _sse(event: RunEvent) -> bytes:
    if event.event == "ping":
        return b": ping\n\n"
    head = f"id: {event.id}\n" if event.id else ""
    return f"{head}event: {event.event}\ndata: {event.json()}\n\n".encode()


def _wants_stream(request: Request) -> bool:
    return "text/event-stream" in request.headers.get("accept", "")


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise ApiError(400, "invalid_parameter", f"{name} must be true or false")
    return value in ("true", "1")


def _resume_from(request: Request) -> str | None:
    """The `Last-Event-ID` header, if the client sent one."""
    return request.headers.get("last-event-id", "").strip() or None


def _last_event_id(request: Request, handle: RunHandle) -> int:
    """Where to resume a run's own stream: an event number, or an observation id (as another
    worker's stream of the run gives them), found among the events kept; else the start."""
    raw = _resume_from(request)
    if raw is None:
        return 0
    if _is_number(raw) and len(raw) <= 18:
        return int(raw)
    for event in handle.events:
        if event.observation_id == raw:
            return event.id
    return 0


def _no_run() -> ApiError:
    """The one answer for a trace id the caller may not see, whether or not a run has it."""
    return ApiError(
        404,
        "run_not_found",
        "no worker executes or lately finished a run with that trace id; a past run's "
        "observations: GET /v1/threads/{thread_id}/observations?trace_id=...",
    )


def _segment(value: str) -> str:
    """`value` as one path segment of a URL the server prints: a thread id with a space, `?`,
    `#`, `%` or non-ASCII letters otherwise named another URL than its own."""
    return quote(value, safe="")


def _awaiting_approval(thread_id: str, trace_id: str) -> ApiError:
    thread, trace = _segment(thread_id), _segment(trace_id)
    return ApiError(
        409,
        "awaiting_approval",
        f"this thread has a run waiting for approval (trace id {trace_id}): decide its "
        f"pending calls (POST /v1/threads/{thread}/runs/{trace}/decisions) or cancel it "
        f"(POST /v1/runs/{trace}/cancel); GET /v1/approvals lists it",
    )


def _storage_unusable(error: ConfigurationError, **context: str) -> ApiError:
    """The answer when the store cannot be opened or used (a missing folder, no permission),
    the reason logged: the only `ConfigurationError` a run or a handler lets out, and the
    server's fault, not a conflict with the request (it was a 409 naming the file)."""
    _log.error("server_storage_unusable", error=str(error), **context)
    return ApiError(503, "storage_unavailable", "the server cannot use its store; its log says why")


def _finished(trace_id: str, status: str | None) -> ApiError:
    ended = f"with status {status}" if status else "before it could run"
    if status == "lost":
        ended = "unfinished: the worker executing it stopped"
    return ApiError(409, "run_finished", f"the run {trace_id} already ended, {ended}")


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


class _Api:
    """The handlers, sharing the agent, the token table and the runs of this process."""

    def __init__(
        self,
        agent: AgentCore,
        tokens: TokenTable,
        *,
        max_body_bytes: int,
        allow_provider_config: bool,
        registry: RunRegistry,
        workers: WorkerDirectory,
    ) -> None:
        self.agent = agent
        self.tokens = tokens
        # Owner records are bookkeeping: saved without STATE_UPDATE observations.
        self.owners = OwnerStore(agent.storage)
        self.max_body_bytes = max_body_bytes
        self.allow_provider_config = allow_provider_config
        self.runs = registry
        self.feeds = RunFeeds(agent.observations, agent.stream)
        self.workers = workers
        self._background: set[asyncio.Task[Any]] = set()

    # -- request plumbing ---------------------------------------------------------------

    async def body(self, request: Request, model: type[M]) -> M:
        """The JSON body as a `model`; unknown fields, at any depth, are refused."""
        if not _is_json(request.headers.get("content-type")):
            # Also what keeps other sites' pages out: a browser sends a cross-site form or
            # text/plain body without asking first, but never an application/json one.
            raise ApiError(
                415,
                "unsupported_media_type",
                "send the body as JSON, with 'Content-Type: application/json'",
            )
        declared = request.headers.get("content-length", "")
        if _is_number(declared) and int(declared) > self.max_body_bytes:
            raise self._too_large()
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                raise self._too_large()
            chunks.append(chunk)
        data = _parse_json(b"".join(chunks))
        if not isinstance(data, dict):
            raise ApiError(400, "invalid_body", "the request body must be a JSON object")
        try:
            # A misspelt field would otherwise be dropped, and the request half done.
            return model.model_validate(data, extra="forbid")
        except ValidationError as error:
            raise ApiError(422, "validation_error", _validation_message(error)) from None

    def _too_large(self) -> ApiError:
        return ApiError(
            413, "body_too_large", f"the request body is over {self.max_body_bytes} bytes"
        )

    def thread_id(self, request: Request) -> str:
        """The path's thread id, refused (400, with the reason) as the library refuses it."""
        thread_id: str = request.path_params["thread_id"]
        problem = thread_id_problem(thread_id)
        if problem is not None:
            raise ApiError(400, "invalid_thread_id", problem)
        return thread_id

    async def _exists(self, thread_id: str) -> bool:
        """Whether anything of the thread is stored: a run that saved no turn yet (paused,
        failed, cancelled) leaves only observations, and makes the thread someone's too."""
        state = self.agent.state
        return (
            await state.get_thread_config(thread_id) is not None
            or await state.get_agent_state(thread_id) is not None
            or bool(await self.agent.conversation.get_messages(thread_id, limit=1))
            or bool(await self.agent.pending_runs(thread_id))
            or bool(await self.agent.observations.get_observations(thread_id))
        )

    async def authorize(self, caller: Caller, thread_id: str, *, create: bool = False) -> None:
        """Let a scoped caller through to its own threads only (unknown ones look absent)."""
        if caller.user_id is None:
            return
        owner = await self.owners.owner(thread_id)
        if owner == caller.user_id:
            return
        if (
            owner is None
            and create
            and not await self._exists(thread_id)
            and await self.owners.claim(thread_id, caller.user_id) == caller.user_id
        ):
            return
        raise ApiError(404, "thread_not_found", "no such thread")

    def _check_provider(self, has_provider_config: bool) -> None:
        if has_provider_config and not self.allow_provider_config:
            # A client-chosen provider could send the server's API keys to any base URL.
            raise ApiError(
                403,
                "provider_config_forbidden",
                "this server does not let requests choose the provider "
                "(create_app(..., allow_provider_config=True) allows it)",
            )

    # -- runs -----------------------------------------------------------------------------

    def _start(self, props: AgentProps, resume: Mapping[str, Any] | None = None) -> RunHandle:
        assert props.trace_id is not None
        handle = RunHandle(
            props.thread_id,
            props.trace_id,
            props.user_id,
            replay_limit=self.runs.replay_limit,
            query=props.query,
        )
        handle.add("run", {"thread_id": props.thread_id, "trace_id": props.trace_id})
        agent = self.agent

        async def work(handle: RunHandle) -> None:
            self.feeds.attach(handle)
            try:
                if resume is None:
                    response = await agent.process(props)
                else:
                    response = await agent.resume(handle.thread_id, handle.trace_id, resume)
            except asyncio.CancelledError:
                # Only the API cancels this task (or the server shutting down): report it.
                response = await _cancelled_response(agent, handle, props)
            except NotAwaitingApprovalError as error:
                handle.fail(404, "run_not_waiting", str(error))
                return
            except ThreadAwaitingApprovalError as error:
                refused = _awaiting_approval(error.thread_id, error.trace_id)
                handle.fail(refused.status, refused.type, refused.message)
                return
            except ConfigurationError as error:
                unusable = _storage_unusable(
                    error, thread_id=handle.thread_id, trace_id=handle.trace_id
                )
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
                self.feeds.detach(handle)
            handle.response = response
            handle.finish("final", response)

        self.runs.start(handle, work)
        # Other workers learn of the run (and can cancel it) through this worker's record.
        assert handle.task is not None
        self.workers.started(handle)
        handle.task.add_done_callback(lambda _: self.workers.ended(handle))
        return handle

    async def _answer(
        self, request: Request, handle: RunHandle, cancel_on_disconnect: bool
    ) -> Response:
        headers = self._headers(handle.trace_id)
        if _wants_stream(request):
            after = _last_event_id(request, handle)
            return self._stream(handle, after, cancel_on_disconnect, headers)
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
        return Response(
            bounded_json(handle.response), media_type="application/json", headers=headers
        )

    def _headers(self, trace_id: str) -> dict[str, str]:
        return {"X-Trace-Id": trace_id, "X-Worker-Id": self.workers.worker_id}

    def _stream(
        self,
        handle: RunHandle,
        after: int,
        cancel_on_disconnect: bool,
        headers: dict[str, str],
    ) -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            ended = False
            try:
                async for event in handle.follow(after, heartbeat_s=HEARTBEAT_S):
                    yield _sse(event)
                ended = True
            finally:
                if not ended and cancel_on_disconnect and handle.task is not None:
                    handle.task.cancel()

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def create_run(self, request: Request) -> Response:
        caller: Caller = request.user
        thread_id = self.thread_id(request)
        # Every parameter is checked before the run starts: a refused request runs nothing.
        cancel_on_disconnect = _flag(request, "cancel_on_disconnect")
        body = await self.body(request, RunRequest)
        if caller.scoped and body.user_id not in (None, caller.user_id):
            raise ApiError(403, "user_id_forbidden", "this token runs as its own user only")
        self._check_provider(body.options is not None and body.options.provider_config is not None)
        await self.authorize(caller, thread_id, create=True)
        if body.trace_id is not None:
            existing = self._same_run(caller, thread_id, body.trace_id)
            if existing is not None:
                return await self._answer(request, existing, cancel_on_disconnect)
            elsewhere = await self.workers.find(body.trace_id)
            if elsewhere is not None:
                # Started again here, it would run twice (its second turn is not saved).
                raise ApiError(
                    409,
                    "trace_id_in_use",
                    "a run with that trace id executes on another worker (or lately ended "
                    "there): GET /v1/runs/{trace_id}/events follows it from here",
                )
        # The run itself refuses a thread with a run waiting for approval (`work` answers
        # 409). A stream is looked at first, so that its client gets the 409 as a status, not
        # as an event; a JSON request is spared the extra read.
        if _wants_stream(request):
            waiting = await self.agent.pending_runs(thread_id)
            if waiting:
                raise _awaiting_approval(thread_id, waiting[0].trace_id)
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
            existing = self._same_run(caller, thread_id, body.trace_id)
            if existing is not None:
                return await self._answer(request, existing, cancel_on_disconnect)
        return await self._answer(request, self._start(props), cancel_on_disconnect)

    def _same_run(self, caller: Caller, thread_id: str, trace_id: str) -> RunHandle | None:
        """The run of this process a request naming `trace_id` repeats (None: there is none);
        a 409 when that trace id is another thread's or user's run."""
        existing = self.runs.get(trace_id)
        if existing is not None and (
            existing.thread_id != thread_id
            or (caller.scoped and existing.user_id != caller.user_id)
        ):
            raise ApiError(409, "trace_id_in_use", "that trace id belongs to another run")
        return existing

    async def run_events(self, request: Request) -> Response:
        caller: Caller = request.user
        trace_id: str = request.path_params["trace_id"]
        cancel_on_disconnect = _flag(request, "cancel_on_disconnect")
        handle = self.runs.get(trace_id)
        # A run that paused here may have been resumed on another worker: follow that one.
        shared = await self._shared_run(caller, trace_id, local=handle)
        if handle is not None and (shared is None or not shared.running):
            if caller.scoped and handle.user_id != caller.user_id:
                raise _no_run()
            after = _last_event_id(request, handle)
            return self._stream(handle, after, cancel_on_disconnect, self._headers(trace_id))
        # Executed by another worker: its observations, stored and live, through the store.
        assert shared is not None
        feed = await SharedRunFeed.open(self.agent, shared, self.workers, _resume_from(request))

        async def events() -> AsyncIterator[bytes]:
            ended = False
            try:
                async for chunk in feed.events(self.agent, heartbeat_s=HEARTBEAT_S):
                    yield chunk
                ended = True
            finally:
                if not ended and cancel_on_disconnect:
                    self._spawn(self.workers.request_cancel(trace_id))

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={
                **self._headers(trace_id),
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            },
        )

    async def _shared_run(
        self, caller: Caller, trace_id: str, *, local: RunHandle | None = None
    ) -> SharedRun | None:
        """The run `trace_id` of another worker, if the caller may see it. With a `local`
        run of that trace id still executing here there is none to look for (None); with a
        finished one, None when no other worker has it either."""
        if local is not None and not local.done:
            return None
        shared = await self.workers.find(trace_id)
        if shared is None and local is not None:
            return None
        if shared is None or (caller.scoped and shared.user_id != caller.user_id):
            raise _no_run()
        return shared

    async def aclose(self, timeout_s: float = 5.0) -> None:
        """Let the work spawned for clients that left (cancel requests to other workers)
        reach the store before it closes; what is still going after `timeout_s` is cancelled."""
        if not self._background:
            return
        _, pending = await asyncio.wait(set(self._background), timeout=timeout_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run `work` after the request that asked for it ended (kept until it is done)."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def cancel_run(self, request: Request) -> Response:
        caller: Caller = request.user
        trace_id: str = request.path_params["trace_id"]
        handle = self.runs.get(trace_id)
        if handle is not None and not handle.done:
            if caller.scoped and handle.user_id != caller.user_id:
                raise _no_run()
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
        for paused in await self.agent.pending_runs():
            if paused.trace_id != trace_id:
                continue
            if caller.scoped and not await self._owns(caller, paused.thread_id):
                break  # another user's run: answered below as if there were none
            await self.agent.cancel_pending(paused.thread_id)
            result = CancelResult(
                trace_id=trace_id,
                thread_id=paused.thread_id,
                was="awaiting_approval",
                query=paused.props.query,
            )
            return JSONResponse(result.model_dump(mode="json"))
        # Executed by another worker (perhaps resumed there after pausing here): ask it,
        # through its record in the store.
        shared = await self._shared_run(caller, trace_id, local=handle)
        if handle is not None and (shared is None or not shared.running):
            if caller.scoped and handle.user_id != caller.user_id:
                raise _no_run()
            raise _finished(trace_id, handle.response.metadata.status if handle.response else None)
        assert shared is not None
        if shared.running:
            try:
                requested = await self.workers.request_cancel(trace_id)
            except StorageError as error:
                raise ApiError(503, "busy", error.message) from None
            if requested is None:
                raise _no_run()
            shared = requested
        if not shared.running:
            raise _finished(trace_id, shared.status)
        result = CancelResult(
            trace_id=trace_id,
            thread_id=shared.thread_id,
            was="running",
            pending=True,
            worker_id=shared.worker_id,
        )
        return JSONResponse(result.model_dump(mode="json"), status_code=202)

    # -- approvals ------------------------------------------------------------------------

    async def approvals(self, request: Request) -> Response:
        caller: Caller = request.user
        thread_id = request.query_params.get("thread_id")
        problem = None if thread_id is None else thread_id_problem(thread_id)
        if problem is not None:
            raise ApiError(400, "invalid_thread_id", problem)
        runs = await self.agent.pending_runs(thread_id)
        if caller.scoped:
            runs = [run for run in runs if await self._owns(caller, run.thread_id)]
        return JSONResponse(ApprovalList(runs=runs).model_dump(mode="json"))

    async def _owns(self, caller: Caller, thread_id: str) -> bool:
        return await self.owners.owner(thread_id) == caller.user_id

    def _refuse_second_resume(self, trace_id: str) -> None:
        """Refuse decisions for a run this process already resumes: a second resume task would
        take the place of the one that runs in the registry and feeds, so that cancel and
        streams reached an idle task while the approved calls ran on."""
        local = self.runs.get(trace_id)
        if local is not None and not local.done:
            raise ApiError(
                409,
                "run_resuming",
                f"the run {trace_id} was already resumed by decisions sent before: follow it "
                f"(GET /v1/runs/{_segment(trace_id)}/events) or cancel it "
                f"(POST /v1/runs/{_segment(trace_id)}/cancel)",
            )

    async def decide(self, request: Request) -> Response:
        caller: Caller = request.user
        thread_id = self.thread_id(request)
        trace_id: str = request.path_params["trace_id"]
        cancel_on_disconnect = _flag(request, "cancel_on_disconnect")
        body = await self.body(request, DecisionsRequest)
        await self.authorize(caller, thread_id)
        paused = next(
            (run for run in await self.agent.pending_runs(thread_id) if run.trace_id == trace_id),
            None,
        )
        # No await from here to `_start`: of two decisions racing in this process, the first
        # to get here resumes the run, and the other is refused by the check below. (Another
        # worker's record cannot tell: just after a pause it still says the run executes.)
        self._refuse_second_resume(trace_id)
        if paused is None:
            raise ApiError(404, "run_not_waiting", "no run with that trace id waits for approval")
        ended = self.runs.get(trace_id)
        if ended is not None and ended.response is not None:
            status = ended.response.metadata.status
            if status != "awaiting_approval":
                # Resumed here and ended while the store was read: it waits no more.
                raise _finished(trace_id, status)
        pending = {p.call_id for p in paused.pending}
        unknown = sorted(set(body.decisions) - pending)
        if unknown:
            raise ApiError(
                422,
                "unknown_call_ids",
                f"these call ids do not wait for approval: {', '.join(unknown)}; "
                f"pending: {', '.join(sorted(pending))}",
            )
        decisions = {call_id: d.decision() for call_id, d in body.decisions.items()}
        props = paused.props.model_copy(update={"trace_id": trace_id})
        return await self._answer(
            request, self._start(props, resume=decisions), cancel_on_disconnect
        )

    # -- threads --------------------------------------------------------------------------

    async def list_threads(self, request: Request) -> Response:
        caller: Caller = request.user
        threads = [t for t in await self.agent.state.list_threads() if not is_reserved_thread(t)]
        if caller.scoped:
            threads = [t for t in threads if await self._owns(caller, t)]
        return JSONResponse(ThreadList(threads=threads).model_dump(mode="json"))

    async def messages(self, request: Request) -> Response:
        caller: Caller = request.user
        thread_id = self.thread_id(request)
        limit = _int_param(request, "limit")
        await self.authorize(caller, thread_id)
        messages = await self.agent.conversation.get_messages(thread_id, limit=limit)
        return JSONResponse(MessageList(messages=messages).model_dump(mode="json"))

    async def observations(self, request: Request) -> Response:
        caller: Caller = request.user
        thread_id = self.thread_id(request)
        types = request.query_params.getlist("type") or None
        after = request.query_params.get("after")
        limit = _int_param(request, "limit")
        trace_id = request.query_params.get("trace_id")
        await self.authorize(caller, thread_id)
        try:
            found = await self.agent.observations.get_observations(
                thread_id, types=types, trace_id=trace_id
            )
        except ConfigurationError:
            raise  # the store is unusable (a 503), not the parameters
        except UsageError as error:
            raise ApiError(400, "invalid_parameter", str(error)) from None
        if after is not None:
            ids = [o.id for o in found]
            if after not in ids:
                # Filters may hide the cursor: look for it among all of the thread's.
                everything = await self.agent.observations.get_observations(thread_id)
                order = {o.id: n for n, o in enumerate(everything)}
                if after not in order:
                    raise ApiError(
                        404,
                        "cursor_not_found",
                        "after names no observation of this thread: pass an observation's id "
                        "or the next_after of an earlier answer",
                    )
                found = [o for o in found if order[o.id] > order[after]]
            else:
                found = found[ids.index(after) + 1 :]
        if limit is not None:
            found = found[:limit]
        next_after = found[-1].id if found else after
        body = ObservationList(observations=found, next_after=next_after)
        return JSONResponse(body.model_dump(mode="json"))

    async def list_runs(self, request: Request) -> Response:
        caller: Caller = request.user
        thread_id = self.thread_id(request)
        await self.authorize(caller, thread_id)
        observations = await self.agent.observations.get_observations(thread_id)
        messages = await self.agent.conversation.get_messages(thread_id)
        running = {run.trace_id for run in self.runs.running() if run.thread_id == thread_id}
        running |= {
            run.trace_id
            for run in await self.workers.others()
            if run.running and run.thread_id == thread_id
        }
        # A run's query is saved with its turn: a run that ended without one (cancelled,
        # failed) is named by what this process kept of it, a paused run by its stored state.
        queries = {
            run.trace_id: run.query
            for run in self.runs.kept()
            if run.thread_id == thread_id and run.query is not None
        }
        queries |= {
            run.trace_id: run.props.query for run in await self.agent.pending_runs(thread_id)
        }
        summaries = run_summaries(observations, messages, running=running, queries=queries)
        body = RunList(runs=summaries)
        return JSONResponse(body.model_dump(mode="json"))

    async def trace(self, request: Request) -> Response:
        caller: Caller = request.user
        thread_id = self.thread_id(request)
        trace_id: str = request.path_params["trace_id"]
        await self.authorize(caller, thread_id)
        observations = await self.agent.observations.get_observations(thread_id, trace_id=trace_id)
        messages = await self.agent.conversation.get_messages(thread_id)
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

    async def delete_thread(self, request: Request) -> Response:
        caller: Caller = request.user
        thread_id = self.thread_id(request)
        await self.authorize(caller, thread_id)
        if any(run.thread_id == thread_id for run in self.runs.running()) or any(
            run.running and run.thread_id == thread_id for run in await self.workers.others()
        ):
            raise ApiError(409, "run_in_progress", "a run is executing on this thread")
        # The owner record stays: the id remains its user's (see pes_agent.server.auth).
        await self.agent.state.delete_thread(thread_id)
        return Response(status_code=204)

    async def put_config(self, request: Request) -> Response:
        caller: Caller = request.user
        thread_id = self.thread_id(request)
        config = await self.body(request, ThreadConfig)
        self._check_provider(config.provider_config is not None)
        await self.authorize(caller, thread_id, create=True)
        try:
            await self.agent.state.set_thread_config(thread_id, config)
        except ConfigurationError as error:
            # A provider config holding an API key, which storage never saves; else the store
            # could not be opened (answered 503 by `_storage_error`).
            if config.provider_config is None or config.provider_config.api_key is None:
                raise
            raise ApiError(422, "invalid_config", str(error)) from None
        except UsageError as error:
            raise ApiError(422, "invalid_config", str(error)) from None
        return JSONResponse(config.model_dump(mode="json", exclude={"provider_config"}))

    async def get_config(self, request: Request) -> Response:
        caller: Caller = request.user
        thread_id = self.thread_id(request)
        await self.authorize(caller, thread_id)
        config = await self.agent.state.get_thread_config(thread_id)
        if config is None:
            raise ApiError(404, "config_not_found", "this thread was never configured")
        # A provider config may hold an API key: never sent back.
        return JSONResponse(config.model_dump(mode="json", exclude={"provider_config"}))

    async def thread_events(self, request: Request) -> Response:
        caller: Caller = request.user
        thread_id = self.thread_id(request)
        await self.authorize(caller, thread_id)
        # Subscribed before the response starts: once `subscribed` arrives nothing is missed.
        feed = await ThreadFeed.open(self.agent, thread_id, _resume_from(request))
        return StreamingResponse(
            feed.events(heartbeat_s=HEARTBEAT_S),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document(auth=self.tokens.enabled))


def _int_param(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not _is_number(raw):
        raise ApiError(400, "invalid_parameter", f"{name} must be a non-negative integer")
    if len(raw.lstrip("0")) > 18:
        return None  # more than any store holds (and beyond what int() reads, at 4300 digits)
    return int(raw)


def _is_number(text: str) -> bool:
    """Whether `text` is a run of ASCII digits (`str.isdigit` also takes '²' and '٣')."""
    return text.isascii() and text.isdigit()


def _is_json(content_type: str | None) -> bool:
    """Whether a Content-Type names JSON: application/json or application/*+json."""
    media_type = (content_type or "").partition(";")[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def _parse_json(raw: bytes) -> Any:
    """A request body's JSON value; invalid JSON, NaN and Infinity (not JSON, RFC 8259) and
    nesting over `MAX_JSON_DEPTH` levels are a 400."""
    try:
        data = json.loads(raw or b"null", parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise ApiError(400, "invalid_json", "the request body is not valid JSON") from None
    if _depth(data) > MAX_JSON_DEPTH:
        # Saved with a paused run, such a value could not be read back (pydantic stops at
        # 200 levels), and no paused run of any thread could then be listed.
        raise ApiError(
            400, "invalid_json", f"the request body is nested over {MAX_JSON_DEPTH} levels deep"
        )
    return data


def _depth(value: Any) -> int:
    """How many arrays and objects deep `value` nests (a scalar: 0)."""
    depth = 0
    level = [value]
    while containers := [item for item in level if isinstance(item, dict | list)]:
        depth += 1
        level = [
            inner
            for container in containers
            for inner in (container.values() if isinstance(container, dict) else container)
        ]
    return depth


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return _error_response(exc)


async def _storage_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ConfigurationError)
    return _error_response(_storage_unusable(exc, http_path=request.url.path))


async def _internal_error(request: Request, exc: Exception) -> Response:
    # The details (a store's path or its error) go to the log, not to the client. Called
    # while `exc` is being handled, so the log has its traceback.
    _log.exception("server_request_failed", http_method=request.method, http_path=request.url.path)
    return _error_response(
        ApiError(500, "internal_error", "the server failed; its log has details")
    )


def create_app(
    agent: AgentCore,
    *,
    tokens: Mapping[str, str | None] | Sequence[str] | None = None,
    cors_origins: Sequence[str] = (),
    max_body_bytes: int = 1_000_000,
    allow_provider_config: bool = False,
    replay_limit: int = 2048,
    close_agent: bool = False,
    console: bool = True,
) -> Starlette:
    """An ASGI app serving `agent` over HTTP (see the README's "HTTP service").

    `tokens`: accepted bearer tokens, a list (unscoped) or a map `{token: user_id}` (a token
    mapped to a user id sees only that user's threads; None: unscoped); when not given,
    `PES_AGENT_API_TOKEN` from the environment if set, else no auth. `cors_origins`: the
    origins a browser may call from (none by default). `allow_provider_config`: let requests
    pick a provider (off: a client-chosen base URL would receive the server's keys).
    `replay_limit`: events kept per run for `Last-Event-ID` resume. `close_agent`: the app
    owns the agent and closes it when the server shuts down. `console`: serve the web console
    at `/` (a static page; the data it shows goes through the API and its auth).
    """
    if max_body_bytes <= 0:
        raise UsageError("max_body_bytes must be positive, e.g. 1_000_000")
    registry = RunRegistry(replay_limit=replay_limit)
    workers = WorkerDirectory(agent.storage)
    api = _Api(
        agent,
        TokenTable(tokens),
        max_body_bytes=max_body_bytes,
        allow_provider_config=allow_provider_config,
        registry=registry,
        workers=workers,
    )
    # Checked on each API route once it matched: an unknown path or method is a 404 or 405
    # with or without a token, as the OpenAPI document and the console need none.
    auth = [
        Middleware(
            AuthenticationMiddleware, backend=BearerTokens(api.tokens), on_error=_unauthorized
        )
    ]
    routes = [
        Route("/openapi.json", api.openapi, methods=["GET"]),
        Route("/v1/threads", api.list_threads, methods=["GET"], middleware=auth),
        Route("/v1/threads/{thread_id}", api.delete_thread, methods=["DELETE"], middleware=auth),
        Route("/v1/threads/{thread_id}/runs", api.create_run, methods=["POST"], middleware=auth),
        Route("/v1/threads/{thread_id}/runs", api.list_runs, methods=["GET"], middleware=auth),
        Route(
            "/v1/threads/{thread_id}/runs/{trace_id}/trace",
            api.trace,
            methods=["GET"],
            middleware=auth,
        ),
        Route("/v1/threads/{thread_id}/messages", api.messages, methods=["GET"], middleware=auth),
        Route(
            "/v1/threads/{thread_id}/observations",
            api.observations,
            methods=["GET"],
            middleware=auth,
        ),
        Route("/v1/threads/{thread_id}/config", api.put_config, methods=["PUT"], middleware=auth),
        Route("/v1/threads/{thread_id}/config", api.get_config, methods=["GET"], middleware=auth),
        Route(
            "/v1/threads/{thread_id}/events", api.thread_events, methods=["GET"], middleware=auth
        ),
        Route(
            "/v1/threads/{thread_id}/runs/{trace_id}/decisions",
            api.decide,
            methods=["POST"],
            middleware=auth,
        ),
        Route("/v1/runs/{trace_id}/events", api.run_events, methods=["GET"], middleware=auth),
        Route("/v1/runs/{trace_id}/cancel", api.cancel_run, methods=["POST"], middleware=auth),
        Route("/v1/approvals", api.approvals, methods=["GET"], middleware=auth),
    ]
    if console:
        routes.extend(console_routes())
    middleware: list[Middleware] = []
    if cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["GET", "POST", "PUT", "DELETE"],
                allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
                expose_headers=["X-Trace-Id", "X-Worker-Id"],
            )
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await registry.aclose()
            await api.aclose()
            await workers.aclose()
            if close_agent:
                await agent.aclose()

    # Starlette answers an `Exception` handler's response from its outermost middleware and
    # then raises the exception again (a second traceback in the ASGI server's log; test
    # clients raise it): the last resort is an ExceptionMiddleware of its own instead.
    middleware.append(Middleware(ExceptionMiddleware, handlers={Exception: _internal_error}))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={
            404: _not_found,
            405: _not_allowed,
            ApiError: _api_error,
            ConfigurationError: _storage_error,
        },
    )
    app.state.runs = registry
    app.state.workers = workers
    app.state.api = api
    return app


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error_response(ApiError(404, "not_found", "no such endpoint"))


async def _not_allowed(request: Request, exc: Exception) -> Response:
    # Every route of the path, not only the first: the path's methods are spread over several.
    allowed = sorted(
        {
            method
            for route in request.app.routes
            if isinstance(route, Route) and route.matches(request.scope)[0] is Match.PARTIAL
            for method in route.methods or ()
        }
    )
    response = _error_response(
        ApiError(405, "method_not_allowed", f"this path takes {', '.join(allowed)} only")
    )
    response.headers["Allow"] = ", ".join(allowed)
    return response
