"""Run a plan's tool calls: `ConcurrentExecutor` (the default DAG) and `SequentialExecutor`.

`ConcurrentExecutor.execute_stream` also runs a plan while it streams (`PlanFeed`).

Both run every call by the same rules (`CallRunner`: refusals, dependencies, placeholders,
argument checks, approvals, timeouts, hooks; every failure an error `ToolResult`) and differ
only in when each call starts. The rules are written out in docs/execution.md.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from contextvars import copy_context
from typing import Any

from pes_agent.errors import UsageError
from pes_agent.execution._eager import run_eagerly
from pes_agent.execution._runner import CallRunner, PlanLedger, Slots
from pes_agent.execution._streaming import StreamSchedule
from pes_agent.execution._waves import WaveSchedule
from pes_agent.execution.feed import PlanFeed
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext, Reevaluation
from pes_agent.tools.base import ToolResult

__all__ = ["ConcurrentExecutor", "SequentialExecutor"]


def _reevaluation(ctx: ExecutionContext) -> Reevaluation | None:
    """The context's re-evaluation settings when they can change anything, else None."""
    reevaluation = ctx.reevaluation
    if reevaluation is None or reevaluation.mode == "never":
        return None
    if reevaluation.mode not in ("on_failure", "each_wave"):
        raise UsageError(
            "Reevaluation.mode must be 'never', 'on_failure' or 'each_wave', got "
            f"{reevaluation.mode!r}"
        )
    return reevaluation if reevaluation.max_revisions > 0 else None


class ConcurrentExecutor:
    """Run calls as a DAG: each starts the moment its last dependency finishes.

    Independent calls overlap, at most `ctx.max_concurrency` tools running at once. Scheduling
    is event-driven (a finishing call starts its ready dependents), so there is no polling delay.
    """

    #: It honours `ExecutionContext.approvals`.
    supports_approvals = True

    async def execute(
        self, calls: Sequence[ParsedToolCall], ctx: ExecutionContext
    ) -> list[ToolResult]:
        """Run `calls` and return one `ToolResult` per call, in call order.

        Args:
            calls: The plan's tool calls; `dependsOn` and `{step_N_result}` placeholders order
                them.
            ctx: The tools, which of them this run may use, the limits, hooks, model caller,
                re-evaluation and approval gate.

        Returns:
            One result per call of the final plan (a revision's replaced calls left out), in
            step order; every failure is an error result, never an exception.

        Raises:
            UsageError: `ctx.max_concurrency` is below 1, or `ctx.reevaluation.mode` is unknown.
        """
        if ctx.max_concurrency < 1:
            raise UsageError(f"max_concurrency must be at least 1, got {ctx.max_concurrency}.")
        runner = CallRunner(PlanLedger(calls, ctx.approvals), ctx)
        limiter = Slots(ctx.max_concurrency)
        reevaluation = None if ctx.reevaluation is None else _reevaluation(ctx)
        try:
            if reevaluation is not None:
                return await self._in_waves(runner, limiter, WaveSchedule(runner, reevaluation))
            return await self._as_dag(runner, limiter)
        finally:
            runner.close()

    async def _as_dag(self, runner: CallRunner, limiter: Slots) -> list[ToolResult]:
        """The plan's calls, each started when its last dependency ends."""
        ledger = runner.ledger
        graph = ledger.graph
        count = ledger.size
        refusals = [runner.refusal(index) for index in range(count)]
        if count == 1:  # nothing to run beside it: no task group (a fifth of a 1-call run)
            result = refusals[0] or await runner.run_call(0, limiter)
            ledger.set_result(0, result)
            await runner.report_end(0, result)
            return runner.final_results()
        # A refused call waits for nothing: its result is known already.
        waiting = [
            0 if refusals[index] else len(graph.dependencies[index]) for index in range(count)
        ]
        # A call's task goes on with a dependent it releases instead of starting another task
        # for it (a chain of calls runs in one task: measured at 8 us a call less on a plan of
        # 1,000). The call's `on_call_end` hook runs first, as far as it goes without waiting;
        # should it wait (a slow sink), the dependent gets a task of its own after all, so a
        # slow hook never delays it.
        hooked = runner.ctx.hooks is not None
        # The calls that may start, in order. One task at a time (the drainer) takes them and
        # runs each in place, in a context of its own as a task would; only a call that waits
        # keeps that task, and the calls after it go on in a new drainer. Independent calls
        # that finish without waiting (no-op or cached tools) so share a task instead of
        # paying for one each. While every slot is taken, a call would wait for one, and once
        # a call tried in place waited, the plan's tools likely wait too: such calls get their
        # tasks at once, as before (in one turn of the loop, and no call then pays for being
        # driven through the drainer's wrapper).
        ready: deque[int] = deque([index for index in range(count) if waiting[index] == 0])
        draining = True  # a drainer is running or about to: first, this very task
        waited = False  # a call tried in place waited: the tools wait, so each gets a task
        # Opened only once a call waits (below): a plan whose calls all finish without waiting
        # needs no task group, no task and no turn of the loop (two fifths of the executor's
        # cost on a plan of 3 no-op calls).
        group: asyncio.TaskGroup
        # `start` and `drain` reach `drain` through this list, emptied once the group is done:
        # the functions below call one another, a reference cycle that would keep the run's
        # calls and results alive until the garbage collector came by.
        drainer: list[Callable[[], Coroutine[Any, Any, None]]] = []

        def start(index: int) -> None:
            nonlocal draining
            ready.append(index)
            if not draining:  # only once the group is open: until then this task drains
                draining = True
                group.create_task(drainer[0](), name="pes-tool-calls")

        async def drain() -> None:
            nonlocal draining, waited
            while ready:
                index = ready.popleft()
                if waited or limiter.full:  # it would wait: a task of its own at once
                    call_id = graph.calls[index].call_id
                    group.create_task(step(index), name=f"pes-tool-call:{call_id}")
                    continue
                rest = run_eagerly(step(index), copy_context())
                if rest is not None:  # the call waits: the others go on without it
                    waited = True
                    if ready:
                        group.create_task(drainer[0](), name="pes-tool-calls")
                    else:
                        draining = False
                    await rest
                    return
            draining = False

        async def step(index: int) -> None:
            while True:
                result = refusals[index] or await runner.run_call(index, limiter)
                ledger.set_result(index, result)
                follow = -1
                for dependent in graph.dependents[index]:
                    waiting[dependent] -= 1
                    if waiting[dependent] == 0:
                        if follow < 0:
                            follow = dependent
                        else:
                            start(dependent)
                if hooked:
                    if follow < 0:
                        await runner.report_end(index, result)
                    else:
                        rest = run_eagerly(runner.report_end(index, result))
                        if rest is not None:  # the hook waits: the dependent goes on
                            start(follow)
                            follow = -1
                            await rest
                if follow < 0:
                    return
                index = follow

        # This task is the first drainer, without a group: every call it runs finishes
        # before the next starts, so nothing runs beside it yet. The first call that waits
        # keeps this task (awaited in the group's body, so its deadline cancels this task, the
        # one running it), and the group opens for the calls after it, in a new drainer.
        while ready:
            index = ready.popleft()
            try:
                rest = run_eagerly(step(index), copy_context())
            except Exception as exc:
                # What escapes a call stops the run (a spent budget): raised as the task
                # group's would have raised it, had the call run in one.
                raise ExceptionGroup("unhandled errors in a TaskGroup", [exc]) from None
            if rest is None:
                continue
            waited = True
            async with asyncio.TaskGroup() as group:
                drainer.append(drain)
                if ready:
                    group.create_task(drain(), name="pes-tool-calls")
                else:
                    draining = False
                await rest
            drainer.clear()
            break
        return runner.final_results()

    async def execute_stream(self, feed: PlanFeed, ctx: ExecutionContext) -> list[ToolResult]:
        """Run the calls of `feed` as they are submitted, then the rest once it is closed.

        Each submitted call starts as soon as its inputs are known and nothing later in the
        plan can change it (`pes_agent.execution._streaming`); the results are those
        `execute(feed.calls, ctx)` would give for the final plan. With re-evaluation, the
        calls wait for the final plan (a wave needs the whole plan to be judged).

        Args:
            feed: The plan as it streams; closed once it is final.
            ctx: As for `execute`.

        Returns:
            One result per call of the final plan, in step order.

        Raises:
            UsageError: `ctx.max_concurrency` is below 1, or `ctx.reevaluation.mode` is unknown.
        """
        if feed.closed or _reevaluation(ctx) is not None:
            await feed.final()
            return await self.execute(feed.calls, ctx)
        if ctx.max_concurrency < 1:
            raise UsageError(f"max_concurrency must be at least 1, got {ctx.max_concurrency}.")
        runner = CallRunner(PlanLedger((), ctx.approvals), ctx, feed)
        try:
            return await self._as_stream(runner, feed)
        finally:
            runner.close()

    async def _as_stream(self, runner: CallRunner, feed: PlanFeed) -> list[ToolResult]:
        """The calls of a plan still streaming, each started when it may (StreamSchedule)."""
        ledger = runner.ledger
        limiter = Slots(runner.ctx.max_concurrency)
        # While a finished call releases its dependents (`schedule.finish`), the first one is
        # caught here and run next in the same task, as `_as_dag` does; the others get tasks.
        caught: list[int] | None = None
        # `start` reaches `step` through this list, emptied once the group is done: a cycle
        # otherwise (start -> step -> schedule -> start), as in `_as_dag`.
        stepper: list[Callable[[int], Coroutine[Any, Any, None]]] = []

        async with asyncio.TaskGroup() as group:

            def start(index: int) -> None:
                if caught is not None and not caught:
                    caught.append(index)
                    return
                call_id = ledger.calls[index].call_id
                group.create_task(stepper[0](index), name=f"pes-tool-call:{call_id}")

            async def step(index: int) -> None:
                nonlocal caught
                while True:
                    result = runner.refusal(index) or await runner.run_call(index, limiter)
                    ledger.set_result(index, result)
                    released: list[int] = []
                    caught = released
                    try:
                        schedule.finish(index)
                    finally:
                        caught = None
                    rest = run_eagerly(runner.report_end(index, result))
                    if rest is not None:  # the hook waits: the dependent goes on without it
                        if released:
                            start(released.pop())
                        await rest
                    if not released:
                        return
                    index = released[0]

            stepper.append(step)
            schedule = StreamSchedule(runner, start)
            seen = 0
            while True:
                await feed.wait(seen)
                if feed.closed:
                    schedule.settle(feed.calls)
                    break
                for call in feed.calls[seen:]:
                    schedule.add(call)
                seen = len(feed.calls)
        stepper.clear()
        return runner.final_results()

    async def _in_waves(
        self, runner: CallRunner, limiter: Slots, schedule: WaveSchedule
    ) -> list[ToolResult]:
        """The DAG with re-evaluation: at the end of each wave the reviser may be asked
        (no call starts meanwhile; running ones go on), then the ready calls start."""
        ledger = runner.ledger
        # `consult` and `step` reach `advance` through this list, emptied once the group is
        # done: a cycle otherwise (advance -> step -> advance), as in `_as_dag`.
        advancing: list[Callable[[], None]] = []

        async with asyncio.TaskGroup() as group:

            def advance() -> None:
                if schedule.consulting:
                    return  # the consultation advances when it ends
                if schedule.should_consult():
                    schedule.consulting = True
                    group.create_task(consult(), name="pes-plan-reevaluation")
                    return
                for index in schedule.take_ready():
                    call_id = ledger.calls[index].call_id
                    group.create_task(step(index), name=f"pes-tool-call:{call_id}")

            async def consult() -> None:
                await schedule.consult()
                schedule.consulting = False
                advancing[0]()

            async def step(index: int) -> None:
                result = runner.refusal(index) or await runner.run_call(index, limiter)
                ledger.set_result(index, result)
                schedule.finish(index)
                advancing[0]()
                await runner.report_end(index, result)

            advancing.append(advance)
            advance()
        advancing.clear()
        return runner.final_results()


class SequentialExecutor:
    """Run calls one at a time, in plan order (a call named in a `dependsOn` moves first).

    Same rules and results as `ConcurrentExecutor`; useful for tools that must not overlap.
    """

    #: It honours `ExecutionContext.approvals`.
    supports_approvals = True

    async def execute(
        self, calls: Sequence[ParsedToolCall], ctx: ExecutionContext
    ) -> list[ToolResult]:
        """Run `calls` and return one `ToolResult` per call, in call order.

        Args:
            calls: The plan's tool calls; they run in plan order, a call named in a `dependsOn`
                first.
            ctx: The tools, which of them this run may use, the limits, hooks, model caller,
                re-evaluation and approval gate (`max_concurrency` is not used).

        Returns:
            One result per call of the final plan (a revision's replaced calls left out), in
            step order; every failure is an error result, never an exception.

        Raises:
            UsageError: `ctx.reevaluation.mode` is unknown.
        """
        runner = CallRunner(PlanLedger(calls, ctx.approvals), ctx)
        reevaluation = _reevaluation(ctx)
        try:
            if reevaluation is not None:
                return await self._in_waves(runner, WaveSchedule(runner, reevaluation))
            ledger = runner.ledger
            for index in ledger.graph.order():
                result = runner.refusal(index) or await runner.run_call(index, None)
                ledger.set_result(index, result)
                await runner.report_end(index, result)
            return runner.final_results()
        finally:
            runner.close()

    async def _in_waves(self, runner: CallRunner, schedule: WaveSchedule) -> list[ToolResult]:
        """One call at a time; every finished call ends a wave."""
        ledger = runner.ledger
        while True:
            if schedule.should_consult():
                await schedule.consult()
            index = schedule.take_next()
            if index is None:
                return runner.final_results()
            result = runner.refusal(index) or await runner.run_call(index, None)
            ledger.set_result(index, result)
            schedule.finish(index)
            await runner.report_end(index, result)
