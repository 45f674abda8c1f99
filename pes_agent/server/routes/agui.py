"""AG-UI: `POST /v1/agui` runs the agent for an AG-UI client and streams the run as AG-UI
events (`pes_agent.interop.agui` translates them; the run and its stream are the ones every
run route uses).

The body is a `RunAgentInput`: `threadId` is the thread (under the API's rules: same tokens,
same owners), the last user message the query. A non-empty object `state` different from the
thread's becomes its agent state before the run (clients send `{}` when they keep none: that
leaves the state alone). `forwardedProps` may carry `session_id` and `options` (a run's
`RunOptions`, as `POST /v1/threads/{id}/runs` takes them); its other keys are the client's
own. With `resume` entries the input answers the interrupts of the thread's paused run
instead: each entry's `interruptId` is one pending call, its payload the decision.

The route is AG-UI's, not part of the API's OpenAPI document (`include_in_schema=False`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pes_agent.config import AgentState, RunOptions
from pes_agent.errors import StateConflictError, UsageError
from pes_agent.observing.streams import StreamEvent
from pes_agent.observing.types import Observation
from pes_agent.run import AgentFinalResponse, AgentProps
from pes_agent.server.auth import Caller
from pes_agent.server.errors import ApiError, awaiting_approval
from pes_agent.server.inputs import flag
from pes_agent.server.launch import start_run, stream_run
from pes_agent.server.routes.approvals import refuse_second_resume
from pes_agent.server.runs import MergedText, RunEvent, RunHandle
from pes_agent.server.state import ApiEndpoint, ApiState
from pes_agent.threads.ids import thread_id_problem

if TYPE_CHECKING:
    from ag_ui.core import RunAgentInput

    from pes_agent.interop.agui import AguiRun

__all__ = ["AGUI_PATH", "routes"]

#: Where the AG-UI endpoint is served.
AGUI_PATH = "/v1/agui"


def routes(auth: Sequence[Middleware]) -> list[Route]:
    """The AG-UI route, behind the bearer-token middleware `auth`."""
    return [Route(AGUI_PATH, AguiRuns, methods=["POST"], middleware=auth, include_in_schema=False)]


class Forwarded(BaseModel):
    """What pes-agent reads of a `RunAgentInput`'s `forwardedProps` (other keys are ignored)."""

    model_config = ConfigDict(extra="ignore")

    session_id: str | None = Field(default=None, max_length=200)
    options: RunOptions | None = None


class AguiRuns(ApiEndpoint):
    """Runs for AG-UI clients."""

    async def post(self, request: Request) -> Response:
        """Start (or resume) a run and stream it as AG-UI events."""
        try:
            # First: without the extra it raises the UsageError naming it.
            from pes_agent.interop import agui
        except UsageError as error:
            raise ApiError(
                501, "agui_unavailable", f"{error} (or serve without it: create_app(agui=False))"
            ) from None
        from ag_ui.core import RunAgentInput

        caller: Caller = request.user
        api = self.api
        cancel_on_disconnect = flag(request, "cancel_on_disconnect")
        run_input = await api.body(request, RunAgentInput, extra="allow")
        thread_id = run_input.thread_id
        problem = thread_id_problem(thread_id)
        if problem is not None:
            raise ApiError(400, "invalid_thread_id", problem)
        forwarded = _forwarded(run_input.forwarded_props)
        options = forwarded.options
        api.check_provider(options is not None and options.provider_config is not None)
        await api.authorize(caller, thread_id, create=True)
        if run_input.resume:
            handle = await _resume(api, run_input)
            state = await _state(api, thread_id)
        else:
            query = agui.query_of(run_input)
            if query is None:
                raise ApiError(
                    422, "no_query", "the input's messages need a user message with text"
                )
            waiting = await api.agent.pending_runs(thread_id)
            if waiting:
                raise awaiting_approval(thread_id, waiting[0].trace_id)
            state = await _adopt_state(api, thread_id, run_input.state)
            props = AgentProps(
                query,
                thread_id,
                session_id=forwarded.session_id,
                user_id=caller.user_id,
                trace_id=uuid.uuid4().hex,
                options=options,
            )
            handle = start_run(api, props)
        told = agui.AguiRun(
            thread_id, run_input.run_id, handle.trace_id, state=state, run_input=run_input
        )
        headers = api.run_headers(handle.trace_id)
        return stream_run(handle, 0, cancel_on_disconnect, headers, encode=_writer(told))


def _forwarded(props: Any) -> Forwarded:
    if not isinstance(props, dict):
        return Forwarded()
    try:
        return Forwarded.model_validate(props)
    except ValidationError as error:
        problems = "; ".join(
            f"forwardedProps.{'.'.join(map(str, item['loc']))}: {item['msg']}"
            for item in error.errors(include_input=False, include_url=False)
        )
        raise ApiError(422, "validation_error", problems) from None


async def _state(api: ApiState, thread_id: str) -> Any:
    saved = await api.agent.state.get_agent_state(thread_id)
    return saved.data if saved is not None else {}


async def _adopt_state(api: ApiState, thread_id: str, state: Any) -> Any:
    """The thread's state for the run: the client's when it sent one of its own."""
    saved = await api.agent.state.get_agent_state(thread_id)
    current = saved.data if saved is not None else {}
    if not isinstance(state, dict) or not state or state == current:
        return current
    try:
        await api.agent.state.set_agent_state(
            thread_id,
            AgentState(data=state),
            expected_version=saved.version if saved is not None else 0,
        )
    except StateConflictError:
        raise ApiError(
            409, "state_conflict", "the thread's state changed meanwhile: send the input again"
        ) from None
    return state


async def _resume(api: ApiState, run_input: RunAgentInput) -> RunHandle:
    """Resume the thread's paused run with the decisions of the input's resume entries."""
    from pes_agent.interop.agui import decision_of, tool_call_id

    thread_id = run_input.thread_id
    entries = run_input.resume or []
    pending = {
        tool_call_id(run.trace_id, call.call_id): (run, call.call_id)
        for run in await api.agent.pending_runs(thread_id)
        for call in run.pending
    }
    if not pending:
        raise ApiError(404, "run_not_waiting", "no run of this thread waits for approval")
    unknown = sorted(entry.interrupt_id for entry in entries if entry.interrupt_id not in pending)
    if unknown:
        raise ApiError(
            422,
            "unknown_interrupt_ids",
            f"these interrupts are not pending: {', '.join(unknown)}; "
            f"pending: {', '.join(sorted(pending))}",
        )
    paused = pending[entries[0].interrupt_id][0]
    decisions = {}
    for entry in entries:
        run, call_id = pending[entry.interrupt_id]
        if run.trace_id != paused.trace_id:
            raise ApiError(422, "invalid_resume", "resume entries must answer one run's interrupts")
        try:
            decisions[call_id] = decision_of(entry)
        except ValueError as error:
            raise ApiError(422, "invalid_resume", str(error)) from None
    missing = [
        interrupt
        for interrupt, (run, call_id) in sorted(pending.items())
        if run.trace_id == paused.trace_id and call_id not in decisions
    ]
    if missing:
        raise ApiError(
            422,
            "resume_incomplete",
            f"answer every pending interrupt; missing: {', '.join(missing)}",
        )
    # No await from here to `start_run` (see the decisions route).
    refuse_second_resume(api, paused.trace_id)
    props = paused.props.model_copy(update={"trace_id": paused.trace_id})
    return start_run(api, props, resume=decisions)


def _writer(told: AguiRun) -> Callable[[RunEvent], bytes]:
    """Writes each of the run's events as the AG-UI events `told` makes of it."""
    from pes_agent.interop.agui import encode

    def write(event: RunEvent) -> bytes:
        source = event.source
        if isinstance(source, MergedText):
            source = source.event
        if event.event == "ping":
            return b": ping\n\n"
        if event.event == "run":
            events = told.started()
        elif isinstance(source, Observation):
            events = told.observed(source)
        elif isinstance(source, StreamEvent):
            events = told.streamed(source)
        elif isinstance(source, AgentFinalResponse):
            events = told.finished(source)
        elif event.event == "error" and isinstance(source, dict):
            events = told.failed(str(source.get("type")), str(source.get("message")))
        else:
            return b""  # a gap in a replay: AG-UI has no word for it
        return b"".join(encode(item) for item in events)

    return write
