"""ToolSystem [5]: the plan's tool calls run through the executor as a DAG.

The executor gets the run's model caller (for language steps) and, with
`reevaluate="on_failure" | "each_wave"`, an `LLMPlanReviser` that re-evaluates the calls not
yet run after each wave. `Executed.results` then holds the results of the final plan: the
planned calls a revision did not replace, then each revision's calls.

With an approval gate (`RunResources.approvals`), calls waiting for approval leave a `Paused`
component instead of `Executed`; a resumed run (`Resumed`) executes the stored calls, the
results finished before the pause given to the executor through the gate, without
re-evaluation (a person decided about that plan).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import ClassVar

from pes_agent.errors import ToolExecutionError, UsageError
from pes_agent.execution.hooks import ObservingHooks
from pes_agent.pes.base import PhaseRun, PhaseSystem
from pes_agent.pes.components import Executed, Paused, Phase, Planned, Resumed
from pes_agent.pes.resources import ResourceTable
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.planning.reviser import LLMPlanReviser
from pes_agent.protocols import ExecutionContext, Executor, Reevaluation, SupportsApprovals
from pes_agent.tools.base import Tool, ToolResult

__all__ = ["ToolSystem"]


class ToolSystem(PhaseSystem[Planned]):
    """Executes the planned tool calls; every failure is a `ToolResult`, never an exception."""

    phase: ClassVar[Phase] = "execution"
    done_when = (Executed,)

    def __init__(
        self, resources: ResourceTable, executor: Executor, tools: Mapping[str, Tool]
    ) -> None:
        super().__init__(resources)
        self._executor = executor
        self._tools = tools

    async def run(self, run: PhaseRun, planned: Planned) -> None:
        resumed = run.world.get_component(run.entity, Resumed)
        calls = resumed.calls if resumed is not None else planned.output.tool_calls or []
        if not calls:
            run.add(Executed(results=[]))
            return
        spec = run.spec
        gate = run.resources.approvals
        executor = self._executor
        if gate is not None and not (
            isinstance(executor, SupportsApprovals) and executor.supports_approvals
        ):
            # An executor that ignores the gate would run calls nobody approved.
            raise UsageError(
                f"the executor {type(self._executor).__name__} does not support approvals "
                "(no supports_approvals = True), and this run has calls that may need one: "
                "use ConcurrentExecutor or SequentialExecutor, or make it honour "
                "ExecutionContext.approvals"
            )
        hooks = ObservingHooks(run.recorder)
        reevaluation = None
        if resumed is None and spec.reevaluate != "never" and spec.max_revisions > 0:
            reviser = LLMPlanReviser(
                llm=run.llm,
                query=spec.props.query,
                intent=planned.output.intent,
                plan=planned.output.plan,
                tools=spec.tool_schemas,
                system_prompt=spec.system_prompt,
            )
            reevaluation = Reevaluation(
                mode=spec.reevaluate, reviser=reviser, max_revisions=spec.max_revisions
            )
        context = ExecutionContext(
            thread_id=spec.thread_id,
            trace_id=spec.trace_id,
            tools=self._tools,
            enabled_tools=spec.enabled_tools,
            max_concurrency=spec.max_concurrency,
            tool_timeout_s=spec.tool_timeout_s,
            # A resumed plan was checked against the limit before the pause.
            max_tool_calls=len(calls) if resumed is not None else spec.max_tool_calls,
            user_id=spec.props.user_id,
            session_id=spec.props.session_id,
            hooks=hooks,
            state=spec.thread.state,
            llm=run.llm,
            reevaluation=reevaluation,
            approvals=gate,
            invoker=run.resources.invoker,
        )
        try:
            results = await self._executor.execute(calls, context)
        except asyncio.CancelledError:
            # What finished is kept on the entity for whoever inspects the cancelled run.
            run.add(Executed(results=list(hooks.finished.values())))
            raise
        replaced = gate.replaced if gate is not None else frozenset()
        every, steps, final = _final_plan(calls, hooks, replaced)
        if len(results) != len(final) or not all(isinstance(r, ToolResult) for r in results):
            raise ToolExecutionError(
                f"the executor {type(self._executor).__name__} returned {len(results)} "
                f"result(s) for {len(final)} call(s); it must return one ToolResult per call "
                "of the final plan, in call order",
                thread_id=spec.thread_id,
                trace_id=spec.trace_id,
            )
        if gate is not None and gate.pending:
            run.add(
                Paused(
                    calls=every,
                    replaced_steps=sorted(set(range(1, len(every) + 1)) - set(steps)),
                    results={
                        step: result
                        for step, result in zip(steps, results, strict=True)
                        if step not in gate.held
                    },
                    pending=list(gate.pending),
                    decisions=dict(gate.decisions),
                    require_approval=sorted(gate.rule_names),
                    approval_predicate=gate.has_predicate,
                )
            )
            return
        run.add(Executed(results=list(results), steps=steps))


def _final_plan(
    calls: list[ParsedToolCall], hooks: ObservingHooks, replaced_before: frozenset[int]
) -> tuple[list[ParsedToolCall], list[int], list[ParsedToolCall]]:
    """Every call by step, then the calls the executor ended with and their step numbers: the
    planned ones, then each revision's, less the replaced ones (by step number, which never
    changes; `replaced_before`: replaced before a pause)."""
    every = list(calls)
    replaced: set[int] = set(replaced_before)
    for outcome in hooks.revisions:
        if outcome.status == "revised":
            replaced.update(outcome.replaced_steps)
            every.extend(outcome.calls)
    kept = [(step, call) for step, call in enumerate(every, start=1) if step not in replaced]
    return every, [step for step, _ in kept], [call for _, call in kept]
