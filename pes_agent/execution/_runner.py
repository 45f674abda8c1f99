"""Running one call of a plan by the rules both executors share (docs/execution.md).

`PlanLedger` holds one `execute`'s calls by step and what became of each; `CallRunner` runs a
single call (refusals, dependencies, placeholders, argument checks, approval, timeout, hooks)
and turns every failure into an error `ToolResult`. The executors only decide *when* each
call runs.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from types import CoroutineType
from typing import Any

from pes_agent.approvals.gate import ApprovalGate, denial_message
from pes_agent.approvals.models import Deny
from pes_agent.durable.effects import CURRENT_STEP
from pes_agent.errors import RunError, ToolExecutionError, UsageLimitExceeded
from pes_agent.execution._deadlines import UNTIMED, Deadline, Deadlines, Untimed
from pes_agent.execution._eager import rest_of
from pes_agent.execution._trusted import context_of, success
from pes_agent.execution.dag import CallGraph
from pes_agent.execution.feed import PlanFeed
from pes_agent.execution.language import build_language_step_messages
from pes_agent.execution.placeholders import resolve_placeholders, resolve_text
from pes_agent.execution.revision import PlanProgress, PlanRevision
from pes_agent.observing.logs import get_logger
from pes_agent.planning.parser import OutputParser
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext, ModelCaller, PlanRevisionHooks
from pes_agent.tools.base import PooledTools, TimedTool, Tool, ToolContext, ToolResult
from pes_agent.tools.decorator import FunctionTool
from pes_agent.tools.invoker import IN_PROCESS
from pes_agent.tools.registry import ToolsView
from pes_agent.tools.threads import ToolThreadPool
from pes_agent.tools.validation import validate_arguments

__all__ = ["CallRunner", "PlanLedger", "Slots", "describe", "error_result"]

_log = get_logger("pes_agent.execution.executors")
_PARSER = OutputParser()


class Slots:
    """At most `size` calls running at once (`max_concurrency`), like a semaphore whose free
    slot is taken without awaiting: an `async with` semaphore costs two coroutines a call,
    which on a plan of many short calls is a measurable share of what the executor does."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def full(self) -> bool:
        """Whether a call asking for a slot now would wait for one."""
        return self._free <= 0 or bool(self._waiters)

    def take_now(self) -> bool:
        """Take a free slot if there is one (and nobody queues for one)."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def take(self) -> None:
        """Wait for a slot, in the order callers queued."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed a slot as we were cancelled: pass it on
            else:
                self._waiters.remove(waiter)
            raise

    def give(self) -> None:
        """Free a slot: to the first caller waiting for one, if any."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


class PlanLedger:
    """One `execute`'s calls by step (index + 1) and what became of each.

    A revision appends its calls, so step numbers never change; `replaced` calls never run.
    """

    __slots__ = (
        "_results",
        "calls",
        "dependencies",
        "graph",
        "held",
        "outputs",
        "planned",
        "prior",
        "problems",
        "replaced",
        "skipped",
    )

    def __init__(self, calls: Sequence[ParsedToolCall], gate: ApprovalGate | None) -> None:
        graph = self.graph = CallGraph.build(calls)
        self.calls = list(graph.calls)
        self.planned = len(self.calls)  # the calls of the plan itself, before any revision
        # By index: the calls each call waits for, and why it cannot run. The graph's, read
        # here as lists a call indexes without a method call (two a call); a streaming plan's
        # calls before it is final (`add`) have the earlier steps they were added with and no
        # known problems, until `settle` sets the final plan's graph.
        self.dependencies: list[frozenset[int]] = list(graph.dependencies)
        self.problems: list[tuple[str, ...]] = list(graph.problems)
        self.replaced: set[int] = set()  # indices of calls a revision replaced: never run
        self.skipped: set[int] = set()  # indices not run because a dependency failed
        self.held: set[int] = set()  # indices waiting for approval, or for a call that does
        self.prior: set[int] = set()  # indices finished before a pause (a resume)
        self._results: list[ToolResult | None] = [None] * self.planned
        #: The output of each successful call by step number (1-based), for placeholders.
        self.outputs: dict[int, Any] = {}
        if gate is not None:
            self.replaced.update(step - 1 for step in gate.replaced if 0 < step <= self.planned)
            for step, result in gate.prior.items():
                if 0 < step <= self.planned:
                    self.prior.add(step - 1)
                    self.set_result(step - 1, result)

    def add(self, call: ParsedToolCall, dependencies: frozenset[int]) -> int:
        """Add the next call of a plan still streaming, needing `dependencies` (indices of
        earlier calls); returns its index. Only calls that can run before the plan is final
        are given their dependencies; the others wait for `settle`."""
        self.calls.append(call)
        self._results.append(None)
        self.dependencies.append(dependencies)
        self.problems.append(())
        return len(self.calls) - 1

    def settle(self, calls: Sequence[ParsedToolCall]) -> CallGraph:
        """The streamed plan is final: `calls`, starting with those added. Returns its graph,
        which from now on says what each call needs and why one cannot run."""
        graph = self._follow(CallGraph.build(calls))
        self.calls = list(graph.calls)
        self.planned = len(self.calls)
        self._results.extend([None] * (self.planned - len(self._results)))
        return graph

    def _follow(self, graph: CallGraph) -> CallGraph:
        """Go by `graph` from now on: its dependencies and problems."""
        self.graph = graph
        self.dependencies = list(graph.dependencies)
        self.problems = list(graph.problems)
        return graph

    @property
    def size(self) -> int:
        """How many calls there are, replaced ones and revisions' included."""
        return len(self.calls)

    def set_result(self, index: int, result: ToolResult) -> None:
        """Keep a finished call's result (and its output, for later placeholders)."""
        self._results[index] = result
        if result.status == "success":
            self.outputs[index + 1] = result.output

    def succeeded(self, indices: Iterable[int]) -> bool:
        """Whether the calls at `indices` all finished with a success."""
        results = self._results
        for index in indices:
            done = results[index]
            if done is None or done.status != "success":
                return False
        return True

    def results(self) -> list[ToolResult | None]:
        """Each call's result by index, None for a call not finished (a copy)."""
        return list(self._results)

    def result_of(self, index: int) -> ToolResult | None:
        """The result of the call at `index`, once it finished."""
        return self._results[index]

    def progress(
        self,
        pending: Sequence[int],
        running: Sequence[int],
        wave: Sequence[int],
        revisions: int,
        max_revisions: int,
        max_tool_calls: int,
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
            max_tool_calls=max_tool_calls,
        )

    def adopt(self, pending: Sequence[int], calls: Sequence[ParsedToolCall]) -> range:
        """Replace the calls at `pending` by `calls` (appended); returns their indices."""
        first = self.size
        self.replaced.update(pending)
        self.calls.extend(calls)
        self._follow(CallGraph.build(self.calls))
        self._results.extend([None] * len(calls))
        return range(first, self.size)


class CallRunner:
    """Runs each call of one `execute` when its executor asks, by the rules both executors
    share, and tells the hooks; the executor keeps each result in the `PlanLedger`."""

    __slots__ = (
        "_allowed",
        "_by_name",
        "_context",
        "_deadlines",
        "_tools",
        "_tools_wait",
        "ctx",
        "feed",
        "ledger",
        "thread_pool",
    )

    def __init__(
        self, ledger: PlanLedger, ctx: ExecutionContext, feed: PlanFeed | None = None
    ) -> None:
        self.ctx = ctx
        self.ledger = ledger
        # The calls' timeouts, on one timer (`deadlines()`); `close()` stops it.
        self._deadlines: Deadlines | None = None
        # A call's tool waited: the plan's tools likely wait, so the calls after it are
        # timed from the start and awaited directly (`_invoke`), as the drainer gives each
        # its own task once one waited.
        self._tools_wait = False
        #: The feed of a plan still streaming (calls needing approval wait for it to close).
        self.feed = feed
        # A `ToolRegistry.as_mapping()` view names the registry's pool for sync tools; with
        # another mapping they run on asyncio's default executor.
        tools = ctx.tools
        self.thread_pool: ToolThreadPool | None
        if type(tools) is ToolsView:
            # The registry's own view (every agent run): its dict read directly, and its pool
            # known without a protocol isinstance check, which alone costs more Python calls
            # than the rest of setting up a run's execution.
            self._by_name: Mapping[str, Tool] = tools.by_name
            self.thread_pool = tools.thread_pool
        else:
            self._by_name = tools
            pool = tools.thread_pool if isinstance(tools, PooledTools) else None
            self.thread_pool = pool if isinstance(pool, ToolThreadPool) else None
        self._tools: dict[str, tuple[Tool, float, bool, bool]] = {}
        self._context: ToolContext | None = None
        self._allowed: set[str] = set()  # tool names registered and enabled

    def deadlines(self) -> Deadlines:
        """The calls' timeouts, made when the first call waits: a call that returns without
        waiting needs none (`_invoke`), and on a plan of such calls nothing is allocated."""
        deadlines = self._deadlines
        if deadlines is None:
            deadlines = self._deadlines = Deadlines()
        return deadlines

    def close(self) -> None:
        """The execution is over: stop the calls' timer."""
        if self._deadlines is not None:
            self._deadlines.close()

    def logger(self) -> Any:
        """The log, bound to the run's thread and trace."""
        # Bound only when something goes wrong: binding on every run costs more than the run.
        return _log.bind(thread_id=self.ctx.thread_id, trace_id=self.ctx.trace_id)

    def refusal(self, index: int) -> ToolResult | None:
        """Return the error result of a call that must not run at all, or None."""
        ledger = self.ledger
        if index in ledger.prior:
            return ledger.result_of(index)  # finished before the pause: never run again
        call = ledger.calls[index]
        ctx = self.ctx
        # Calls a revision adds were checked against the limit when it was adopted.
        if ctx.max_tool_calls <= index < ledger.planned:
            return error_result(
                call,
                f"Not run: the plan has {ledger.planned} tool calls, more than the limit of "
                f"{ctx.max_tool_calls} per plan.",
            )
        problems = ledger.problems[index]
        if problems:
            return error_result(call, "Not run: " + " ".join(problems))
        if call.instruction is not None:
            if ctx.llm is None:
                return error_result(
                    call,
                    "Not run: this is a language step and the executor was given no model "
                    "caller (ExecutionContext.llm).",
                )
            return None
        if call.tool_name in self._allowed:
            return None  # an earlier call of this execution passed the same checks
        if call.tool_name not in self._by_name:
            return error_result(call, f'Tool "{call.tool_name}" is not registered.')
        if call.tool_name not in ctx.enabled_tools:
            return error_result(
                call, f'Tool "{call.tool_name}" is not enabled for thread "{ctx.thread_id}".'
            )
        self._allowed.add(call.tool_name)
        return None

    async def run_call(self, index: int, limiter: Slots | None) -> ToolResult:
        """Run a call whose dependencies have all finished: check its dependencies,
        arguments and approval, then invoke it under `limiter`. Every failure becomes a
        result, except the run's budget being spent (`UsageLimitExceeded`), which stops the
        run."""
        ledger = self.ledger
        call = ledger.calls[index]
        # A durable engine keys the call's step by its number (the call's task has its own
        # context; a call run in the caller's task resets it after).
        step = CURRENT_STEP.set(index + 1)
        # The checks are written out in this coroutine rather than in one of their own that
        # it awaits: a coroutine less a call.
        try:
            needed = ledger.dependencies[index]
            if needed:
                unmet = self._unmet(index, call, needed)
                if unmet is not None:
                    return unmet
            if call.instruction is not None:
                try:
                    instruction = resolve_text(call.instruction, ledger.outputs)
                except ToolExecutionError as exc:
                    return error_result(call, exc.message)
                if limiter is None:
                    return await self._run_language_step(call, instruction)
                if not limiter.take_now():
                    await limiter.take()
                try:
                    return await self._run_language_step(call, instruction)
                finally:
                    limiter.give()
            if not isinstance(call.arguments, dict):
                return error_result(
                    call,
                    f'Invalid arguments for tool "{call.tool_name}": arguments must be a JSON '
                    'object of named parameters, e.g. {"name": value}, not an array.',
                )
            try:
                arguments = resolve_placeholders(call.arguments, ledger.outputs)
            except ToolExecutionError as exc:
                return error_result(call, exc.message)
            tool, timeout_s, checked, shares_context = self._tool(call.tool_name)
            # A @tool function validates its own arguments with its pydantic model, which, like
            # pydantic everywhere, accepts "12" for a float (weak models often quote numbers);
            # other tools are checked against the JSON Schema they publish.
            problems = [] if checked else validate_arguments(tool.schema.input_schema, arguments)
            if problems:
                return error_result(
                    call, f'Invalid arguments for tool "{call.tool_name}": ' + "; ".join(problems)
                )
            gate = self.ctx.approvals
            if gate is not None and gate.requires(call.model_copy(update={"arguments": arguments})):
                if self.feed is not None:
                    # A person (or the handler) is asked only about the final plan: a streaming
                    # plan may still turn out unusable, and then none of its calls runs.
                    await self.feed.final()
                decision = await gate.decide(call, arguments, index + 1)
                if decision is None:
                    return self._hold(index, call, [])
                if isinstance(decision, Deny):
                    return error_result(call, denial_message(decision))
            if limiter is None:
                return await self._invoke(call, tool, timeout_s, arguments, shares_context)
            if not limiter.take_now():
                await limiter.take()
            try:
                return await self._invoke(call, tool, timeout_s, arguments, shares_context)
            finally:
                limiter.give()
        except UsageLimitExceeded:
            raise  # the run's budget is spent: the whole execution stops
        except Exception as exc:
            # A bug of ours, not of the tool: still a result, so the plan's other calls finish.
            self.logger().exception("tool_call_internal_error", call_id=call.call_id)
            return error_result(call, f"Internal error while running the call: {describe(exc)}")
        finally:
            CURRENT_STEP.reset(step)

    async def report_end(self, index: int, result: ToolResult) -> None:
        """Tell `on_call_end` about a result; a hook failure is logged, never raised."""
        hooks = self.ctx.hooks
        ledger = self.ledger
        if hooks is None or index in ledger.prior or index in ledger.held:
            return  # reported before the pause, or not run yet: reported when it is
        call = ledger.calls[index]
        step = CURRENT_STEP.set(index + 1)  # what it records is the call's (durable engines)
        try:
            await hooks.on_call_end(call, result)
        except Exception:
            self.logger().exception(
                "execution_hook_failed", hook="on_call_end", call_id=call.call_id
            )
        finally:
            CURRENT_STEP.reset(step)

    async def report_revision(self, outcome: PlanRevision) -> None:
        """Tell hooks that want it (`PlanRevisionHooks`) how a re-evaluation ended."""
        hooks = self.ctx.hooks
        if not isinstance(hooks, PlanRevisionHooks):
            return
        try:
            await hooks.on_plan_revision(outcome)
        except Exception:
            self.logger().exception("execution_hook_failed", hook="on_plan_revision")

    def final_results(self) -> list[ToolResult]:
        """All results in call order, exactly one per call not replaced.

        The call graph is acyclic, so every call gets a result; should a scheduling bug ever
        leave one waiting, it still gets an error result (and the bug is logged) rather than
        silently shortening the list, which would pair later results with the wrong calls.
        """
        ledger = self.ledger
        replaced = ledger.replaced
        finished: list[ToolResult] = []
        for index, (call, result) in enumerate(zip(ledger.calls, ledger.results(), strict=True)):
            if index in replaced:
                continue  # replaced by a revision: never run, no result
            if result is None:
                self.logger().error("tool_call_never_scheduled", call_id=call.call_id)
                result = error_result(
                    call, "Not run: internal error: the call was never scheduled."
                )
            finished.append(result)
        return finished

    def _unmet(self, index: int, call: ParsedToolCall, needed: frozenset[int]) -> ToolResult | None:
        """The result of a call whose dependencies at `needed` did not all succeed (skipped,
        or held while one waits for approval); None when they all did."""
        ledger = self.ledger
        if not ledger.held:  # the common case: no call waits for approval
            if ledger.succeeded(needed):
                return None
            failed = [dep for dep in needed if not ledger.succeeded((dep,))]
            return self._skip(index, call, sorted(failed))
        dependencies = sorted(needed)
        waiting = [dep for dep in dependencies if dep in ledger.held]
        failed = [
            dep
            for dep in dependencies
            if dep not in ledger.held
            and ((done := ledger.result_of(dep)) is None or done.status != "success")
        ]
        if failed:
            return self._skip(index, call, failed)
        if waiting:
            return self._hold(index, call, waiting)
        return None

    def _tool(self, name: str) -> tuple[Tool, float, bool, bool]:
        """The tool called `name`, its timeout, whether it checks its own arguments (a
        `@tool` function) and whether its calls may share the execution's context; looked up
        once per execution (a protocol isinstance check costs more than the rest of the
        lookup)."""
        known = self._tools.get(name)
        if known is None:
            tool = self._by_name[name]
            # A @tool function has its own timeout by type: no protocol isinstance check.
            if type(tool) is FunctionTool or isinstance(tool, TimedTool):
                own_timeout = tool.timeout_s
            else:
                own_timeout = None
            timeout_s = own_timeout if own_timeout is not None else self.ctx.tool_timeout_s
            # A @tool function without a ToolContext parameter, run in process, never shows
            # its context to anyone (`FunctionTool.takes_context`), so its calls are given the
            # execution's template rather than a copy each with the call's id (about 1 µs a
            # call on a plan of 1,000). Any other tool or invoker gets the call's own.
            shares_context = (
                type(tool) is FunctionTool
                and not tool.takes_context
                and self.ctx.invoker is IN_PROCESS
            )
            checked = isinstance(tool, FunctionTool)
            known = self._tools[name] = (tool, timeout_s, checked, shares_context)
        return known

    def _skip(self, index: int, call: ParsedToolCall, failed: Sequence[int]) -> ToolResult:
        """Skip a call whose dependencies at `failed` (ascending) failed."""
        ledger = self.ledger
        ledger.skipped.add(index)
        steps = " and ".join(f'{dep + 1} ("{ledger.calls[dep].call_id}")' for dep in failed)
        noun = "step" if len(failed) == 1 else "steps"
        return error_result(call, f"Not run: it depends on {noun} {steps}, which failed.")

    def _hold(self, index: int, call: ParsedToolCall, waiting: Sequence[int]) -> ToolResult:
        """Hold a call that waits for approval (its own, or that of the steps in `waiting`)."""
        ledger = self.ledger
        ledger.held.add(index)
        ledger.skipped.add(index)  # not part of a wave: nothing ran
        if waiting:
            gate = self.ctx.approvals
            if gate is not None:
                gate.hold(call, index + 1)
            steps = " and ".join(f'{dep + 1} ("{ledger.calls[dep].call_id}")' for dep in waiting)
            return error_result(
                call, f"Not run: it waits for step {steps}, which waits for approval."
            )
        return error_result(call, "Not run: it waits for approval.")

    async def _invoke(
        self,
        call: ParsedToolCall,
        tool: Tool,
        timeout_s: float,
        arguments: dict[str, Any],
        shares_context: bool,
    ) -> ToolResult:
        """Invoke one tool with its resolved arguments, under its timeout, between the hooks'
        `on_call_start` and the result; `shares_context`: see `_tool`."""
        ctx = self.ctx
        hooks = ctx.hooks
        if hooks is not None:
            try:
                await hooks.on_call_start(call, arguments)
            except Exception:
                self.logger().exception(
                    "execution_hook_failed", hook="on_call_start", call_id=call.call_id
                )
        template = self._context
        if template is None:  # validated once per execution; each call's is a copy
            template = self._context = ToolContext(
                thread_id=ctx.thread_id,
                trace_id=ctx.trace_id,
                call_id="",
                user_id=ctx.user_id,
                session_id=ctx.session_id,
                state=ctx.state,
                thread_pool=self.thread_pool,
            )
        context = template if shares_context else context_of(template, call.call_id)
        invoker = ctx.invoker
        deadline: Deadline | Untimed = UNTIMED
        started = time.perf_counter()
        try:
            if invoker is not IN_PROCESS:
                deadline = self.deadlines().start(timeout_s)
                output = await invoker.invoke(tool, arguments, context)
            else:  # the invoker's own path, a coroutine less
                running = tool.execute(arguments, context)
                if self._tools_wait or type(running) is not CoroutineType:
                    deadline = self.deadlines().start(timeout_s)
                    output = await running
                else:
                    # The tool's first step is taken here: a tool that returns without
                    # waiting could never have been cancelled, so it gets no deadline (one
                    # costs more than running a no-op tool). One that waits gets it from when
                    # the call began, as `asyncio.timeout` would have set it, and is driven on
                    # through `rest_of` (a step more each time it resumes, which the calls
                    # after it are spared).
                    try:
                        waited = running.send(None)
                    except StopIteration as done:
                        output = done.value
                    else:
                        self._tools_wait = True
                        ran_s = time.perf_counter() - started
                        deadline = self.deadlines().start(timeout_s, ran_s)
                        output = await rest_of(running, waited)
        except ToolExecutionError as exc:
            # Raised on purpose by the tool (or by @tool's argument check): a clean message.
            deadline.settle()
            return error_result(call, exc.message, started)
        except UsageLimitExceeded:
            # The run's budget had no room for this call (the invoker asks it before the
            # tool): the run stops, and the calls beside it are cancelled with the group.
            deadline.settle()
            raise
        except asyncio.CancelledError as exc:
            if deadline.settle():
                return error_result(
                    call, f'Tool "{call.tool_name}" timed out after {timeout_s:g}s.', started
                )
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # execute() itself is being cancelled
            return self._failure(call, exc, started)
        except (Exception, SystemExit) as exc:
            # SystemExit too: a tool calling sys.exit() (argparse does) must not end the
            # event loop, and with it every other run of the process. A TimeoutError here is
            # the tool's own: our deadline cancels the call.
            deadline.settle()
            return self._failure(call, exc, started)
        except BaseException:
            deadline.settle()
            raise
        if deadline is not UNTIMED:  # most calls never waited: nothing to settle
            deadline.settle()
        duration_ms = (time.perf_counter() - started) * 1000.0
        return success(call.call_id, call.tool_name, output, duration_ms)

    async def _run_language_step(self, call: ParsedToolCall, instruction: str) -> ToolResult:
        """Do a language step: one model call on the filled instruction; its text is the result."""
        llm: ModelCaller | None = self.ctx.llm
        if llm is None:  # refused before it could get here; kept for custom callers
            return error_result(call, "Not run: the executor was given no model caller.")
        hooks = self.ctx.hooks
        if hooks is not None:
            try:
                await hooks.on_call_start(call, {"instruction": instruction})
            except Exception:
                self.logger().exception(
                    "execution_hook_failed", hook="on_call_start", call_id=call.call_id
                )
        started = time.perf_counter()
        try:
            response = await llm(build_language_step_messages(instruction), phase="language_step")
        except UsageLimitExceeded:
            raise  # the run's budget is spent: the run stops, not just this step
        except RunError as exc:
            # The provider failed after its retries: an error result, so the run is partial.
            return error_result(call, f"Language step failed: {exc.message}", started)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            return self._failure(call, exc, started)
        except Exception as exc:
            return self._failure(call, exc, started)
        text = _PARSER.parse_synthesis_output(response.text)
        if not text:
            return error_result(
                call, "Language step failed: the model answered with no text.", started
            )
        return ToolResult(
            call_id=call.call_id,
            tool_name=call.tool_name,
            status="success",
            output=text,
            duration_ms=_elapsed_ms(started),
        )

    def _failure(self, call: ParsedToolCall, exc: BaseException, started: float) -> ToolResult:
        """The error result of a call that raised; the traceback goes to the log."""
        self.logger().warning(
            "tool_call_failed", call_id=call.call_id, tool=call.tool_name, exc_info=exc
        )
        return error_result(call, describe(exc), started)


def describe(exc: BaseException) -> str:
    """`ValueError: <message>`, or the bare type name when the message is empty."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _elapsed_ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def error_result(call: ParsedToolCall, message: str, started: float | None = None) -> ToolResult:
    """The error `ToolResult` of `call`; its duration counts from `started` when given."""
    return ToolResult(
        call_id=call.call_id,
        tool_name=call.tool_name,
        status="error",
        error=message,
        duration_ms=0.0 if started is None else _elapsed_ms(started),
    )
