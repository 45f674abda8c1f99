"""Which planned calls need a person's approval, and what was decided about them.

Rules add up and never cancel each other: a call needs approval when its tool was made with
`@tool(requires_approval=True)`, or is named in (or matched by the predicate of)
`create_agent(require_approval=...)`, or is named in the thread's
`ThreadConfig.require_approval` or the call's `RunOptions.require_approval`. Language steps
call no tool and need none.

An `ApprovalGate` is what an executor consults for one run (`ExecutionContext.approvals`): it
answers `requires(call)` and, for a call that does, `decide(...)`: the decision taken already
(at a resume), the `approval_handler`'s answer (in-process mode), or `None` after noting the
call as pending (the run will pause). On a durable engine, asking the handler is the step
`pes_agent.approval` (`APPROVAL_STEP`): its decision is kept with the run, so a run taken over
by another worker never asks again, and the handler runs where steps run (it may do I/O).

A decision taken is law, whatever the rules of the process that resumes the run: a call with
a stored decision always goes through it (a denied call never runs), and the rules in force at
the pause are stored with the run and added to the resuming agent's (`PausedRun`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pes_agent.approvals.models import (
    ApprovalContext,
    Approve,
    Decision,
    Deny,
    PendingApproval,
)
from pes_agent.errors import UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.observing.types import ObservationType
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.tools.base import Tool, ToolResult, needs_approval

if TYPE_CHECKING:
    from pes_agent.durable.effects import RunEffects

__all__ = [
    "APPROVAL_STEP",
    "ApprovalGate",
    "ApprovalHandler",
    "ApprovalPredicate",
    "ApprovalRule",
    "ask_always",
    "check_approval_rule",
    "decided_content",
    "denial_message",
]

_log = get_logger("pes_agent.approvals")

#: `predicate(call, context) -> bool`: True when the call needs approval. `call.arguments` are
#: resolved when the call is about to run (raw, placeholders included, when it waits for a
#: call that itself waits for approval).
ApprovalPredicate = Callable[[ParsedToolCall, ApprovalContext], bool]
#: Tool names, or a predicate.
ApprovalRule = Sequence[str] | ApprovalPredicate
#: `async handler(pending) -> bool`: approves (True) or denies (False) a call in process.
ApprovalHandler = Callable[[PendingApproval], Awaitable[bool]]
Record = Callable[[ObservationType, str, dict[str, Any]], Awaitable[object]]

APPROVAL_STEP = "pes_agent.approval"
"""The durable step that asks the `approval_handler` about one call (persisted: never rename)."""


def ask_always(call: ParsedToolCall, context: ApprovalContext) -> bool:
    """A predicate that puts every call to a person: what a resume uses in place of the
    pausing agent's predicate when its own agent has none (it fails closed)."""
    return True


def check_approval_rule(
    rule: object, where: str
) -> tuple[frozenset[str], ApprovalPredicate | None]:
    """`rule` as tool names and a predicate; a `UsageError` naming `where` when it is neither."""
    if rule is None:
        return frozenset(), None
    if isinstance(rule, str | bytes):
        raise UsageError(
            f"{where} must be a list of tool names, e.g. [{str(rule)!r}], or a predicate "
            "function (call, context) -> bool; got a single string"
        )
    if callable(rule):
        return frozenset(), rule
    if isinstance(rule, Iterable):
        names = list(rule)
        bad = [name for name in names if not isinstance(name, str) or not name]
        if bad:
            raise UsageError(
                f"{where} must name tools by their (non-empty) names, e.g. ['transfer_money']; "
                f"got {bad[0]!r}"
            )
        return frozenset(names), None
    raise UsageError(
        f"{where} must be a list of tool names or a predicate function (call, context) -> "
        f"bool; got {type(rule).__name__}"
    )


class ApprovalGate:
    """The approval rules and decisions of one run, consulted by the executor call by call.

    `prior` holds the results of the steps finished before a pause (a resume does not run them
    again) and `replaced` the steps a plan revision replaced; the executor fills `pending` (the
    calls waiting for a decision) and `held` (the steps not run because they wait).
    """

    def __init__(
        self,
        *,
        tools: Mapping[str, Tool],
        names: frozenset[str],
        predicate: ApprovalPredicate | None,
        context: ApprovalContext,
        handler: ApprovalHandler | None = None,
        record: Record | None = None,
        decisions: Mapping[str, Decision] | None = None,
        prior: Mapping[int, ToolResult] | None = None,
        replaced: Iterable[int] = (),
        effects: RunEffects | None = None,
    ) -> None:
        self._tools = tools
        self._names = names
        self._predicate = predicate
        self._context = context
        self._handler = handler
        self._record = record
        self._effects = effects
        self.decisions: dict[str, Decision] = dict(decisions or {})
        self.prior: dict[int, ToolResult] = dict(prior or {})
        self.replaced = frozenset(replaced)
        self.pending: list[PendingApproval] = []
        self.held: set[int] = set()

    @property
    def pauses(self) -> bool:
        """Whether an undecided call pauses the run (no `approval_handler`)."""
        return self._handler is None

    @property
    def rule_names(self) -> frozenset[str]:
        """Every tool name that needs approval: the names given and the flagged tools."""
        flagged = (name for name, tool in self._tools.items() if needs_approval(tool))
        return self._names.union(flagged)

    @property
    def has_predicate(self) -> bool:
        """Whether a predicate decides which calls need approval too."""
        return self._predicate is not None

    def requires(self, call: ParsedToolCall) -> bool:
        """Whether `call` may run only with a decision approving it."""
        if call.instruction is not None:
            return False
        if call.call_id in self.decisions:
            # A decision taken is law, whether or not this process's rules ask for one.
            return True
        tool = self._tools.get(call.tool_name)
        if needs_approval(tool) or call.tool_name in self._names:
            return True
        if self._predicate is None:
            return False
        try:
            return bool(self._predicate(call, self._context))
        except Exception:
            # Fail closed: a predicate that cannot answer must not let the call run unasked.
            _log.exception("approval_predicate_failed", call_id=call.call_id, tool=call.tool_name)
            return True

    def undecided(self, call: ParsedToolCall) -> bool:
        """Whether `call` needs approval and has no decision yet (pause mode only)."""
        return self.pauses and call.call_id not in self.decisions and self.requires(call)

    def hold(self, call: ParsedToolCall, step: int) -> None:
        """`call` (at `step`) waits for a call waiting for approval; if it needs approval
        itself, it is pending too, with its arguments as planned."""
        self.held.add(step)
        if self.undecided(call):
            self._add_pending(call, call.arguments, step, resolved=False)

    async def decide(
        self, call: ParsedToolCall, arguments: dict[str, Any], step: int
    ) -> Decision | None:
        """The decision about a call that needs approval, its arguments resolved; None when
        it must wait (noted as pending, `step` held)."""
        decided = self.decisions.get(call.call_id)
        if decided is not None:
            return decided
        pending = PendingApproval(
            call_id=call.call_id, tool_name=call.tool_name, arguments=arguments, step=step
        )
        if self._handler is None:
            self.held.add(step)
            self._add_pending(call, arguments, step, resolved=True)
            return None
        if self._effects is None:
            decision = await self._ask(pending)
        else:
            # A step: the decision is kept with the run, so a run taken over by another
            # worker gets it from the record and never asks again (maybe to another answer).
            decision = await self._effects.once(APPROVAL_STEP, lambda: self._ask(pending))
        self.decisions[call.call_id] = decision
        return decision

    async def _ask(self, pending: PendingApproval) -> Decision:
        """The handler's decision about `pending`, with its request and decision observed."""
        assert self._handler is not None
        await self._note(
            ObservationType.APPROVAL_REQUESTED,
            f"Approval requested: {pending.tool_name}",
            {
                "callId": pending.call_id,
                "toolName": pending.tool_name,
                "arguments": pending.arguments,
                "step": pending.step,
                "resolved": pending.resolved,
                "mode": "handler",
            },
        )
        try:
            approved = await self._handler(pending)
        except Exception as exc:
            # A handler that fails has not approved anything.
            _log.exception("approval_handler_failed", call_id=pending.call_id)
            decision: Decision = Deny(f"the approval handler failed: {type(exc).__name__}")
        else:
            decision = Approve() if approved is True else Deny("denied by the approval handler")
        await self._note(
            ObservationType.APPROVAL_DECIDED,
            f"Approval {'granted' if isinstance(decision, Approve) else 'denied'}: "
            f"{pending.tool_name}",
            decided_content(pending.call_id, pending.tool_name, decision),
        )
        return decision

    def _add_pending(
        self,
        call: ParsedToolCall,
        arguments: dict[str, Any] | list[Any],
        step: int,
        *,
        resolved: bool,
    ) -> None:
        if any(p.step == step for p in self.pending):
            return
        self.pending.append(
            PendingApproval(
                call_id=call.call_id,
                tool_name=call.tool_name,
                arguments=arguments,
                step=step,
                resolved=resolved,
            )
        )

    async def _note(self, type: ObservationType, title: str, content: dict[str, Any]) -> None:
        if self._record is not None:
            await self._record(type, title, content)


def decided_content(call_id: str, tool_name: str, decision: Decision) -> dict[str, Any]:
    """The content of an APPROVAL_DECIDED observation."""
    content: dict[str, Any] = {
        "callId": call_id,
        "toolName": tool_name,
        "decision": decision.kind,
    }
    if isinstance(decision, Deny):
        content["reason"] = decision.reason
    return content


def denial_message(decision: Deny) -> str:
    """The error of a denied call's result."""
    return f"Not run: approval was denied ({decision.reason})."
