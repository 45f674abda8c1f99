"""PlanPhaseSystem [0]: the query becomes intent, title, plan and tool calls.

When the executor can run a plan while it streams (streaming dispatch, DESIGN §13), the
planner gets a `CallDispatch` and submits each call the moment the model has written it: the
calls start before the plan is complete. This phase then records the plan, waits for the calls
started and leaves their results (`Dispatched`) with `Planned`, so the execution phase only
concludes. A planner that submits nothing (a custom one, or an answer the reader does not
stream) leaves the whole plan to the execution phase, as before.
"""

from __future__ import annotations

import time
from typing import ClassVar

from pes_agent.observing.types import ObservationType
from pes_agent.pes.base import PhaseRun, PhaseSystem, passages_of, returned
from pes_agent.pes.components import Phase, Planned
from pes_agent.pes.dispatch import RunDispatch
from pes_agent.pes.execution import Execution
from pes_agent.pes.resources import ResourceTable
from pes_agent.planning.plan import ParsedToolCall, PlanningOutput
from pes_agent.protocols import Planner, PlanningContext

__all__ = ["PlanPhaseSystem"]

# `call.model_dump()` of a plain `ParsedToolCall` is its serializer's `to_python(call)`: called
# directly for each call of the PLAN observation (a subclass, which may override
# `model_dump`, is asked the usual way).
_CALL_SERIALIZER = ParsedToolCall.__pydantic_serializer__


class PlanPhaseSystem(PhaseSystem[()]):
    """Runs the planner for each new run and records PLAN, TITLE, INTENT and THOUGHTS."""

    phase: ClassVar[Phase] = "planning"
    done_when = (Planned,)

    def __init__(self, resources: ResourceTable, planner: Planner, execution: Execution) -> None:
        super().__init__(resources)
        self._planner = planner
        self._execution = execution

    async def run(self, run: PhaseRun) -> None:
        spec = run.spec
        await run.resources.recorder.record(
            ObservationType.PLAN,
            "Preparing a plan",
            {"status": "preparing", "tools": [schema.name for schema in spec.tool_schemas]},
        )
        started = time.perf_counter()
        dispatch = self._execution.dispatch(run)
        try:
            try:
                # Awaited here, not in a helper coroutine: one coroutine fewer per run
                # while the model answers.
                planned_by = await self._planner.plan(_planning_context(run, dispatch))
                output = returned(planned_by, PlanningOutput, self._planner, "plan")
            except Exception as error:
                if dispatch is not None:
                    await dispatch.discard(_budget_stop(run) or f"planning failed: {error}")
                raise
            planning_ms = (time.perf_counter() - started) * 1000
            planned = Planned(output=output, raw=_raw_output(run))
            await _record_plan(run, planned)
            try:
                dispatched = (
                    await dispatch.finish(output.tool_calls or []) if dispatch is not None else None
                )
            except Exception:
                stop = _budget_stop(run)
                if dispatch is not None and stop is not None:
                    await dispatch.discard(stop)  # records the calls the stop cancelled
                raise
        finally:
            if dispatch is not None:
                await dispatch.close()  # failed or cancelled: stop what still runs
        if dispatched is not None:
            # The calls ran while the plan streamed: the two phases overlap.
            run.timings.planning_ms = planning_ms
            run.timings.execution_ms = (time.perf_counter() - started) * 1000 - planning_ms
            run.add(dispatched)
        run.add(planned)


def _planning_context(run: PhaseRun, dispatch: RunDispatch | None) -> PlanningContext:
    """What the planner gets to plan `run`, with the dispatch its calls may start on."""
    spec = run.spec
    return PlanningContext(
        props=spec.props,
        thread_id=spec.thread_id,
        trace_id=spec.trace_id,
        system_prompt=spec.system_prompt,
        history=spec.history,
        tools=spec.tool_schemas,
        state=spec.thread.state,
        llm=run.resources.llm,
        llm_params=spec.llm_params,
        provider=run.resources.llm.provider,
        record=run.resources.recorder.record,
        passages=passages_of(run),
        dispatch=dispatch,
    )


def _raw_output(run: PhaseRun) -> str | None:
    """The model's last planning (or repair) answer, as the PLAN observation shows it."""
    for phase, text in reversed(run.resources.llm.outputs):
        if phase != "synthesis":
            return text
    return None


async def _record_plan(run: PhaseRun, planned: Planned) -> None:
    """TITLE, INTENT, THOUGHTS, then PLAN ready: the calls, and the model's plan text if it
    wrote one (the compact protocol's plan is its calls alone)."""
    output = planned.output
    if output.title:
        await run.resources.recorder.record(ObservationType.TITLE, "Title", {"title": output.title})
    if output.intent:
        await run.resources.recorder.record(
            ObservationType.INTENT, "Intent", {"intent": output.intent}
        )
    for thought in output.thoughts or ():
        await run.resources.recorder.record(
            ObservationType.THOUGHTS, "Thinking", {"phase": "planning", "text": thought}
        )
    calls = output.tool_calls or []
    await run.resources.recorder.record(
        ObservationType.PLAN,
        "Plan ready",
        {
            "status": "ready",
            "plan": output.plan,
            "toolCalls": [
                _CALL_SERIALIZER.to_python(call)
                if type(call) is ParsedToolCall
                else call.model_dump()
                for call in calls
            ],
            "raw": planned.raw,
        },
    )


def _budget_stop(run: PhaseRun) -> str | None:
    """Why the run's started calls stop when it reached a usage limit; None if it did not."""
    budget = run.resources.budget
    if budget is None or budget.breach is None:
        return None
    return f"usage limit reached: {budget.breach.message}"
