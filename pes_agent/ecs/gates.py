"""PermissionSystem and ToolApprovalSystem [-5]: the gates a pending tool call must pass.

A gate is switched on per entity by its component: `PermissionComponent` (which tools may run)
and `ToolApprovalComponent` (a policy, or a person deciding). A gate never runs a call; it
marks the calls it clears in `PendingToolCallsComponent.approved_by`, and answers the calls it
refuses with an error tool message (so the model's next request is valid) plus a
`ToolDeniedEvent`.

**No bypass.** `ToolExecutionSystem` runs a call only when *every* gate component present on
the entity has marked it (`cleared`). That holds under any schedule: the model's calls appear
at priority 0, after the gates ran in that tick, and execution runs at 5 in the same tick — it
finds them unmarked and leaves them for the gates' next pass. An entity carrying a gate
component whose system is not registered keeps its calls pending: unchecked calls never run.

**Waiting for a person.** With `ApprovalPolicy.REQUIRE_APPROVAL` each call is put to a person
through `ToolApprovalRequestedEvent(entity_id, tool_call, future)`: `future.set_result(True)`
approves, `False` (or anything but True, an exception, a cancellation) denies. The system
checks the future on every tick and never awaits it, so other entities go on meanwhile; no
subscriber at all, or no answer within `timeout_s`, denies. A handler must not wait for the
person itself (the bus awaits handlers inside the tick): it hands the future to a task or UI
that resolves it later. A person is asked only about calls the entity's `PermissionComponent`
(if any) already allows.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

from ecs_core import EntityId, ErrorComponent, World
from pes_agent.ecs._pending import refuse_call
from pes_agent.ecs.components import (
    ApprovalPolicy,
    PendingToolCallsComponent,
    PermissionComponent,
    ToolApprovalComponent,
)
from pes_agent.ecs.events import ToolApprovalRequestedEvent, ToolApprovedEvent, ToolDeniedEvent
from pes_agent.observing.logs import get_logger
from pes_agent.tools.calls import ToolCall

__all__ = [
    "APPROVAL_GATE",
    "GATES",
    "PERMISSION_GATE",
    "PermissionSystem",
    "ToolApprovalSystem",
    "cleared",
]

PERMISSION_GATE = "permission"
APPROVAL_GATE = "approval"
#: Each gate component and the mark its system leaves on the calls it clears.
GATES: tuple[tuple[type[Any], str], ...] = (
    (PermissionComponent, PERMISSION_GATE),
    (ToolApprovalComponent, APPROVAL_GATE),
)

_log = get_logger("pes_agent.ecs.gates")


def cleared(
    world: World, entity: EntityId, pending: PendingToolCallsComponent, call: ToolCall
) -> bool:
    """Whether every gate component on `entity` has cleared `call` (True with no gates)."""
    marks = pending.approved_by.get(call.id, ())
    return all(mark in marks for component, mark in GATES if world.has_component(entity, component))


async def _deny(world: World, entity: EntityId, call: ToolCall, reason: str) -> None:
    await refuse_call(world, entity, call, reason)
    await world.events.publish(ToolDeniedEvent(entity, call, reason))


def _mark(pending: PendingToolCallsComponent, call: ToolCall, gate: str) -> None:
    pending.approved_by.setdefault(call.id, set()).add(gate)


def _still_pending(pending: PendingToolCallsComponent, call: ToolCall) -> bool:
    # The other gate runs concurrently and may have refused the call while this one awaited.
    return any(queued is call for queued in pending.tool_calls)


class PermissionSystem:
    """Refuses pending calls to tools the entity's `PermissionComponent` does not allow.

    A tool in `denied` is refused; with `allowed` set, so is any tool not in it. Every other
    call is cleared for this gate.
    """

    async def process(self, world: World) -> None:
        """Check every unchecked pending call of every entity with a `PermissionComponent`."""
        for entity, (permission, pending) in world.query(
            PermissionComponent, PendingToolCallsComponent
        ):
            try:
                for call in list(pending.tool_calls):
                    if not _still_pending(pending, call):
                        continue
                    if PERMISSION_GATE in pending.approved_by.get(call.id, ()):
                        continue
                    reason = _forbidden(permission, call.name)
                    if reason is None:
                        _mark(pending, call, PERMISSION_GATE)
                    else:
                        await _deny(world, entity, call, reason)
            except Exception as error:
                _failed(world, entity, error, type(self).__name__)


def _forbidden(permission: PermissionComponent, tool_name: str) -> str | None:
    if tool_name in permission.denied:
        return f'Not run: tool "{tool_name}" is not permitted for this agent.'
    if permission.allowed is not None and tool_name not in permission.allowed:
        return f'Not run: tool "{tool_name}" is not among the tools this agent may use.'
    return None


class ToolApprovalSystem:
    """Approves, denies or asks a person about each pending call, by the entity's policy.

    `ALWAYS_APPROVE` clears every call (`ToolApprovedEvent`), `ALWAYS_DENY` refuses every call
    (`ToolDeniedEvent`), `REQUIRE_APPROVAL` asks a person (see the module docstring). The open
    questions live in the component (`waiting`, `asked_at`), so one system serves many
    entities and a question outlives the tick it was asked in.
    """

    async def process(self, world: World) -> None:
        """Decide what can be decided now for every entity with a `ToolApprovalComponent`."""
        for entity, (approval,) in world.query(ToolApprovalComponent):
            pending = world.get_component(entity, PendingToolCallsComponent)
            _forget_answered_elsewhere(approval, pending)
            if pending is None:
                continue
            try:
                await self._decide(world, entity, approval, pending)
            except Exception as error:
                _failed(world, entity, error, type(self).__name__)

    async def _decide(
        self,
        world: World,
        entity: EntityId,
        approval: ToolApprovalComponent,
        pending: PendingToolCallsComponent,
    ) -> None:
        ask_after_permission = world.has_component(entity, PermissionComponent)
        for call in list(pending.tool_calls):
            if not _still_pending(pending, call):
                continue
            marks = pending.approved_by.get(call.id, ())
            if APPROVAL_GATE in marks:
                continue
            if ask_after_permission and PERMISSION_GATE not in marks:
                continue  # no one decides about a call the permissions may still refuse
            verdict = await self._verdict(world, entity, approval, call)
            if verdict is None:
                continue  # still waiting for the person
            if verdict is True:
                _mark(pending, call, APPROVAL_GATE)
                await world.events.publish(ToolApprovedEvent(entity, call))
            else:
                await _deny(world, entity, call, verdict)

    async def _verdict(
        self, world: World, entity: EntityId, approval: ToolApprovalComponent, call: ToolCall
    ) -> Literal[True] | str | None:
        """True to approve, a reason to deny, None while waiting for an answer."""
        policy = approval.policy
        if policy is ApprovalPolicy.ALWAYS_APPROVE:
            return True
        if policy is ApprovalPolicy.ALWAYS_DENY:
            return f'Not run: calls to "{call.name}" are denied by this agent\'s policy.'
        future = approval.waiting.get(call.id)
        if future is None:
            if not world.events.handler_count(ToolApprovalRequestedEvent):
                return (
                    f'Not run: "{call.name}" needs approval and no one was asked (nothing '
                    "subscribes to ToolApprovalRequestedEvent)."
                )
            future = asyncio.get_running_loop().create_future()
            approval.waiting[call.id] = future
            approval.asked_at[call.id] = time.monotonic()
            await world.events.publish(ToolApprovalRequestedEvent(entity, call, future))
        if future.done():
            approval.waiting.pop(call.id, None)
            approval.asked_at.pop(call.id, None)
            return _answer(future, call)
        asked = approval.asked_at.get(call.id, time.monotonic())
        if time.monotonic() - asked >= approval.timeout_s:
            future.cancel()
            approval.waiting.pop(call.id, None)
            approval.asked_at.pop(call.id, None)
            return f'Not run: no one approved "{call.name}" within {approval.timeout_s:g}s.'
        return None


def _answer(future: asyncio.Future[bool], call: ToolCall) -> Literal[True] | str:
    if future.cancelled():
        return f'Not run: the approval request for "{call.name}" was cancelled.'
    error = future.exception()
    if error is not None:
        return f'Not run: the approval of "{call.name}" failed: {error}'
    # Only an explicit True approves: a truthy mistake must not run a tool.
    if future.result() is True:
        return True
    return f'Not run: a person denied the call to "{call.name}".'


def _forget_answered_elsewhere(
    approval: ToolApprovalComponent, pending: PendingToolCallsComponent | None
) -> None:
    """Drop questions about calls that left the queue another way (another gate refused them)."""
    open_ids = {call.id for call in pending.tool_calls} if pending is not None else set()
    for call_id in [c for c in approval.waiting if c not in open_ids]:
        approval.waiting.pop(call_id).cancel()
        approval.asked_at.pop(call_id, None)


def _failed(world: World, entity: EntityId, error: Exception, system: str) -> None:
    # One entity's trouble must not keep the gate from the others; the calls stay pending,
    # so nothing runs unchecked.
    _log.warning("gate_failed", entity=entity, system=system, error=str(error))
    if world.entity_exists(entity):
        world.add_component(entity, ErrorComponent(error, system))
