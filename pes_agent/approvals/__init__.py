"""Runs that wait for a person: approval rules, decisions and paused runs.

A call needs approval by `@tool(requires_approval=True)`, `create_agent(require_approval=...)`,
`ThreadConfig.require_approval` or `RunOptions.require_approval` (rules add up). Without an
`approval_handler` the run pauses (`status="awaiting_approval"`, stored in the agent's storage)
until `agent.resume(thread_id, trace_id, {call_id: Approve() | Deny(reason)})`, in any process
sharing that storage; with one, the handler decides in process and the run never pauses.
"""

from pes_agent.approvals.gate import (
    ApprovalGate,
    ApprovalHandler,
    ApprovalPredicate,
    ApprovalRule,
)
from pes_agent.approvals.models import (
    ApprovalContext,
    Approve,
    Decision,
    Deny,
    PausedRun,
    PendingApproval,
)

__all__ = [
    "ApprovalContext",
    "ApprovalGate",
    "ApprovalHandler",
    "ApprovalPredicate",
    "ApprovalRule",
    "Approve",
    "Decision",
    "Deny",
    "PausedRun",
    "PendingApproval",
]
