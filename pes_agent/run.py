"""What goes into `AgentCore.process()` and what comes out of it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pes_agent.config import RunOptions
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
        # Positional or keyword, so nested validation (which passes keywords) works too.
        if query is not None:
            data["query"] = query
        if thread_id is not None:
            data["thread_id"] = thread_id
        super().__init__(**data)

    @field_validator("thread_id")
    @classmethod
    def _thread_id(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("thread_id must be a non-empty string, e.g. 'thread-1'")
        return value


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
