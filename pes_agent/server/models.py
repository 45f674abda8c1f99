"""The HTTP API's request and response bodies (pydantic models; the OpenAPI schemas)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pes_agent.approvals.models import Approve, Decision, Deny, PausedRun
from pes_agent.config import RunOptions, ThreadConfig
from pes_agent.observing.streams import StreamEventKind
from pes_agent.observing.types import Observation
from pes_agent.providers.base import LLMPhase
from pes_agent.run import AgentFinalResponse
from pes_agent.threads.messages import ConversationMessage

__all__ = [
    "SCHEMA_MODELS",
    "ApprovalList",
    "CancelResult",
    "DecisionBody",
    "DecisionsRequest",
    "ErrorBody",
    "ErrorDetail",
    "GapData",
    "MessageList",
    "ObservationList",
    "RunEndedData",
    "RunList",
    "RunRequest",
    "RunStartedData",
    "RunSummary",
    "StreamChunkData",
    "SubscribedData",
    "ThreadList",
    "schema_ref",
]

_ID = r"^[A-Za-z0-9_.:\-]{1,200}$"


class RunRequest(BaseModel):
    """`POST /v1/threads/{thread_id}/runs`: the question and options of one run."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    query: str = Field(min_length=1, max_length=200_000)
    options: RunOptions | None = None
    #: Give a trace id to make the request idempotent: a run this worker already has with it
    #: is attached to (with `Last-Event-ID`, resumed) instead of started again; one another
    #: worker has is a 409 (`GET /v1/runs/{trace_id}/events` follows it from any worker).
    trace_id: str | None = Field(default=None, pattern=_ID)
    session_id: str | None = Field(default=None, max_length=200)
    #: Only for unscoped callers; a token scoped to a user always runs as that user.
    user_id: str | None = Field(default=None, max_length=200)


class DecisionBody(BaseModel):
    """One decision: `{"approve": true}` or `{"approve": false, "reason": "too expensive"}`."""

    model_config = ConfigDict(extra="forbid")

    # `"yes"` or 1 would be taken as an approval otherwise.
    approve: bool = Field(strict=True)
    reason: str | None = Field(default=None, max_length=2000)

    def decision(self) -> Decision:
        """The library's `Approve()` or `Deny(reason)`."""
        if self.approve:
            return Approve()
        return Deny(self.reason) if self.reason else Deny()


class DecisionsRequest(BaseModel):
    """`POST .../runs/{trace_id}/decisions`: a decision for each pending call id."""

    model_config = ConfigDict(extra="forbid")

    decisions: dict[str, DecisionBody] = Field(min_length=1)


class ErrorDetail(BaseModel):
    """What went wrong: a stable `type` to branch on and a `message` for people."""

    type: str
    message: str


class ErrorBody(BaseModel):
    """Every 4xx/5xx answer: `{"error": {"type": ..., "message": ...}}`."""

    error: ErrorDetail


class ThreadList(BaseModel):
    """`GET /v1/threads`: the thread ids the caller may see, sorted."""

    threads: list[str]


class MessageList(BaseModel):
    """`GET /v1/threads/{id}/messages`: the history, oldest first."""

    messages: list[ConversationMessage]


class ObservationList(BaseModel):
    """`GET /v1/threads/{id}/observations`: in the order recorded; `next_after` is the cursor
    to pass as `after` for what comes later."""

    observations: list[Observation]
    next_after: str | None = None


class ApprovalList(BaseModel):
    """`GET /v1/approvals`: the runs waiting for a person's decisions."""

    runs: list[PausedRun]


class RunSummary(BaseModel):
    """One run of a thread, from its observations: how it went, when, and what was asked.

    `status` is the run's final status (`success`, `partial`, `error`, `cancelled`,
    `awaiting_approval`),
    `running` while a worker process serving this store executes it, or `unfinished` when it
    recorded no end (it stopped without a final response). `duration_ms` leaves out time
    spent waiting for approval.
    """

    trace_id: str
    status: str
    started_at: datetime
    duration_ms: float
    query: str | None = None
    llm_calls: int = 0
    tool_calls: int = 0


class RunList(BaseModel):
    """`GET /v1/threads/{id}/runs`: the thread's runs, oldest first."""

    runs: list[RunSummary]


class CancelResult(BaseModel):
    """`POST /v1/runs/{trace_id}/cancel`: what was cancelled.

    A run executing in the worker process that took the request is cancelled at once (200,
    with its `response`). One executing in another worker is asked to stop (202, `pending`
    true, `worker_id` naming that worker): it ends `cancelled` within about a second, unless
    it finishes first; its events and `GET /v1/threads/{id}/runs` show how it ended.
    `query` is what the run was asked (null for a run of another worker).
    """

    trace_id: str
    thread_id: str
    was: Literal["running", "awaiting_approval"]
    query: str | None = None
    response: AgentFinalResponse | None = None
    pending: bool = False
    worker_id: str | None = None


# -- the data of server-sent events (the `event` name says which) ---------------------------


class RunStartedData(BaseModel):
    """`run`, a run's first event. Followed from a worker other than the one executing it,
    the stream also names that `worker_id` and the run's `status` when the stream began."""

    thread_id: str
    trace_id: str
    worker_id: str | None = None
    status: str | None = None


class StreamChunkData(BaseModel):
    """`token` (answer text), `thinking` (thinking text) or `stream` (the model stream of a
    phase restarted, ended or failed: `kind` says which) as the model writes."""

    thread_id: str
    trace_id: str
    phase: LLMPhase
    kind: StreamEventKind
    text: str


class GapData(BaseModel):
    """`gap`: events were missed. In a run's own stream: `missed` events before the oldest
    kept (`resumed_at`); elsewhere: `Last-Event-ID` named no stored observation
    (`last_event_id`), and `message` says what was sent instead."""

    missed: int | None = None
    resumed_at: int | None = None
    last_event_id: str | None = None
    message: str | None = None


class RunEndedData(BaseModel):
    """`end`: the run followed from another worker ended with `status` (`lost` when the
    worker executing it stopped)."""

    thread_id: str
    trace_id: str
    status: str


class SubscribedData(BaseModel):
    """`subscribed`, a thread feed's first event: the observation it goes on `after` (None: the
    thread has none yet) and how many stored ones it `replayed`."""

    thread_id: str
    after: str | None
    replayed: int


#: Models whose JSON Schemas the OpenAPI document lists.
SCHEMA_MODELS: tuple[type[BaseModel], ...] = (
    RunStartedData,
    StreamChunkData,
    GapData,
    RunEndedData,
    SubscribedData,
    ErrorDetail,
    Observation,
    RunRequest,
    DecisionsRequest,
    ThreadConfig,
    ErrorBody,
    ThreadList,
    MessageList,
    ObservationList,
    ApprovalList,
    CancelResult,
    RunList,
    AgentFinalResponse,
)


def schema_ref(model: type[BaseModel]) -> dict[str, Any]:
    """A `$ref` to a model's schema in the OpenAPI components."""
    return {"$ref": f"#/components/schemas/{model.__name__}"}
