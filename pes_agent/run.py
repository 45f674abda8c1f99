"""What goes into `AgentCore.process()` and what comes out of it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pes_agent.config import RunOptions
from pes_agent.errors import UsageError
from pes_agent.threads.ids import check_thread_id
from pes_agent.threads.messages import ConversationMessage
from pes_agent.usage import Usage

__all__ = [
    "AgentFinalResponse",
    "AgentProps",
    "ExecutionMetadata",
    "PendingApproval",
    "PhaseDurations",
    "RunStatus",
]

# "cancelled": `aclose(timeout=...)` or `cancel_pending` stopped the run; a caller cancelling
# its own task gets CancelledError instead, as asyncio code expects. "awaiting_approval": the
# run paused for a person's decisions (`metadata.pending_approvals`; `AgentCore.resume`).
RunStatus = Literal["success", "partial", "error", "cancelled", "awaiting_approval"]


class AgentProps(BaseModel):
    """One request to the agent: `AgentProps("What's 12*7?", "thread-1")`."""

    model_config = ConfigDict(frozen=True)

    query: str
    thread_id: str
    session_id: str | None = None
    user_id: str | None = None
    trace_id: str | None = None
    options: RunOptions | None = None

    def __init__(self, query: str | None = None, thread_id: str | None = None, /, **data: Any):
        """Ask `query` on thread `thread_id`: `AgentProps("What's 12*7?", "thread-1")`.

        Args:
            query: The user's request.
            thread_id: The conversation it belongs to; earlier turns on it are the history.
            **data: The other fields by name: `session_id`, `user_id`, `trace_id` (the run's
                id; generated when None) and `options` (a `RunOptions` for this run only).

        Raises:
            UsageError: There is no thread id, or `pes_agent.threads.ids` refuses it.
        """
        if query is not None:
            data["query"] = query
        if thread_id is not None:
            data["thread_id"] = thread_id
        if "thread_id" not in data:
            raise UsageError(
                'AgentProps needs a thread id: AgentProps("your question", "thread-1")'
            )
        check_thread_id(data["thread_id"])
        super().__init__(**data)

    # Only a request made in code is checked here, with a UsageError rather than pydantic's
    # ValidationError (a UsageError is a ValueError, which a validator would turn into one).
    # Validation from data (`model_validate`, the props inside a stored `PausedRun`) skips this
    # __init__, so a run stored before the rule (or under another version of it) still reads
    # back and every listing of paused runs works; `AgentCore.process` checks the id again.
    # The marker is pydantic's own (its BaseModel.__init__ carries it) for an __init__ that
    # validation need not call; tests/pes_agent/threads/test_ids.py fails if it stops working.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]


class PhaseDurations(BaseModel):
    """Wall time of each phase of a run, in milliseconds."""

    load_ms: float = 0.0
    retrieval_ms: float = 0.0
    planning_ms: float = 0.0
    execution_ms: float = 0.0
    synthesis_ms: float = 0.0
    finalization_ms: float = 0.0


class PendingApproval(BaseModel):
    """A planned call that waits for a decision.

    `arguments` are resolved (`resolved=True`) when every step the call depends on had
    finished at the pause; otherwise (it depends on another call waiting for approval) they
    are the planned arguments, `{step_N_result}` placeholders included, resolved only once the
    run resumes. `step` is the call's 1-based position in the plan.
    """

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool_name: str
    arguments: dict[str, Any] | list[Any] = Field(default_factory=dict)
    step: int = 0
    resolved: bool = True


class ExecutionMetadata(BaseModel):
    """How a run went: status, counts, usage and timings."""

    thread_id: str
    trace_id: str
    user_id: str | None = None
    status: RunStatus
    total_duration_ms: float
    llm_calls: int = 0
    tool_calls: int = 0
    error: str | None = None
    usage: Usage = Field(default_factory=Usage)
    phases: PhaseDurations = Field(default_factory=PhaseDurations)
    #: With status "awaiting_approval": the calls waiting for a decision.
    pending_approvals: list[PendingApproval] = Field(default_factory=list)


class AgentFinalResponse(BaseModel):
    """The agent's answer (`response.content`) and how it was reached (`metadata`)."""

    response: ConversationMessage
    metadata: ExecutionMetadata
