"""Run a plan's tool calls: `ConcurrentExecutor` (the default DAG) and `SequentialExecutor`.

Both follow the same rules for every call (they share one per-call routine):

1. refused outright, without waiting for anything, when the call is beyond
   `ctx.max_tool_calls`, has a plan error (see `pes_agent.execution.dag`), names a tool that is not
   registered (``Tool "x" is not registered.``) or not enabled for the thread
   (``Tool "x" is not enabled for thread "t".``);
2. once its dependencies have finished: not run if one of them failed (the error names the
   failed step); otherwise its placeholders are filled from earlier results, its arguments are
   checked (a `@tool` function by its pydantic model, which coerces as pydantic does; any other
   tool against its JSON Schema), and the tool runs under its timeout (the tool's own
   `timeout_s`, else `ctx.tool_timeout_s`).

Every failure is an error `ToolResult`, never an exception: ``Tool "x" timed out after 2s.``,
``ValueError: <message>`` for a tool that raised (the traceback goes to the log), or the message
of a `ToolExecutionError` the tool raised on purpose. Results come back in call order.

`ctx.hooks.on_call_start(call, arguments)` is awaited right before a tool runs, with the
resolved arguments; `on_call_end(call, result)` for every result, refused and skipped calls
included. A call's `on_call_end` is entered before any dependent's `on_call_start` (the
dependents are released first, so a hook that awaits I/O may interleave with them rather than
delay them). A hook that raises is logged and ignored. Cancelling `execute` cancels the running
tools and re-raises `CancelledError`; results finished before that were already delivered to
`on_call_end`. (A sync `@tool` function already running in its worker thread cannot be stopped;
its result is discarded; it keeps its thread until it returns.)

Sync `@tool` functions run on the thread pool of the registry behind `ctx.tools` (a
`ToolRegistry.as_mapping()` view), bounded and owned by the agent: when every thread is held
by a call that timed out, a new sync call is at once an error result saying the pool is
exhausted, and asyncio's default executor is never involved.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from pes_agent.errors import ToolExecutionError, UsageError
from pes_agent.execution.dag import CallGraph
from pes_agent.execution.placeholders import resolve_placeholders
from pes_agent.observing.logs import get_logger
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext
from pes_agent.tools.base import Tool, ToolContext, ToolResult
from pes_agent.tools.decorator import FunctionTool
from pes_agent.tools.threads import ToolThreadPool
from pes_agent.tools.validation import validate_arguments

__all__ = ["ConcurrentExecutor", "SequentialExecutor"]

_log = get_logger("pes_agent.execution.executors")


class ConcurrentExecutor:
    """Run calls as a DAG: each starts the moment its last dependency finishes.

    Independent calls overlap, at most `ctx.max_concurrency` tools running at once. Scheduling
    is event-driven (a finishing call starts its ready dependents), so there is no polling delay.
    """

    async def execute(
        self, calls: Sequence[ParsedToolCall], ctx: ExecutionContext
    ) -> list[ToolResult]:
        """Run `calls` and return one `ToolResult` per call, in call order."""
        if ctx.max_concurrency < 1:
            raise UsageError(f"max_concurrency must be at least 1, got {ctx.max_concurrency}.")
        run = _PlanRun(calls, ctx)
        limiter = asyncio.Semaphore(ctx.max_concurrency)
        refusals = [run.refusal(index) for index in range(run.size)]
        # A refused call waits for nothing: its result is known already.
        waiting = [
            0 if refusals[index] else len(run.graph.dependencies[index])
            for index in range(run.size)
        ]

        async with asyncio.TaskGroup() as group:

            def start(index: int) -> None:
                group.create_task(
                    step(index), name=f"pes-tool-call:{run.graph.calls[index].call_id}"
                )

            async def step(index: int) -> None:
                result = refusals[index] or await run.run(index, limiter)
                run.record(index, result)
                # Release the dependents before awaiting the hook, so a slow hook never
                # delays them.
                for dependent in run.graph.dependents[index]:
                    waiting[dependent] -= 1
                    if waiting[dependent] == 0:
                        start(dependent)
                await run.notify_end(index, result)

            for index in range(run.size):
                if waiting[index] == 0:
                    start(index)
        return run.results()


class SequentialExecutor:
    """Run calls one at a time, in plan order (a call named in a `dependsOn` moves first).

    Same rules and results as `ConcurrentExecutor`; useful for tools that must not overlap.
    """

    async def execute(
        self, calls: Sequence[ParsedToolCall], ctx: ExecutionContext
    ) -> list[ToolResult]:
        """Run `calls` and return one `ToolResult` per call, in call order."""
        run = _PlanRun(calls, ctx)
        for index in run.graph.order():
            result = run.refusal(index) or await run.run(index, None)
            run.record(index, result)
            await run.notify_end(index, result)
        return run.results()


class _PlanRun:
    """One `execute` call: the call graph, the results so far and the per-call routine."""

    __slots__ = ("_outputs", "_results", "ctx", "graph", "size", "thread_pool")

    def __init__(self, calls: Sequence[ParsedToolCall], ctx: ExecutionContext) -> None:
        self.ctx = ctx
        # A `ToolRegistry.as_mapping()` view names the registry's pool for sync tools; with
        # another mapping they run on asyncio's default executor.
        pool = getattr(ctx.tools, "thread_pool", None)
        self.thread_pool = pool if isinstance(pool, ToolThreadPool) else None
        self.graph = CallGraph.build(calls)
        self.size = len(self.graph.calls)
        self._results: list[ToolResult | None] = [None] * self.size
        self._outputs: dict[int, Any] = {}  # step number (1-based) → output, successes only

    def _logger(self) -> Any:
        # Bound only when something goes wrong: binding on every run costs more than the run.
        return _log.bind(thread_id=self.ctx.thread_id, trace_id=self.ctx.trace_id)

    def refusal(self, index: int) -> ToolResult | None:
        """Return the error result of a call that must not run at all, or None."""
        call = self.graph.calls[index]
        ctx = self.ctx
        if index >= ctx.max_tool_calls:
            return _error(
                call,
                f"Not run: the plan has {self.size} tool calls, more than the limit of "
                f"{ctx.max_tool_calls} per plan.",
            )
        problems = self.graph.problems[index]
        if problems:
            return _error(call, "Not run: " + " ".join(problems))
        if call.tool_name not in ctx.tools:
            return _error(call, f'Tool "{call.tool_name}" is not registered.')
        if call.tool_name not in ctx.enabled_tools:
            return _error(
                call, f'Tool "{call.tool_name}" is not enabled for thread "{ctx.thread_id}".'
            )
        return None

    async def run(self, index: int, limiter: asyncio.Semaphore | None) -> ToolResult:
        """Run a call whose dependencies have all finished; every failure becomes a result."""
        call = self.graph.calls[index]
        try:
            return await self._run(index, call, limiter)
        except Exception as exc:
            # A bug of ours, not of the tool: still a result, so the plan's other calls finish.
            self._logger().exception("tool_call_internal_error", call_id=call.call_id)
            return _error(call, f"Internal error while running the call: {_describe(exc)}")

    def record(self, index: int, result: ToolResult) -> None:
        """Keep a finished call's result (and its output, for later placeholders)."""
        self._results[index] = result
        if result.status == "success":
            self._outputs[index + 1] = result.output

    async def notify_end(self, index: int, result: ToolResult) -> None:
        """Tell `on_call_end` about a result; a hook failure is logged, never raised."""
        hooks = self.ctx.hooks
        if hooks is None:
            return
        call = self.graph.calls[index]
        try:
            await hooks.on_call_end(call, result)
        except Exception:
            self._logger().exception(
                "execution_hook_failed", hook="on_call_end", call_id=call.call_id
            )

    def results(self) -> list[ToolResult]:
        """All results in call order, exactly one per call.

        The call graph is acyclic, so every call gets a result; should a scheduling bug ever
        leave one waiting, it still gets an error result (and the bug is logged) rather than
        silently shortening the list, which would pair later results with the wrong calls.
        """
        finished: list[ToolResult] = []
        for index, result in enumerate(self._results):
            if result is None:
                call = self.graph.calls[index]
                self._logger().error("tool_call_never_scheduled", call_id=call.call_id)
                result = _error(call, "Not run: internal error: the call was never scheduled.")
            finished.append(result)
        return finished

    async def _run(
        self, index: int, call: ParsedToolCall, limiter: asyncio.Semaphore | None
    ) -> ToolResult:
        failed = [
            dep
            for dep in sorted(self.graph.dependencies[index])
            if (done := self._results[dep]) is None or done.status != "success"
        ]
        if failed:
            steps = " and ".join(f'{dep + 1} ("{self.graph.calls[dep].call_id}")' for dep in failed)
            noun = "step" if len(failed) == 1 else "steps"
            return _error(call, f"Not run: it depends on {noun} {steps}, which failed.")
        if not isinstance(call.arguments, dict):
            return _error(
                call,
                f'Invalid arguments for tool "{call.tool_name}": arguments must be a JSON object '
                'of named parameters, e.g. {"name": value}, not an array.',
            )
        try:
            arguments = resolve_placeholders(call.arguments, self._outputs)
        except ToolExecutionError as exc:
            return _error(call, exc.message)
        tool = self.ctx.tools[call.tool_name]
        # A @tool function validates its own arguments with its pydantic model, which, like
        # pydantic everywhere, accepts "12" for a float (weak models often quote numbers);
        # other tools are checked against the JSON Schema they publish.
        problems = (
            []
            if isinstance(tool, FunctionTool)
            else validate_arguments(tool.schema.input_schema, arguments)
        )
        if problems:
            return _error(
                call, f'Invalid arguments for tool "{call.tool_name}": ' + "; ".join(problems)
            )
        if limiter is None:
            return await self._invoke(call, tool, arguments)
        async with limiter:
            return await self._invoke(call, tool, arguments)

    async def _invoke(
        self, call: ParsedToolCall, tool: Tool, arguments: dict[str, Any]
    ) -> ToolResult:
        hooks = self.ctx.hooks
        if hooks is not None:
            try:
                await hooks.on_call_start(call, arguments)
            except Exception:
                self._logger().exception(
                    "execution_hook_failed", hook="on_call_start", call_id=call.call_id
                )
        own_timeout = getattr(tool, "timeout_s", None)
        timeout_s: float | None = (
            own_timeout if own_timeout is not None else self.ctx.tool_timeout_s
        )
        ctx = self.ctx
        context = ToolContext(
            thread_id=ctx.thread_id,
            trace_id=ctx.trace_id,
            call_id=call.call_id,
            user_id=ctx.user_id,
            session_id=ctx.session_id,
            state=ctx.state,
            thread_pool=self.thread_pool,
        )
        scope = asyncio.timeout(timeout_s)
        started = time.perf_counter()
        try:
            async with scope:
                output = await tool.execute(arguments, context)
        except TimeoutError as exc:
            if not scope.expired():  # the tool's own TimeoutError, not our deadline
                return self._failure(call, exc, started)
            return _error(call, f'Tool "{call.tool_name}" timed out after {timeout_s:g}s.', started)
        except ToolExecutionError as exc:
            # Raised on purpose by the tool (or by @tool's argument check): a clean message.
            return _error(call, exc.message, started)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # execute() itself is being cancelled
            return self._failure(call, exc, started)
        except (Exception, SystemExit) as exc:
            # SystemExit too: a tool calling sys.exit() (argparse does) must not end the
            # event loop, and with it every other run of the process.
            return self._failure(call, exc, started)
        return ToolResult(
            call_id=call.call_id,
            tool_name=call.tool_name,
            status="success",
            output=output,
            duration_ms=_elapsed_ms(started),
        )

    def _failure(self, call: ParsedToolCall, exc: BaseException, started: float) -> ToolResult:
        self._logger().warning(
            "tool_call_failed", call_id=call.call_id, tool=call.tool_name, exc_info=exc
        )
        return _error(call, _describe(exc), started)


def _describe(exc: BaseException) -> str:
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _elapsed_ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def _error(call: ParsedToolCall, message: str, started: float | None = None) -> ToolResult:
    return ToolResult(
        call_id=call.call_id,
        tool_name=call.tool_name,
        status="error",
        error=message,
        duration_ms=0.0 if started is None else _elapsed_ms(started),
    )
