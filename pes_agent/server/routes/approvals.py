"""Approvals: the runs waiting for a decision on their tool calls, and the decisions that
resume one (`/v1/approvals`, `/v1/threads/{thread_id}/runs/{trace_id}/decisions`)."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pes_agent.server.auth import Caller
from pes_agent.server.errors import ApiError, finished, segment
from pes_agent.server.inputs import flag, thread_id_of
from pes_agent.server.launch import answer_run, start_run
from pes_agent.server.models import ApprovalList, DecisionsRequest
from pes_agent.server.state import ApiEndpoint, ApiState
from pes_agent.threads.ids import thread_id_problem

__all__ = ["routes"]


def routes(auth: Sequence[Middleware]) -> list[Route]:
    """The approval routes, each behind the bearer-token middleware `auth`."""
    return [
        Route("/v1/approvals", Approvals, methods=["GET"], middleware=auth),
        Route(
            "/v1/threads/{thread_id}/runs/{trace_id}/decisions",
            Decisions,
            methods=["POST"],
            middleware=auth,
        ),
    ]


class Approvals(ApiEndpoint):
    """The runs waiting for approval."""

    async def get(self, request: Request) -> Response:
        """The caller's paused runs (of one thread with `thread_id`), with their pending calls."""
        caller: Caller = request.user
        api = self.api
        thread_id = request.query_params.get("thread_id")
        problem = None if thread_id is None else thread_id_problem(thread_id)
        if problem is not None:
            raise ApiError(400, "invalid_thread_id", problem)
        runs = await api.agent.pending_runs(thread_id)
        if caller.scoped:
            runs = [run for run in runs if await api.owns(caller, run.thread_id)]
        return JSONResponse(ApprovalList(runs=runs).model_dump(mode="json"))


class Decisions(ApiEndpoint):
    """Decisions on a paused run's calls."""

    async def post(self, request: Request) -> Response:
        """Resume the paused run with a decision for each of its pending calls."""
        caller: Caller = request.user
        api = self.api
        thread_id = thread_id_of(request)
        trace_id: str = request.path_params["trace_id"]
        cancel_on_disconnect = flag(request, "cancel_on_disconnect")
        body = await api.body(request, DecisionsRequest)
        await api.authorize(caller, thread_id)
        paused = next(
            (run for run in await api.agent.pending_runs(thread_id) if run.trace_id == trace_id),
            None,
        )
        # No await from here to `start_run`: of two decisions racing in this process, the
        # first to get here resumes the run, and the other is refused by the check below.
        # (Another worker's record cannot tell: just after a pause it still says the run
        # executes.)
        refuse_second_resume(api, trace_id)
        if paused is None:
            raise ApiError(404, "run_not_waiting", "no run with that trace id waits for approval")
        ended = api.runs.get(trace_id)
        if ended is not None and ended.response is not None:
            status = ended.response.metadata.status
            if status != "awaiting_approval":
                # Resumed here and ended while the store was read: it waits no more.
                raise finished(trace_id, status)
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
        handle = start_run(api, props, resume=decisions)
        return await answer_run(api, request, handle, cancel_on_disconnect)


def refuse_second_resume(api: ApiState, trace_id: str) -> None:
    """Refuse decisions for a run this process already resumes: a second resume task would
    take the place of the one that runs in the registry and feeds, so that cancel and
    streams reached an idle task while the approved calls ran on."""
    local = api.runs.get(trace_id)
    if local is not None and not local.done:
        raise ApiError(
            409,
            "run_resuming",
            f"the run {trace_id} was already resumed by decisions sent before: follow it "
            f"(GET /v1/runs/{segment(trace_id)}/events) or cancel it "
            f"(POST /v1/runs/{segment(trace_id)}/cancel)",
        )
