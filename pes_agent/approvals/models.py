"""The data of runs that wait for a person: decisions, pending calls and the paused run.

A paused run is stored as JSON (`PausedRun`) by every storage backend; `resume` reads it back,
possibly in another process, so everything in it is plain data.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pes_agent.planning.plan import ParsedToolCall, PlanningOutput
from pes_agent.run import AgentProps, PendingApproval
from pes_agent.tools.base import ToolResult
from pes_agent.usage import Usage, UsageLimits

__all__ = [
    "ApprovalContext",
    "Approve",
    "Decision",
    "Deny",
    "PausedRun",
    "PendingApproval",
]


class Approve(BaseModel):
    """Let a pending call run: `agent.resume(thread_id, trace_id, {"call_1": Approve()})`."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["approve"] = "approve"


class Deny(BaseModel):
    """Refuse a pending call: it becomes an error result naming `reason`, its dependents are
    skipped. `Deny("too expensive")`."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["deny"] = "deny"
    reason: str = "denied by the user"

    def __init__(self, reason: str | None = None, /, **data: Any) -> None:
        """Refuse a call, saying why.

        Args:
            reason: Why, shown to the model in the call's error result; `"denied by the
                user"` when None.
            **data: The fields by name, as pydantic reads them.
        """
        if reason is not None:
            data["reason"] = reason
        super().__init__(**data)


#: What a person decided about one pending call.
Decision = Annotated[Approve | Deny, Field(discriminator="kind")]


@dataclass(frozen=True, slots=True)
class ApprovalContext:
    """Who runs the call a `require_approval` predicate is asked about."""

    thread_id: str
    trace_id: str
    user_id: str | None = None
    session_id: str | None = None


def _now() -> datetime:
    return datetime.now(UTC)


class PausedRun(BaseModel):
    """A run waiting for decisions, as stored: enough to finish it in any process.

    `calls` is every call of the plan by step (revisions appended, `replaced_steps` never run),
    `results` the results of the steps that finished before the pause (by step number),
    `pending` the calls waiting for a decision and `decisions` the decisions already taken for
    calls that still wait for another one. `deadline` (from `approval_timeout_s`) is when the
    pending calls expire: a resume after it treats them as denied.

    The approval rules and usage limits in force at the pause travel with the run, because
    the process that resumes it may have been built without them: `require_approval` names
    every tool that needed approval (the agent's, thread's and run's names and the tools
    flagged with `requires_approval`), and `approval_predicate` says a predicate decided too.
    A resume adds them to its own rules; a predicate it does not have counts as asking a
    person about every call still undecided (it fails closed). Likewise `usage_limits`
    tighten the resuming agent's, counted from the `usage` and `tool_calls` before the pause.
    """

    thread_id: str
    trace_id: str
    props: AgentProps
    planning: PlanningOutput
    calls: list[ParsedToolCall]
    replaced_steps: list[int] = Field(default_factory=list)
    results: dict[int, ToolResult] = Field(default_factory=dict)
    pending: list[PendingApproval]
    decisions: dict[str, Decision] = Field(default_factory=dict)
    require_approval: list[str] = Field(default_factory=list)
    approval_predicate: bool = False
    created_at: datetime = Field(default_factory=_now)
    deadline: datetime | None = None
    #: The run's usage limits at the pause (the agent's, thread's and call's, tightened), and
    #: what it had used: the resumed run goes on against the same budget, whichever agent
    #: resumes it (its own limits can only tighten these).
    usage_limits: UsageLimits | None = None
    usage: Usage = Field(default_factory=Usage)
    #: The tool calls the run had started, counted while a `tool_calls` limit was in force.
    tool_calls: int = 0

    def expired(self, now: datetime | None = None) -> bool:
        """Tell whether the deadline for decisions has passed (then resuming denies the calls).

        Args:
            now: The time to compare with; the current time when None.

        Returns:
            True when the run has a deadline and `now` is at or past it.
        """
        return self.deadline is not None and (now or _now()) >= self.deadline
