"""ToolSystem [5]: the plan's tool calls run through the executor as a DAG.

The executor gets the run's model caller (for language steps) and, with
`reevaluate="on_failure" | "each_wave"`, an `LLMPlanReviser` that re-evaluates the calls not
yet run after each wave. `Executed.results` then holds the results of the final plan: the
planned calls a revision did not replace, then each revision's calls.

When the calls started while the plan streamed (`Dispatched`, left by `PlanPhaseSystem`), they
have run already: this phase only concludes from their results.

With an approval gate (`RunResources.approvals`), calls waiting for approval leave a `Paused`
component instead of `Executed`; a resumed run (`Resumed`) executes the stored calls, the
results finished before the pause given to the executor through the gate, without
re-evaluation (a person decided about that plan).
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from pes_agent.pes.base import PhaseRun, PhaseSystem
from pes_agent.pes.components import Dispatched, Executed, Phase, Planned, Resumed
from pes_agent.pes.execution import Execution
from pes_agent.pes.resources import ResourceTable

__all__ = ["ToolSystem"]


class ToolSystem(PhaseSystem[Planned]):
    """Executes the planned tool calls; every failure is a `ToolResult`, never an exception."""

    phase: ClassVar[Phase] = "execution"
    done_when = (Executed,)

    def __init__(self, resources: ResourceTable, execution: Execution) -> None:
        super().__init__(resources)
        self._execution = execution

    async def run(self, run: PhaseRun, planned: Planned) -> None:
        execution = self._execution
        dispatched = run.world.get_component(run.entity, Dispatched)
        if dispatched is not None:
            execution.conclude(run, dispatched.calls, dispatched.results, dispatched.hooks)
            return
        resumed = run.world.get_component(run.entity, Resumed)
        calls = resumed.calls if resumed is not None else planned.output.tool_calls or []
        if not calls:
            run.add(Executed(results=[]))
            return
        context, hooks = execution.context(
            run, planned.output, resumed=resumed.calls if resumed is not None else None
        )
        effects = run.resources.effects
        if effects is not None:
            # Places for every call's step, the revisions' calls included, before any starts.
            revisions = context.reevaluation.max_revisions if context.reevaluation else 0
            await effects.open_calls(len(calls) + revisions * context.max_tool_calls, revisions)
        try:
            results = await execution.executor.execute(calls, context)
        except asyncio.CancelledError:
            # What finished is kept on the entity for whoever inspects the cancelled run.
            run.add(Executed(results=list(hooks.finished.values())))
            raise
        except Exception:
            await execution.record_budget_stop(run, hooks)
            raise
        execution.conclude(run, list(calls), results, hooks)
