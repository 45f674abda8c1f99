"""PlanPhaseSystem [0]: the query becomes intent, title, plan and tool calls."""

from __future__ import annotations

from typing import ClassVar

from pes_agent.observing.types import ObservationType
from pes_agent.pes.base import PhaseRun, PhaseSystem, passages_of, returned
from pes_agent.pes.components import Phase, Planned
from pes_agent.pes.resources import ResourceTable
from pes_agent.planning.plan import PlanningOutput
from pes_agent.protocols import Planner, PlanningContext

__all__ = ["PlanPhaseSystem"]


class PlanPhaseSystem(PhaseSystem[()]):
    """Runs the planner for each new run and records PLAN, TITLE, INTENT and THOUGHTS."""

    phase: ClassVar[Phase] = "planning"
    done_when = (Planned,)

    def __init__(self, resources: ResourceTable, planner: Planner) -> None:
        super().__init__(resources)
        self._planner = planner

    async def run(self, run: PhaseRun) -> None:
        spec = run.spec
        await run.recorder.record(
            ObservationType.PLAN,
            "Preparing a plan",
            {"status": "preparing", "tools": [schema.name for schema in spec.tool_schemas]},
        )
        planned = await self._planner.plan(
            PlanningContext(
                props=spec.props,
                thread_id=spec.thread_id,
                trace_id=spec.trace_id,
                system_prompt=spec.system_prompt,
                history=spec.history,
                tools=spec.tool_schemas,
                state=spec.thread.state,
                llm=run.llm,
                llm_params=spec.llm_params,
                provider=run.llm.provider,
                record=run.recorder.record,
                passages=passages_of(run),
            )
        )
        output = returned(planned, PlanningOutput, self._planner, "plan")
        raw = next(
            (text for phase, text in reversed(run.llm.outputs) if phase != "synthesis"),
            None,
        )
        if output.title:
            await run.recorder.record(ObservationType.TITLE, "Title", {"title": output.title})
        if output.intent:
            await run.recorder.record(ObservationType.INTENT, "Intent", {"intent": output.intent})
        for thought in output.thoughts or ():
            await run.recorder.record(
                ObservationType.THOUGHTS, "Thinking", {"phase": "planning", "text": thought}
            )
        calls = output.tool_calls or []
        await run.recorder.record(
            ObservationType.PLAN,
            "Plan ready",
            {
                "status": "ready",
                "plan": output.plan,
                "toolCalls": [call.model_dump() for call in calls],
                "raw": raw,
            },
        )
        run.add(Planned(output=output, raw=raw))
