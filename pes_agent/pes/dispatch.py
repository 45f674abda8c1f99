"""Streaming dispatch for one run: the calls a planner submits start while the plan streams.

`RunDispatch` is the `CallDispatch` a run's planner gets (`PlanningContext.dispatch`). The
first call submitted starts an execution of the plan (`SupportsStreaming.execute_stream` on a
`PlanFeed`), to which every later call is fed; `finish(calls)` makes the planner's final plan
the feed's and waits for the results. The final plan is the authority: when it does not start
with the calls submitted, they are discarded and the final plan runs from a clean slate.

`discard(reason)` — the planner found the answer unusable, or the stream restarted with a
different answer — cancels the execution, records a TOOL_EXECUTION error for each call that
had started and not ended, and a PLAN observation with status `"discarded"` naming the calls
and the reason; the next `submit` starts afresh. `close()` cancels what still runs without a
record (the run failed or was cancelled, which the run records itself).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from pes_agent.execution.feed import PlanFeed
from pes_agent.execution.hooks import ObservingHooks
from pes_agent.observing.logs import get_logger
from pes_agent.observing.types import ObservationType
from pes_agent.pes.base import PhaseRun
from pes_agent.pes.components import Dispatched
from pes_agent.pes.recorder import RunRecorder
from pes_agent.planning.plan import ParsedToolCall, same_call
from pes_agent.protocols import ExecutionContext, SupportsStreaming
from pes_agent.tools.base import ToolResult

__all__ = ["RunDispatch"]

_log = get_logger("pes_agent.pes")


@dataclass(slots=True)
class _Execution:
    """One plan's calls under way: the feed they come through and the executor's task."""

    feed: PlanFeed
    task: asyncio.Task[list[ToolResult]]
    hooks: ObservingHooks


class RunDispatch:
    """A run's `CallDispatch` (see the module docstring)."""

    __slots__ = ("_begin", "_current", "_executor", "_pending", "_recorder", "_run", "_start")

    def __init__(
        self,
        executor: SupportsStreaming,
        begin: Callable[[PhaseRun], tuple[ExecutionContext, ObservingHooks]],
        run: PhaseRun,
        recorder: RunRecorder,
    ) -> None:
        self._executor = executor
        # `begin(run)`: the executor's context for a new execution. A function and its
        # argument rather than a closure: fewer objects alive while the plan streams.
        self._begin = begin
        self._run = run
        self._recorder = recorder
        self._current: _Execution | None = None
        # Calls submitted before the execution starts, on the loop's next turn: a plan that
        # streams whole at once (a cached or scripted answer) is final before that, and then
        # runs in the execution phase without this machinery. A tuple, so a run with none
        # submitted yet keeps no list (a plan has a few calls: copying it costs nothing).
        self._pending: tuple[ParsedToolCall, ...] = ()
        self._start: asyncio.Handle | None = None

    @property
    def started(self) -> bool:
        """Whether calls were submitted since the last discard."""
        return self._current is not None or bool(self._pending)

    def submit(self, call: ParsedToolCall) -> None:
        """Hand the next call of the plan to the executor, which starts on the loop's next
        turn (and may start the call then)."""
        current = self._current
        if current is not None:
            current.feed.submit(call)
            return
        self._pending = (*self._pending, call)
        if self._start is None:
            self._start = asyncio.get_running_loop().call_soon(self._begin_execution)

    def _begin_execution(self) -> None:
        self._start = None
        context, hooks = self._begin(self._run)
        feed = PlanFeed(self._pending)
        self._pending = ()
        task = asyncio.create_task(
            self._executor.execute_stream(feed, context),
            name=f"pes-dispatch:{self._recorder.trace_id}",
        )
        self._current = _Execution(feed, task, hooks)

    def _drop_pending(self) -> None:
        if self._start is not None:
            self._start.cancel()
            self._start = None
        self._pending = ()

    async def discard(self, reason: str) -> None:
        """Cancel the calls submitted so far and record it (when any had started to run);
        the next submit starts afresh."""
        self._drop_pending()
        current = await self._stop()
        if current is None:
            return
        cancelled = await current.hooks.on_discard(reason)
        await self._recorder.record(
            ObservationType.PLAN,
            "Plan discarded",
            {
                "status": "discarded",
                "reason": reason,
                "calls": [call.call_id for call in current.feed.calls],
                "cancelled": cancelled,
            },
        )

    async def finish(self, calls: list[ParsedToolCall]) -> Dispatched | None:
        """The plan is final: run the rest of `calls` with the ones started, and return
        their results; None when nothing was started (the plan runs in the execution phase),
        or what was started is discarded because `calls` does not start with it."""
        self._drop_pending()  # not started yet: the execution phase runs the whole plan
        current = self._current
        if current is None:
            return None
        submitted = current.feed.calls
        if len(calls) < len(submitted) or not all(map(same_call, calls, submitted)):
            await self.discard(
                "the final plan does not start with the calls that started while it streamed"
            )
            return None
        current.feed.close(calls)
        results = await current.task
        self._current = None
        return Dispatched(results=results, hooks=current.hooks, calls=list(calls))

    async def close(self) -> None:
        """Cancel what still runs, without a record (the run failed or was cancelled)."""
        self._drop_pending()
        await self._stop()

    async def _stop(self) -> _Execution | None:
        current, self._current = self._current, None
        if current is None:
            return None
        current.task.cancel()
        await asyncio.wait([current.task])
        if not current.task.cancelled() and (error := current.task.exception()) is not None:
            _log.warning(
                "dispatched_execution_failed",
                thread_id=self._recorder.thread_id,
                trace_id=self._recorder.trace_id,
                error_type=type(error).__name__,
            )
        return current
