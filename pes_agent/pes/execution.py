"""The execution phase's parts, shared by the two systems that hand a run's calls to them.

`ToolSystem` executes a plan once it is whole; `PlanPhaseSystem` starts its calls while it
streams (`dispatch`: streaming dispatch, `pes_agent.pes.dispatch`). Both build the executor's
context the same way (`context`) and read its results the same way (`conclude`: `Executed`,
or `Paused` when calls wait for approval).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat

from pes_agent.errors import ToolExecutionError, UsageError
from pes_agent.execution.hooks import ObservingHooks
from pes_agent.pes.base import PhaseRun
from pes_agent.pes.components import Executed, Paused
from pes_agent.pes.dispatch import RunDispatch
from pes_agent.planning.plan import ParsedToolCall, PlanningOutput
from pes_agent.planning.reviser import LLMPlanReviser
from pes_agent.protocols import (
    ExecutionContext,
    Executor,
    Reevaluation,
    SupportsApprovals,
    SupportsStreaming,
)
from pes_agent.tools.base import Tool, ToolResult
from pes_agent.tools.invoker import ToolInvoker

__all__ = ["Execution"]


class Execution:
    """The executor and tools of every run, and how a run hands its calls to them."""

    __slots__ = ("_streamed_context", "executor", "tools")

    def __init__(self, executor: Executor, tools: Mapping[str, Tool]) -> None:
        self.executor = executor
        self.tools = tools
        # Bound once and shared by every run's dispatch: binding it per run would keep one
        # more object alive in each run while its plan streams.
        self._streamed_context = self.streamed_context

    def context(
        self,
        run: PhaseRun,
        planned: PlanningOutput | None,
        *,
        resumed: Sequence[ParsedToolCall] | None,
    ) -> tuple[ExecutionContext, ObservingHooks]:
        """The executor's context for `run`, and the hooks that record its calls.

        `planned` is the plan being executed (None while it still streams: then it is not
        re-evaluated); `resumed`, the calls of a paused run being resumed.

        Raises:
            UsageError: The run may gate calls and the executor does not honour approvals.
        """
        spec = run.spec
        gate = run.resources.approvals
        executor = self.executor
        if gate is not None and not _honours_approvals(executor):
            # An executor that ignores the gate would run calls nobody approved.
            raise UsageError(
                f"the executor {type(executor).__name__} does not support approvals "
                "(no supports_approvals = True), and this run has calls that may need one: "
                "use ConcurrentExecutor or SequentialExecutor, or make it honour "
                "ExecutionContext.approvals"
            )
        hooks = ObservingHooks(run.resources.recorder)
        reevaluation = None
        if (
            planned is not None
            and resumed is None
            and spec.reevaluate != "never"
            and spec.max_revisions > 0
        ):
            reviser = LLMPlanReviser(
                llm=run.resources.llm,
                query=spec.props.query,
                intent=planned.intent,
                plan=planned.plan,
                tools=spec.tool_schemas,
                system_prompt=spec.system_prompt,
            )
            reevaluation = Reevaluation(
                mode=spec.reevaluate, reviser=reviser, max_revisions=spec.max_revisions
            )
        context = ExecutionContext(
            thread_id=spec.thread_id,
            trace_id=spec.trace_id,
            tools=self.tools,
            enabled_tools=spec.enabled_tools,
            max_concurrency=spec.max_concurrency,
            tool_timeout_s=spec.tool_timeout_s,
            # A resumed plan was checked against the limit before the pause.
            max_tool_calls=len(resumed) if resumed is not None else spec.max_tool_calls,
            user_id=spec.props.user_id,
            session_id=spec.props.session_id,
            hooks=hooks,
            state=spec.thread.state,
            llm=run.resources.llm,
            reevaluation=reevaluation,
            approvals=gate,
            invoker=_invoker(run),
        )
        return context, hooks

    def dispatch(self, run: PhaseRun) -> RunDispatch | None:
        """Where `run`'s planner may submit calls to start while the plan streams; None when
        they must wait for the whole plan (the executor cannot stream, or the plan is
        re-evaluated after each wave, which needs it whole)."""
        executor = self.executor
        if run.spec.reevaluate != "never" or not isinstance(executor, SupportsStreaming):
            return None
        if run.resources.effects is not None:
            return None  # on a durable engine the plan is a step: its calls start once it is
        if run.resources.approvals is not None and not _honours_approvals(executor):
            return None  # the execution phase refuses such a run, saying why
        return RunDispatch(executor, self._streamed_context, run, run.resources.recorder)

    def streamed_context(self, run: PhaseRun) -> tuple[ExecutionContext, ObservingHooks]:
        """The executor's context for a plan of `run` that executes while it streams.

        Args:
            run: The run whose planner submits the calls.

        Returns:
            The execution context and the hooks that observe its calls.
        """
        return self.context(run, None, resumed=None)

    async def record_budget_stop(self, run: PhaseRun, hooks: ObservingHooks) -> None:
        """If `run` stopped at a usage limit, record its calls that started and did not end
        as cancelled (each a TOOL_EXECUTION error naming the limit)."""
        breach = run.resources.budget.breach if run.resources.budget is not None else None
        if breach is not None:
            await hooks.on_discard(f"usage limit reached: {breach.message}")

    def conclude(
        self,
        run: PhaseRun,
        calls: list[ParsedToolCall],
        results: list[ToolResult],
        hooks: ObservingHooks,
    ) -> None:
        """Leave the outcome of executing `calls` on the run: `Executed`, or `Paused` when
        calls wait for approval.

        Raises:
            ToolExecutionError: The executor did not return one result per call of the final
                plan.
        """
        spec = run.spec
        gate = run.resources.approvals
        replaced = gate.replaced if gate is not None else frozenset()
        every, steps, final = _final_plan(calls, hooks, replaced)
        # map() rather than a generator: no Python frame resumed per result.
        if len(results) != len(final) or not all(map(isinstance, results, repeat(ToolResult))):
            raise ToolExecutionError(
                f"the executor {type(self.executor).__name__} returned {len(results)} "
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
        run.add(Executed(results=list(results), steps=steps, calls=final))


def _invoker(run: PhaseRun) -> ToolInvoker:
    """How the run's tool calls reach their tools: through its budget when it counts them."""
    budget = run.resources.budget
    invoker = run.resources.invoker
    return invoker if budget is None else budget.invoker(invoker)


def _honours_approvals(executor: Executor) -> bool:
    return isinstance(executor, SupportsApprovals) and bool(executor.supports_approvals)


def _final_plan(
    calls: list[ParsedToolCall], hooks: ObservingHooks, replaced_before: frozenset[int]
) -> tuple[list[ParsedToolCall], list[int], list[ParsedToolCall]]:
    """Every call by step, then the calls the executor ended with and their step numbers: the
    planned ones, then each revision's, less the replaced ones (by step number, which never
    changes; `replaced_before`: replaced before a pause)."""
    every = list(calls)
    if not replaced_before and not hooks.revisions:  # most runs: the plan as it was given
        return every, list(range(1, len(every) + 1)), list(every)
    replaced: set[int] = set(replaced_before)
    for outcome in hooks.revisions:
        if outcome.status == "revised":
            replaced.update(outcome.replaced_steps)
            every.extend(outcome.calls)
    kept = [(step, call) for step, call in enumerate(every, start=1) if step not in replaced]
    return every, [step for step, _ in kept], [call for _, call in kept]
