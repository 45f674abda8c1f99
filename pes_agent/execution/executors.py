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

A language step (a call with an `instruction`, see `pes_agent.execution.language`) follows the
same rules, except that it needs no registered tool: it needs `ctx.llm`, its placeholders are
filled into the instruction as text, and it is one model call (phase `"language_step"`, bounded
by the provider's own timeout and retries rather than the tool timeout) whose text is its result.

With `ctx.reevaluation` (`create_agent(reevaluate="on_failure" | "each_wave")`) both executors
pause at the end of each wave and let the reviser replace the calls not yet run; the rules
(what a wave is, numbering, what a revision may change) are in `pes_agent.execution.revision`.
Results then come back for the calls of the final plan, in step order, replaced calls left out.
Without it, nothing of this runs: the DAG starts each call the moment its last dependency
finishes.

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

With `ctx.approvals` (an `ApprovalGate`, see `pes_agent.approvals`) a call that needs a
person's approval runs only once approved: right before it would run (its placeholders filled)
the gate is asked; a denied call is an error result naming the reason; an undecided one (no
`approval_handler`: the run will pause) is *held*, and so is every call that depends on a held
call, whatever its kind (a held call that needs approval itself is pending too, with its
arguments as planned). Held calls get an error result saying they wait, and no hook is told
about them; the calls independent of them run as usual. A resume hands the gate the results
finished before the pause (`prior`), which are neither run nor reported again.

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

from pes_agent.approvals.gate import denial_message
from pes_agent.approvals.models import Deny
from pes_agent.errors import PlanParseError, RunError, ToolExecutionError, UsageError
from pes_agent.execution.dag import CallGraph
from pes_agent.execution.language import build_language_step_messages
from pes_agent.execution.placeholders import resolve_placeholders, resolve_text
from pes_agent.execution.revision import (
    PlanProgress,
    PlanRevision,
    RevisionStatus,
    adopt_call_ids,
    revision_errors,
    same_calls,
)
from pes_agent.observing.logs import get_logger
from pes_agent.planning.parser import OutputParser
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext, ModelCaller, PlanRevisionHooks, Reevaluation
from pes_agent.tools.base import Tool, ToolContext, ToolResult
from pes_agent.tools.decorator import FunctionTool
from pes_agent.tools.threads import ToolThreadPool
from pes_agent.tools.validation import validate_arguments

__all__ = ["ConcurrentExecutor", "SequentialExecutor"]

_log = get_logger("pes_agent.execution.executors")
_PARSER = OutputParser()


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
        """Run `calls` and return one `ToolResult` per call, in call order."""
        if ctx.max_concurrency < 1:
            raise UsageError(f"max_concurrency must be at least 1, got {ctx.max_concurrency}.")
        run = _PlanRun(calls, ctx)
        limiter = asyncio.Semaphore(ctx.max_concurrency)
        reevaluation = _reevaluation(ctx)
        if reevaluation is not None:
            return await self._adaptive(run, limiter, _Schedule(run, reevaluation))
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

    async def _adaptive(
        self, run: _PlanRun, limiter: asyncio.Semaphore, schedule: _Schedule
    ) -> list[ToolResult]:
        """The DAG with re-evaluation: at the end of each wave the reviser may be asked
        (no call starts meanwhile; running ones go on), then the ready calls start."""
        async with asyncio.TaskGroup() as group:

            def advance() -> None:
                if schedule.consulting:
                    return  # the consultation advances when it ends
                if schedule.should_consult():
                    schedule.consulting = True
                    group.create_task(consult(), name="pes-plan-reevaluation")
                    return
                for index in schedule.take_ready():
                    group.create_task(step(index), name=f"pes-tool-call:{run.calls[index].call_id}")

            async def consult() -> None:
                await schedule.consult()
                schedule.consulting = False
                advance()

            async def step(index: int) -> None:
                result = run.refusal(index) or await run.run(index, limiter)
                run.record(index, result)
                schedule.finished(index)
                advance()
                await run.notify_end(index, result)

            advance()
        return run.results()


class SequentialExecutor:
    """Run calls one at a time, in plan order (a call named in a `dependsOn` moves first).

    Same rules and results as `ConcurrentExecutor`; useful for tools that must not overlap.
    """

    #: It honours `ExecutionContext.approvals`.
    supports_approvals = True

    async def execute(
        self, calls: Sequence[ParsedToolCall], ctx: ExecutionContext
    ) -> list[ToolResult]:
        """Run `calls` and return one `ToolResult` per call, in call order."""
        run = _PlanRun(calls, ctx)
        reevaluation = _reevaluation(ctx)
        if reevaluation is not None:
            return await self._adaptive(run, _Schedule(run, reevaluation))
        for index in run.graph.order():
            result = run.refusal(index) or await run.run(index, None)
            run.record(index, result)
            await run.notify_end(index, result)
        return run.results()

    async def _adaptive(self, run: _PlanRun, schedule: _Schedule) -> list[ToolResult]:
        """One call at a time; every finished call ends a wave."""
        while True:
            if schedule.should_consult():
                await schedule.consult()
            index = schedule.take_next()
            if index is None:
                return run.results()
            result = run.refusal(index) or await run.run(index, None)
            run.record(index, result)
            schedule.finished(index)
            await run.notify_end(index, result)


class _PlanRun:
    """One `execute` call: the call graph, the results so far and the per-call routine."""

    __slots__ = (
        "_outputs",
        "_results",
        "calls",
        "ctx",
        "graph",
        "held",
        "planned",
        "prior",
        "replaced",
        "size",
        "skipped",
        "thread_pool",
    )

    def __init__(self, calls: Sequence[ParsedToolCall], ctx: ExecutionContext) -> None:
        self.ctx = ctx
        # A `ToolRegistry.as_mapping()` view names the registry's pool for sync tools; with
        # another mapping they run on asyncio's default executor.
        pool = getattr(ctx.tools, "thread_pool", None)
        self.thread_pool = pool if isinstance(pool, ToolThreadPool) else None
        self.graph = CallGraph.build(calls)
        # Every call by step (index + 1); a revision appends, so numbers never change.
        self.calls = list(self.graph.calls)
        self.size = self.planned = len(self.calls)
        self.replaced: set[int] = set()  # indices of calls a revision replaced: never run
        self.skipped: set[int] = set()  # indices not run because a dependency failed
        self._results: list[ToolResult | None] = [None] * self.size
        self._outputs: dict[int, Any] = {}  # step number (1-based) → output, successes only
        self.held: set[int] = set()  # indices waiting for approval, or for a call that does
        self.prior: set[int] = set()  # indices finished before a pause (a resume)
        gate = ctx.approvals
        if gate is not None:
            self.replaced.update(step - 1 for step in gate.replaced if 0 < step <= self.size)
            for step, result in gate.prior.items():
                if 0 < step <= self.size:
                    self.prior.add(step - 1)
                    self.record(step - 1, result)

    def progress(
        self,
        pending: Sequence[int],
        running: Sequence[int],
        wave: Sequence[int],
        revisions: int,
        max_revisions: int,
    ) -> PlanProgress:
        """The plan as it stands, for a reviser (all positions as 1-based step numbers)."""
        return PlanProgress(
            calls=tuple(self.calls),
            results={
                index + 1: result
                for index, result in enumerate(self._results)
                if result is not None
            },
            running=tuple(sorted(index + 1 for index in running)),
            pending=tuple(sorted(index + 1 for index in pending)),
            replaced=tuple(sorted(index + 1 for index in self.replaced)),
            wave=tuple(index + 1 for index in wave),
            revisions=revisions,
            max_revisions=max_revisions,
            max_tool_calls=self.ctx.max_tool_calls,
        )

    def adopt(self, pending: Sequence[int], calls: Sequence[ParsedToolCall]) -> range:
        """Replace the calls at `pending` by `calls` (appended); returns their indices."""
        first = self.size
        self.replaced.update(pending)
        self.calls.extend(calls)
        self.graph = CallGraph.build(self.calls)
        self.size = len(self.calls)
        self._results.extend([None] * len(calls))
        return range(first, self.size)

    def _logger(self) -> Any:
        # Bound only when something goes wrong: binding on every run costs more than the run.
        return _log.bind(thread_id=self.ctx.thread_id, trace_id=self.ctx.trace_id)

    def refusal(self, index: int) -> ToolResult | None:
        """Return the error result of a call that must not run at all, or None."""
        if index in self.prior:
            return self._results[index]  # finished before the pause: known, never run again
        call = self.calls[index]
        ctx = self.ctx
        # Calls a revision adds were checked against the limit when it was adopted.
        if ctx.max_tool_calls <= index < self.planned:
            return _error(
                call,
                f"Not run: the plan has {self.planned} tool calls, more than the limit of "
                f"{ctx.max_tool_calls} per plan.",
            )
        problems = self.graph.problems[index]
        if problems:
            return _error(call, "Not run: " + " ".join(problems))
        if call.instruction is not None:
            if ctx.llm is None:
                return _error(
                    call,
                    "Not run: this is a language step and the executor was given no model "
                    "caller (ExecutionContext.llm).",
                )
            return None
        if call.tool_name not in ctx.tools:
            return _error(call, f'Tool "{call.tool_name}" is not registered.')
        if call.tool_name not in ctx.enabled_tools:
            return _error(
                call, f'Tool "{call.tool_name}" is not enabled for thread "{ctx.thread_id}".'
            )
        return None

    async def run(self, index: int, limiter: asyncio.Semaphore | None) -> ToolResult:
        """Run a call whose dependencies have all finished; every failure becomes a result."""
        call = self.calls[index]
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
        if hooks is None or index in self.prior or index in self.held:
            return  # reported before the pause, or not run yet: reported when it is
        call = self.calls[index]
        try:
            await hooks.on_call_end(call, result)
        except Exception:
            self._logger().exception(
                "execution_hook_failed", hook="on_call_end", call_id=call.call_id
            )

    def result(self, index: int) -> ToolResult | None:
        """The result of the call at `index`, once it finished."""
        return self._results[index]

    async def notify_revision(self, outcome: PlanRevision) -> None:
        """Tell hooks that want it (`PlanRevisionHooks`) how a re-evaluation ended."""
        hooks = self.ctx.hooks
        if not isinstance(hooks, PlanRevisionHooks):
            return
        try:
            await hooks.on_plan_revision(outcome)
        except Exception:
            self._logger().exception("execution_hook_failed", hook="on_plan_revision")

    def results(self) -> list[ToolResult]:
        """All results in call order, exactly one per call.

        The call graph is acyclic, so every call gets a result; should a scheduling bug ever
        leave one waiting, it still gets an error result (and the bug is logged) rather than
        silently shortening the list, which would pair later results with the wrong calls.
        """
        finished: list[ToolResult] = []
        for index, result in enumerate(self._results):
            if index in self.replaced:
                continue  # replaced by a revision: never run, no result
            if result is None:
                call = self.calls[index]
                self._logger().error("tool_call_never_scheduled", call_id=call.call_id)
                result = _error(call, "Not run: internal error: the call was never scheduled.")
            finished.append(result)
        return finished

    async def _run(
        self, index: int, call: ParsedToolCall, limiter: asyncio.Semaphore | None
    ) -> ToolResult:
        dependencies = sorted(self.graph.dependencies[index])
        waiting = [dep for dep in dependencies if dep in self.held]
        failed = [
            dep
            for dep in dependencies
            if dep not in self.held
            and ((done := self._results[dep]) is None or done.status != "success")
        ]
        if not failed and waiting:
            return self._hold(index, call, waiting)
        if failed:
            self.skipped.add(index)
            steps = " and ".join(f'{dep + 1} ("{self.calls[dep].call_id}")' for dep in failed)
            noun = "step" if len(failed) == 1 else "steps"
            return _error(call, f"Not run: it depends on {noun} {steps}, which failed.")
        if call.instruction is not None:
            try:
                instruction = resolve_text(call.instruction, self._outputs)
            except ToolExecutionError as exc:
                return _error(call, exc.message)
            if limiter is None:
                return await self._speak(call, instruction)
            async with limiter:
                return await self._speak(call, instruction)
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
        gate = self.ctx.approvals
        if gate is not None and gate.requires(call.model_copy(update={"arguments": arguments})):
            decision = await gate.decide(call, arguments, index + 1)
            if decision is None:
                return self._hold(index, call, [])
            if isinstance(decision, Deny):
                return _error(call, denial_message(decision))
        if limiter is None:
            return await self._invoke(call, tool, arguments)
        async with limiter:
            return await self._invoke(call, tool, arguments)

    def _hold(self, index: int, call: ParsedToolCall, waiting: Sequence[int]) -> ToolResult:
        """Hold a call that waits for approval (its own, or that of the steps in `waiting`)."""
        self.held.add(index)
        self.skipped.add(index)  # not part of a wave: nothing ran
        if waiting:
            gate = self.ctx.approvals
            if gate is not None:
                gate.hold(call, index + 1)
            steps = " and ".join(f'{dep + 1} ("{self.calls[dep].call_id}")' for dep in waiting)
            return _error(call, f"Not run: it waits for step {steps}, which waits for approval.")
        return _error(call, "Not run: it waits for approval.")

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

    async def _speak(self, call: ParsedToolCall, instruction: str) -> ToolResult:
        """Do a language step: one model call on the filled instruction; its text is the result."""
        llm: ModelCaller | None = self.ctx.llm
        if llm is None:  # refused before it could get here; kept for custom callers
            return _error(call, "Not run: the executor was given no model caller.")
        hooks = self.ctx.hooks
        if hooks is not None:
            try:
                await hooks.on_call_start(call, {"instruction": instruction})
            except Exception:
                self._logger().exception(
                    "execution_hook_failed", hook="on_call_start", call_id=call.call_id
                )
        started = time.perf_counter()
        try:
            response = await llm(build_language_step_messages(instruction), phase="language_step")
        except RunError as exc:
            # The provider failed after its retries: an error result, so the run is partial.
            return _error(call, f"Language step failed: {exc.message}", started)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            return self._failure(call, exc, started)
        except Exception as exc:
            return self._failure(call, exc, started)
        text = _PARSER.parse_synthesis_output(response.text)
        if not text:
            return _error(call, "Language step failed: the model answered with no text.", started)
        return ToolResult(
            call_id=call.call_id,
            tool_name=call.tool_name,
            status="success",
            output=text,
            duration_ms=_elapsed_ms(started),
        )

    def _failure(self, call: ParsedToolCall, exc: BaseException, started: float) -> ToolResult:
        self._logger().warning(
            "tool_call_failed", call_id=call.call_id, tool=call.tool_name, exc_info=exc
        )
        return _error(call, _describe(exc), started)


class _Schedule:
    """The state of an adaptive (re-evaluated) run: which calls wait, are ready or run, the
    current wave, and the revisions made; see `pes_agent.execution.revision` for the rules."""

    __slots__ = (
        "consulting",
        "pending",
        "ready",
        "reevaluation",
        "revisions",
        "run",
        "running",
        "waiting",
        "wave",
    )

    def __init__(self, run: _PlanRun, reevaluation: Reevaluation) -> None:
        self.run = run
        self.reevaluation = reevaluation
        self.revisions = 0
        self.consulting = False
        self.pending: set[int] = set(range(run.size))  # not started, not replaced
        self.running: set[int] = set()
        self.wave: list[int] = []
        self.waiting: dict[int, int] = {}
        self.ready: list[int] = []
        self._wait_for(range(run.size))

    def _wait_for(self, indices: Sequence[int]) -> None:
        """Count what each of `indices` still waits for; the ones waiting for nothing are ready."""
        run = self.run
        for index in indices:
            # A refused call waits for nothing: its result is known already.
            open_deps = [
                dep
                for dep in run.graph.dependencies[index]
                if dep in self.pending or dep in self.running
            ]
            self.waiting[index] = 0 if run.refusal(index) else len(open_deps)
            if self.waiting[index] == 0:
                self.ready.append(index)

    def take_ready(self) -> list[int]:
        """Every ready call, in step order, now counted as running."""
        ready = sorted(self.ready)
        self.ready.clear()
        for index in ready:
            self.pending.discard(index)
            self.running.add(index)
        return ready

    def take_next(self) -> int | None:
        """The ready call with the lowest step number, now running; None when none is ready."""
        if not self.ready:
            return None
        index = min(self.ready)
        self.ready.remove(index)
        self.pending.discard(index)
        self.running.add(index)
        return index

    def finished(self, index: int) -> None:
        """A call ended: it joins the wave (unless it was only skipped) and releases its
        dependents."""
        self.running.discard(index)
        if index not in self.run.skipped:
            self.wave.append(index)
        for dependent in self.run.graph.dependents[index]:
            if dependent in self.pending and dependent in self.waiting:
                self.waiting[dependent] -= 1
                if self.waiting[dependent] == 0:
                    self.ready.append(dependent)

    def should_consult(self) -> bool:
        """Whether a wave ended that the reviser must see now."""
        if not self.wave or (not self.ready and self.running):
            return False  # no wave yet, or it goes on: nothing is about to start
        if self.revisions >= self.reevaluation.max_revisions:
            return False
        failed = any(
            (result := self.run.result(index)) is not None and result.status == "error"
            for index in self.wave
        )
        if self.reevaluation.mode == "on_failure":
            return failed
        return failed or bool(self.pending)

    async def consult(self) -> None:
        """Ask the reviser about the calls not yet run and adopt a usable revision; never
        raises (but for cancellation): whatever goes wrong keeps the plan."""
        run = self.run
        wave = list(self.wave)
        self.wave.clear()
        pending = sorted(self.pending)
        progress = run.progress(
            pending, sorted(self.running), wave, self.revisions, self.reevaluation.max_revisions
        )
        outcome = await self._ask(progress)
        if outcome.status == "revised":
            self.revisions += 1
            added = run.adopt(pending, outcome.calls)
            self.pending.difference_update(pending)
            self.ready = [index for index in self.ready if index not in run.replaced]
            for index in pending:
                self.waiting.pop(index, None)
            self.pending.update(added)
            self._wait_for(added)
        await run.notify_revision(outcome)

    async def _ask(self, progress: PlanProgress) -> PlanRevision:
        run = self.run
        wave_ids = [progress.call(step).call_id for step in progress.wave]

        def kept(status: RevisionStatus, reason: str, problems: Sequence[str] = ()) -> PlanRevision:
            return PlanRevision(
                status=status,
                revision=self.revisions,
                wave=wave_ids,
                first_step=progress.next_step,
                reason=reason,
                problems=list(problems),
            )

        try:
            proposed = await self.reevaluation.reviser.revise(progress)
        except PlanParseError as exc:
            return kept("unusable", "the re-evaluation answer could not be used", exc.errors)
        except RunError as exc:
            return kept("failed", f"the re-evaluation failed: {exc.message}")
        except Exception as exc:
            # A reviser's bug must not end the run: the plan goes on as it was.
            run._logger().exception("plan_reviser_failed")
            return kept("failed", f"the re-evaluation failed: {_describe(exc)}")
        if proposed is None:
            return kept("kept", "the model kept the remaining calls")
        calls = list(proposed)
        if not all(isinstance(call, ParsedToolCall) for call in calls):
            return kept("unusable", "the reviser returned something other than ParsedToolCalls")
        if same_calls(calls, progress):
            return kept("kept", "the model proposed the same remaining calls")
        calls = adopt_call_ids(calls, progress)
        problems = revision_errors(progress, calls)
        if problems:
            return kept("unusable", "the revised calls could not be used", problems)
        return PlanRevision(
            status="revised",
            revision=self.revisions + 1,
            wave=wave_ids,
            replaced=[progress.call(step).call_id for step in progress.pending],
            replaced_steps=list(progress.pending),
            calls=calls,
            first_step=progress.next_step,
        )


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
