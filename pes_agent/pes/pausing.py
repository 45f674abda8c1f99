"""PauseSystem [15]: a run whose calls wait for approval is stored, then ends for now.

The paused run is written in one atomic step before any APPROVAL_REQUESTED observation is
recorded, so whoever sees the request can resume the run. Nothing of the turn is saved: the
user and AI messages are committed once, when the resumed run finishes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import ClassVar

from ecs_core import TerminalComponent
from pes_agent.approvals.models import PausedRun
from pes_agent.observing.types import ObservationType
from pes_agent.pes.base import PhaseRun, PhaseSystem
from pes_agent.pes.components import Paused, Phase, Planned
from pes_agent.pes.resources import ResourceTable
from pes_agent.storage.base import Storage

__all__ = ["PauseSystem"]


class PauseSystem(PhaseSystem[Planned, Paused]):
    """Stores each paused run (deadline `approval_timeout_s` from now) and records an
    APPROVAL_REQUESTED observation per pending call."""

    # Storing the run is its finalization for now (and leaves the execution timing alone).
    phase: ClassVar[Phase] = "finalization"
    done_when = (TerminalComponent,)

    def __init__(self, resources: ResourceTable, storage: Storage, timeout_s: float | None) -> None:
        super().__init__(resources)
        self._storage = storage
        self._timeout_s = timeout_s

    async def run(self, run: PhaseRun, planned: Planned, paused: Paused) -> None:
        spec = run.spec
        now = datetime.now(UTC)
        deadline = None if self._timeout_s is None else now + timedelta(seconds=self._timeout_s)
        budget = run.resources.budget
        stored = PausedRun(
            thread_id=spec.thread_id,
            trace_id=spec.trace_id,
            props=spec.props,
            planning=planned.output,
            calls=paused.calls,
            replaced_steps=paused.replaced_steps,
            results=paused.results,
            pending=paused.pending,
            decisions=paused.decisions,
            require_approval=paused.require_approval,
            approval_predicate=paused.approval_predicate,
            created_at=now,
            deadline=deadline,
            usage_limits=budget.limits if budget is not None else None,
            usage=(
                budget.spent + run.resources.llm.usage
                if budget is not None
                else run.resources.llm.usage
            ),
            tool_calls=budget.tool_calls if budget is not None else 0,
        )

        async def pause() -> None:
            await self._storage.save_paused_run(stored)

        effects = run.resources.effects
        await (pause() if effects is None else effects.once("pes_agent.pause", pause))
        for pending in paused.pending:
            await run.resources.recorder.record(
                ObservationType.APPROVAL_REQUESTED,
                f"Approval requested: {pending.tool_name}",
                {
                    "callId": pending.call_id,
                    "toolName": pending.tool_name,
                    "arguments": pending.arguments,
                    "step": pending.step,
                    "resolved": pending.resolved,
                    "mode": "paused",
                    "deadline": None if deadline is None else deadline.isoformat(),
                },
            )
        run.add(TerminalComponent(reason="awaiting approval"))
