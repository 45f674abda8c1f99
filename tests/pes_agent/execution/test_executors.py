"""Executors: the DAG schedule, limits, failures as results, hooks and cancellation."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import pytest

from pes_agent.errors import ToolExecutionError, UsageError, UsageLimitExceeded
from pes_agent.execution.executors import ConcurrentExecutor, SequentialExecutor
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext, Executor
from pes_agent.tools import Tool, ToolContext, ToolRegistry, ToolResult, ToolSchema, tool

# Safety net so a scheduling bug fails the test instead of hanging it; never asserted on.
DEADLINE_S = 5.0


class Lab:
    """A `work` tool that records start/end events and can be held until released."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.gates: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.started: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.running = 0
        self.peak = 0
        self.contexts: list[ToolContext] = []

        @tool
        async def work(
            name: str, context: ToolContext, hold: bool = False, value: Any = None
        ) -> dict[str, Any]:
            """Record that this call ran, optionally waiting for its gate."""
            self.contexts.append(context)
            self.events.append(("start", name))
            self.started[name].set()
            self.running += 1
            self.peak = max(self.peak, self.running)
            try:
                if hold:
                    await self.gates[name].wait()
                else:
                    for _ in range(3):  # give other ready calls a chance to start
                        await asyncio.sleep(0)
            except asyncio.CancelledError:
                self.events.append(("cancelled", name))
                raise
            finally:
                self.running -= 1
            self.events.append(("end", name))
            return {"name": name, "value": value}

        self.work = work

    async def wait_started(self, name: str) -> None:
        async with asyncio.timeout(DEADLINE_S):
            await self.started[name].wait()


class RecordingHooks:
    """Execution hooks that remember what they were told."""

    def __init__(self) -> None:
        self.starts: list[tuple[str, dict[str, Any]]] = []
        self.ends: list[ToolResult] = []
        self.ended: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    async def wait_ended(self, call_id: str) -> None:
        async with asyncio.timeout(DEADLINE_S):
            await self.ended[call_id].wait()

    async def on_call_start(self, call: ParsedToolCall, arguments: dict[str, Any]) -> None:
        self.starts.append((call.call_id, arguments))

    async def on_call_end(self, call: ParsedToolCall, result: ToolResult) -> None:
        self.ends.append(result)
        self.ended[call.call_id].set()


class RaisingHooks:
    """Hooks that always fail."""

    async def on_call_start(self, call: ParsedToolCall, arguments: dict[str, Any]) -> None:
        raise RuntimeError("start hook broke")

    async def on_call_end(self, call: ParsedToolCall, result: ToolResult) -> None:
        raise RuntimeError("end hook broke")


def work(
    call_id: str, name: str | None = None, *, after: Iterable[str] = (), **args: Any
) -> ParsedToolCall:
    return ParsedToolCall(
        call_id=call_id,
        tool_name="work",
        arguments={"name": name or call_id, **args},
        depends_on=list(after),
    )


def context(*tools: Any, enabled: Iterable[str] | None = None, **options: Any) -> ExecutionContext:
    registry = ToolRegistry(tools)
    return ExecutionContext(
        thread_id="t1",
        trace_id="tr1",
        tools=registry.as_mapping(),
        enabled_tools=frozenset(registry.names if enabled is None else enabled),
        user_id="u1",
        **options,
    )


@pytest.fixture(params=[ConcurrentExecutor, SequentialExecutor])
def executor(request: pytest.FixtureRequest) -> Executor:
    """Each shared-semantics test runs against both executors."""
    made: Executor = request.param()
    return made


@pytest.fixture
def lab() -> Lab:
    return Lab()


# --- scheduling (ConcurrentExecutor) --------------------------------------------------------


async def test_independent_calls_overlap_and_a_dependent_starts_when_its_dependency_ends(
    lab: Lab,
) -> None:
    """b and a run together; c (needing a) starts once a ends, while b is still running."""
    calls = [
        work("a", hold=True),
        work("b", hold=True),
        work("c", hold=True, value="{step_1_result.name}"),
    ]
    task = asyncio.create_task(ConcurrentExecutor().execute(calls, context(lab.work)))
    await lab.wait_started("a")
    await lab.wait_started("b")
    assert lab.events == [("start", "a"), ("start", "b")]
    lab.gates["a"].set()
    await lab.wait_started("c")
    assert lab.events == [("start", "a"), ("start", "b"), ("end", "a"), ("start", "c")]
    lab.gates["b"].set()
    lab.gates["c"].set()
    results = await task
    assert [r.call_id for r in results] == ["a", "b", "c"]
    assert results[2].output == {"name": "c", "value": "a"}


async def test_call_waits_for_its_last_dependency_only(lab: Lab) -> None:
    """c depends on a and b: it starts right after the later of the two ends, not before."""
    hooks = RecordingHooks()
    calls = [work("a", hold=True), work("b", hold=True), work("c", after=["a", "b"])]
    task = asyncio.create_task(ConcurrentExecutor().execute(calls, context(lab.work, hooks=hooks)))
    await lab.wait_started("a")
    lab.gates["b"].set()
    await hooks.wait_ended("b")
    assert ("start", "c") not in lab.events
    lab.gates["a"].set()
    results = await task
    assert lab.events == [
        ("start", "a"),
        ("start", "b"),
        ("end", "b"),
        ("end", "a"),
        ("start", "c"),
        ("end", "c"),
    ]
    assert all(r.status == "success" for r in results)


async def test_results_come_back_in_call_order_whatever_the_finish_order(lab: Lab) -> None:
    """A slow first call still gets the first result."""
    hooks = RecordingHooks()
    calls = [work("slow", hold=True), work("fast")]
    ctx = context(lab.work, hooks=hooks)
    task = asyncio.create_task(ConcurrentExecutor().execute(calls, ctx))
    await hooks.wait_ended("fast")
    lab.gates["slow"].set()
    results = await task
    assert [r.call_id for r in results] == ["slow", "fast"]
    assert [r.call_id for r in hooks.ends] == ["fast", "slow"]


async def test_max_concurrency_bounds_the_running_tools(lab: Lab) -> None:
    """With max_concurrency=2, six independent calls never run more than two at a time."""
    calls = [work(f"c{i}") for i in range(6)]
    results = await ConcurrentExecutor().execute(calls, context(lab.work, max_concurrency=2))
    assert lab.peak == 2
    assert [r.status for r in results] == ["success"] * 6


async def test_max_concurrency_below_one_is_a_usage_error(lab: Lab) -> None:
    """A limit of 0 would deadlock, so it is refused with the fix."""
    with pytest.raises(UsageError, match="max_concurrency must be at least 1"):
        await ConcurrentExecutor().execute([work("a")], context(lab.work, max_concurrency=0))


async def test_cycle_in_an_unrepaired_plan_is_refused_not_deadlocked(lab: Lab) -> None:
    """Calls in a dependsOn cycle get error results; the rest of the plan still runs."""
    calls = [work("a", after=["b"]), work("b", after=["a"]), work("c")]
    results = await ConcurrentExecutor().execute(calls, context(lab.work))
    assert [r.status for r in results] == ["error", "error", "success"]
    assert results[0].error is not None
    assert results[0].error.startswith('Not run: The calls "a" -> "b" -> "a" form a dependency')


# Two 2-cycles joined into one strongly connected group (1<->2, 3<->4, 2->3, 4->1), and call 5
# depending on it: the plan shape whose second cycle used to be left waiting forever.
INTERLOCKED = [
    ("c1", ["c2"]),
    ("c2", ["c1", "c3"]),
    ("c3", ["c4"]),
    ("c4", ["c3", "c1"]),
    ("c5", ["c1"]),
]


async def test_interlocked_cycles_give_every_call_exactly_one_result(
    lab: Lab, executor: Executor
) -> None:
    """Every cyclic call is refused naming its cycle, and the call needing one names that step."""
    calls = [work(call_id, after=after) for call_id, after in INTERLOCKED]
    async with asyncio.timeout(DEADLINE_S):
        results = await executor.execute(calls, context(lab.work))
    assert [r.call_id for r in results] == ["c1", "c2", "c3", "c4", "c5"]
    assert [r.status for r in results] == ["error"] * 5
    for result in results[:4]:
        assert result.error is not None
        assert f'"{result.call_id}" -> ' in result.error
        assert "form a dependency cycle" in result.error
    assert results[4].error == 'Not run: it depends on step 1 ("c1"), which failed.'
    assert lab.events == []


_OPTIMIZED_RUN = """
import asyncio, json, sys
from pes_agent.execution.executors import ConcurrentExecutor, SequentialExecutor
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext
from pes_agent.tools import ToolRegistry, tool

@tool
def work(name: str) -> str:
    '''Return the name.'''
    return name

async def main() -> None:
    plan = json.loads(sys.argv[1])
    calls = [
        ParsedToolCall(call_id=c, tool_name="work", arguments={"name": c}, depends_on=after)
        for c, after in plan
    ]
    registry = ToolRegistry([work])
    ctx = ExecutionContext(
        thread_id="t", trace_id="tr", tools=registry.as_mapping(),
        enabled_tools=frozenset(registry.names),
    )
    counts = [
        len(await asyncio.wait_for(made.execute(calls, ctx), 5))
        for made in (ConcurrentExecutor(), SequentialExecutor())
    ]
    print(json.dumps(counts))

asyncio.run(main())
"""


@pytest.mark.slow
def test_interlocked_cycles_under_python_optimize_return_a_result_per_call() -> None:
    """With asserts stripped (python -O) both executors still return one result per call."""
    done = subprocess.run(
        [sys.executable, "-O", "-c", _OPTIMIZED_RUN, json.dumps(INTERLOCKED)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [len(INTERLOCKED), len(INTERLOCKED)]


# --- sequential ---------------------------------------------------------------------------


async def test_sequential_executor_runs_one_call_at_a_time_in_plan_order(lab: Lab) -> None:
    """Each call ends before the next starts, in plan order."""
    calls = [work("a"), work("b"), work("c", value="{step_1_result}")]
    results = await SequentialExecutor().execute(calls, context(lab.work))
    assert lab.events == [
        ("start", "a"),
        ("end", "a"),
        ("start", "b"),
        ("end", "b"),
        ("start", "c"),
        ("end", "c"),
    ]
    assert lab.peak == 1
    assert results[2].output == {"name": "c", "value": {"name": "a", "value": None}}


async def test_sequential_executor_runs_a_depends_on_target_first(lab: Lab) -> None:
    """A call that depends on a later call runs after it; results stay in call order."""
    results = await SequentialExecutor().execute(
        [work("a", after=["b"]), work("b")], context(lab.work)
    )
    assert [e for e in lab.events if e[0] == "start"] == [("start", "b"), ("start", "a")]
    assert [r.call_id for r in results] == ["a", "b"]


# --- per-call semantics, both executors -----------------------------------------------------


async def test_placeholder_passes_a_structured_result_with_its_type(
    executor: Executor, lab: Lab
) -> None:
    """A whole-value placeholder hands the earlier dict to the next tool unchanged."""
    calls = [work("a", value=[1, 2]), work("b", value="<step_1_result.value>")]
    results = await executor.execute(calls, context(lab.work))
    assert results[1].output == {"name": "b", "value": [1, 2]}


async def test_tool_gets_a_context_naming_the_call_and_thread(executor: Executor, lab: Lab) -> None:
    """The ToolContext carries the thread, trace, user and call ids, and the tools' threads."""
    await executor.execute([work("a")], context(lab.work))
    expected = ToolContext(thread_id="t1", trace_id="tr1", call_id="a", user_id="u1")
    assert [c.model_dump() for c in lab.contexts] == [expected.model_dump()]
    assert lab.contexts[0].thread_pool is not None


async def test_timeout_becomes_an_error_result(executor: Executor, lab: Lab) -> None:
    """A call running past the agent's tool_timeout_s gets `timed out after Ns`."""
    results = await executor.execute([work("a", hold=True)], context(lab.work, tool_timeout_s=0.05))
    assert results[0].status == "error"
    assert results[0].error == 'Tool "work" timed out after 0.05s.'
    assert ("cancelled", "a") in lab.events


async def test_tool_own_timeout_overrides_the_agent_default(executor: Executor) -> None:
    """@tool(timeout_s=...) wins over ctx.tool_timeout_s."""

    @tool(timeout_s=0.02)
    async def stuck() -> None:
        """Never finishes."""
        await asyncio.Event().wait()

    results = await executor.execute(
        [ParsedToolCall(call_id="s", tool_name="stuck")], context(stuck, tool_timeout_s=60)
    )
    assert results[0].error == 'Tool "stuck" timed out after 0.02s.'


async def test_tool_exception_becomes_an_error_with_type_and_message(
    executor: Executor,
) -> None:
    """A raising tool gives `ValueError: boom`, without a traceback in the text."""

    @tool
    def explode(x: int) -> int:
        """Fail."""
        raise ValueError(f"boom {x}")

    results = await executor.execute(
        [ParsedToolCall(call_id="e", tool_name="explode", arguments={"x": 1})], context(explode)
    )
    assert results[0].status == "error"
    assert results[0].error == "ValueError: boom 1"
    assert results[0].duration_ms > 0


async def test_tool_execution_error_raised_by_a_tool_keeps_its_own_message(
    executor: Executor,
) -> None:
    """A tool raising ToolExecutionError on purpose reports just its message."""

    @tool
    async def lookup(city: str) -> str:
        """Look up a city."""
        raise ToolExecutionError(f"No city called {city}.")

    results = await executor.execute(
        [ParsedToolCall(call_id="l", tool_name="lookup", arguments={"city": "Atlantis"})],
        context(lookup),
    )
    assert results[0].error == "No city called Atlantis."


@pytest.mark.parametrize("is_async", [False, True])
async def test_tool_that_exits_the_process_is_an_error_result(
    executor: Executor, is_async: bool
) -> None:
    """sys.exit() or argparse inside a tool (sync or async) is an error result, not an exit."""
    import argparse

    def parse(args: str) -> int:
        """Parse a command line."""
        parser = argparse.ArgumentParser(exit_on_error=True)
        parser.add_argument("--n", type=int, required=True)
        return int(parser.parse_args(args.split()).n)

    async def parse_async(args: str) -> int:
        """Parse a command line."""
        return parse(args)

    cli = tool(name="cli")(parse_async if is_async else parse)
    results = await executor.execute(
        [ParsedToolCall(call_id="c", tool_name="cli", arguments={"args": "--n x"})], context(cli)
    )
    assert results[0].status == "error"
    assert results[0].error is not None
    assert "SystemExit" in results[0].error


async def test_tool_that_raises_cancelled_error_itself_is_an_error_result(
    executor: Executor,
) -> None:
    """A CancelledError a tool raises on its own does not cancel the plan."""

    @tool
    async def quits() -> None:
        """Cancel itself."""
        raise asyncio.CancelledError

    results = await executor.execute(
        [ParsedToolCall(call_id="q", tool_name="quits")], context(quits)
    )
    assert results[0].status == "error"
    assert results[0].error == "CancelledError"


async def test_not_enabled_tool_is_refused_with_thread_name(executor: Executor, lab: Lab) -> None:
    """A registered tool outside enabled_tools gets ART's wording and does not run."""
    results = await executor.execute([work("a")], context(lab.work, enabled=[]))
    assert results[0].error == 'Tool "work" is not enabled for thread "t1".'
    assert lab.events == []


async def test_unregistered_tool_is_refused(executor: Executor, lab: Lab) -> None:
    """A tool name nobody registered gets `is not registered`."""
    results = await executor.execute(
        [ParsedToolCall(call_id="x", tool_name="ghost")], context(lab.work, enabled=["ghost"])
    )
    assert results[0].error == 'Tool "ghost" is not registered.'


async def test_arguments_given_as_an_array_are_refused_and_the_tool_is_not_run(
    executor: Executor, lab: Lab
) -> None:
    """A call whose arguments are a JSON array (kept by the parser, as ART's) is an error result."""
    call = ParsedToolCall(call_id="a", tool_name="work", arguments=[1, 2, 3])
    results = await executor.execute([call], context(lab.work))
    assert results[0].status == "error"
    assert results[0].error is not None
    assert "must be a JSON object of named parameters" in results[0].error
    assert lab.events == []


async def test_invalid_arguments_are_listed_and_the_tool_is_not_run(
    executor: Executor, lab: Lab
) -> None:
    """Arguments a @tool function's types refuse give one error listing every problem."""
    call = ParsedToolCall(call_id="a", tool_name="work", arguments={"name": 3, "hold": "maybe"})
    results = await executor.execute([call], context(lab.work))
    assert results[0].error == (
        'Invalid arguments for tool "work": arguments.name: Input should be a valid string; '
        "arguments.hold: Input should be a valid boolean, unable to interpret input"
    )
    assert lab.events == []


async def test_a_tool_function_accepts_numbers_written_as_strings(executor: Executor) -> None:
    """A quoted number for a float parameter is coerced, as pydantic does, not refused."""

    @tool
    def half(x: float) -> float:
        """Halve a number."""
        return x / 2

    call = ParsedToolCall(call_id="h", tool_name="half", arguments={"x": "12"})
    results = await executor.execute([call], context(half))
    assert results[0].status == "success"
    assert results[0].output == 6.0


async def test_class_based_tool_arguments_are_validated_against_its_schema(
    executor: Executor,
) -> None:
    """A class-based tool gets the JSON Schema check before execute is called."""

    class Echo:
        schema = ToolSchema(
            name="echo",
            description="Echo.",
            input_schema={
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        )
        calls = 0

        async def execute(self, arguments: dict[str, Any], context: ToolContext) -> Any:
            Echo.calls += 1
            return arguments["text"]

    echo: Tool = Echo()
    ctx = context(echo)
    results = await executor.execute(
        [
            ParsedToolCall(call_id="bad", tool_name="echo", arguments={}),
            ParsedToolCall(call_id="ok", tool_name="echo", arguments={"text": "hi"}),
        ],
        ctx,
    )
    assert (
        results[0].error
        == 'Invalid arguments for tool "echo": arguments.text: required property is missing'
    )
    assert results[1].output == "hi"
    assert Echo.calls == 1


async def test_failed_dependency_skips_dependents_naming_the_failed_step(
    executor: Executor, lab: Lab
) -> None:
    """Dependents of a failed call (by placeholder or dependsOn, transitively) are not run."""
    calls = [
        ParsedToolCall(call_id="a", tool_name="ghost"),
        work("b", value="{step_1_result}"),
        work("c", after=["a"]),
        work("d", value="{step_2_result}"),
        work("e"),
    ]
    results = await executor.execute(calls, context(lab.work, enabled=["work", "ghost"]))
    assert [r.status for r in results] == ["error", "error", "error", "error", "success"]
    assert results[1].error == 'Not run: it depends on step 1 ("a"), which failed.'
    assert results[2].error == 'Not run: it depends on step 1 ("a"), which failed.'
    assert results[3].error == 'Not run: it depends on step 2 ("b"), which failed.'
    assert lab.events == [("start", "e"), ("end", "e")]


class _BrokenTools(dict[str, Any]):
    """A tools mapping that names "broken" but fails to hand it over (a bug of the mapping)."""

    def __getitem__(self, name: str) -> Any:
        if name == "broken":
            raise RuntimeError("lookup failed")
        return super().__getitem__(name)

    def __contains__(self, name: object) -> bool:
        return name == "broken" or super().__contains__(name)


async def test_an_internal_error_is_a_result_and_the_other_calls_finish(
    executor: Executor, lab: Lab
) -> None:
    """A failure of the executor's own machinery fails that call only, saying what broke."""
    tools = _BrokenTools(work=lab.work)
    ctx = ExecutionContext(
        thread_id="t1",
        trace_id="tr1",
        tools=tools,
        enabled_tools=frozenset({"work", "broken"}),
    )
    calls = [ParsedToolCall(call_id="a", tool_name="broken"), work("b")]
    results = await executor.execute(calls, ctx)
    assert [r.status for r in results] == ["error", "success"]
    assert results[0].error == "Internal error while running the call: RuntimeError: lookup failed"
    assert lab.events == [("start", "b"), ("end", "b")]


async def test_unresolvable_placeholder_is_an_error_result(executor: Executor, lab: Lab) -> None:
    """A missing field in a placeholder fails that call with the placeholder's message."""
    calls = [work("a"), work("b", value="{step_1_result.missing}")]
    results = await executor.execute(calls, context(lab.work))
    assert results[1].error == (
        'Cannot resolve {step_1_result.missing}: step_1_result has no field "missing" '
        "(its fields: name, value)."
    )


async def test_calls_beyond_max_tool_calls_are_refused(executor: Executor, lab: Lab) -> None:
    """Only the first max_tool_calls calls run; the rest get an error saying the limit."""
    calls = [work("a"), work("b"), work("c")]
    results = await executor.execute(calls, context(lab.work, max_tool_calls=2))
    assert [r.status for r in results] == ["success", "success", "error"]
    assert results[2].error == (
        "Not run: the plan has 3 tool calls, more than the limit of 2 per plan."
    )
    assert ("start", "c") not in lab.events


async def test_output_that_is_not_json_is_kept_as_is(executor: Executor) -> None:
    """A tool may return any object; the result holds that very object."""
    marker = object()

    @tool
    def make() -> object:
        """Return an object."""
        return marker

    results = await executor.execute([ParsedToolCall(call_id="m", tool_name="make")], context(make))
    assert results[0].output is marker


async def test_empty_plan_returns_no_results(executor: Executor, lab: Lab) -> None:
    """No calls, no results, no errors."""
    assert await executor.execute([], context(lab.work)) == []


# --- hooks --------------------------------------------------------------------------------


async def test_hooks_see_resolved_arguments_and_every_result_including_refusals(
    executor: Executor, lab: Lab
) -> None:
    """on_call_start gets resolved arguments; on_call_end fires for run and refused calls."""
    hooks = RecordingHooks()
    calls = [
        work("a", value=5),
        work("b", value="{step_1_result.value}"),
        ParsedToolCall(call_id="c", tool_name="ghost"),
    ]
    await executor.execute(calls, context(lab.work, hooks=hooks))
    assert hooks.starts == [
        ("a", {"name": "a", "value": 5}),
        ("b", {"name": "b", "value": 5}),
    ]
    assert sorted(r.call_id for r in hooks.ends) == ["a", "b", "c"]
    assert next(r for r in hooks.ends if r.call_id == "c").status == "error"


async def test_dependency_end_hook_is_called_before_its_dependent_starts(
    executor: Executor, lab: Lab
) -> None:
    """Observers see a call's end before the start of a call that used its result."""
    order: list[str] = []

    class Hooks:
        async def on_call_start(self, call: ParsedToolCall, arguments: dict[str, Any]) -> None:
            order.append(f"start {call.call_id}")

        async def on_call_end(self, call: ParsedToolCall, result: ToolResult) -> None:
            order.append(f"end {call.call_id}")

    await executor.execute(
        [work("a"), work("b", value="{step_1_result}")], context(lab.work, hooks=Hooks())
    )
    assert order == ["start a", "end a", "start b", "end b"]


async def test_raising_hooks_are_ignored(executor: Executor, lab: Lab) -> None:
    """Hooks that raise do not change the results."""
    results = await executor.execute([work("a")], context(lab.work, hooks=RaisingHooks()))
    assert results[0].status == "success"


# --- calls that finish without waiting (ConcurrentExecutor runs them in its own task) ------


@tool
async def quick(name: str) -> str:
    """Return at once, without waiting."""
    return name


def quick_call(call_id: str, *, after: Iterable[str] = ()) -> ParsedToolCall:
    return ParsedToolCall(
        call_id=call_id, tool_name="quick", arguments={"name": call_id}, depends_on=list(after)
    )


async def test_calls_that_do_not_wait_run_beside_a_call_that_waits(lab: Lab) -> None:
    """A waiting call does not hold up the independent calls after it: the later call that
    releases it runs while it waits (run one after the other, the plan would never end)."""

    @tool
    async def release(name: str) -> str:
        """Let the held call go on, without waiting."""
        lab.gates[name].set()
        return name

    calls = [
        quick_call("first"),
        work("held", hold=True),
        quick_call("beside"),
        ParsedToolCall(call_id="opener", tool_name="release", arguments={"name": "held"}),
        quick_call("after", after=["held"]),
    ]
    async with asyncio.timeout(DEADLINE_S):
        results = await ConcurrentExecutor().execute(calls, context(lab.work, quick, release))
    assert [r.status for r in results] == ["success"] * 5
    assert [r.output for r in results] == [
        "first",
        {"name": "held", "value": None},
        "beside",
        "held",
        "after",
    ]
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_a_call_after_calls_that_did_not_wait_still_times_out(lab: Lab) -> None:
    """A call that waits past its timeout after calls that finished at once gets its timeout
    error, the calls beside it their results, and the caller's task is left uncancelled."""
    calls = [quick_call("a"), work("stuck", hold=True), quick_call("b"), work("slow", hold=True)]
    results = await ConcurrentExecutor().execute(
        calls, context(lab.work, quick, tool_timeout_s=0.05)
    )
    assert [r.status for r in results] == ["success", "error", "success", "error"]
    assert results[1].error == results[3].error == 'Tool "work" timed out after 0.05s.'
    assert ("cancelled", "stuck") in lab.events
    assert ("cancelled", "slow") in lab.events
    current = asyncio.current_task()
    assert current is not None
    assert current.cancelling() == 0


async def test_cancelling_execute_cancels_the_call_in_its_own_task_and_the_rest(lab: Lab) -> None:
    """Cancelled after calls that finished at once, while two calls wait: both see the
    cancellation, the finished results were reported, no task is left behind."""
    hooks = RecordingHooks()
    calls = [quick_call("done"), work("one", hold=True), work("two", hold=True)]
    task = asyncio.create_task(
        ConcurrentExecutor().execute(calls, context(lab.work, quick, hooks=hooks))
    )
    await lab.wait_started("one")
    await lab.wait_started("two")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ("cancelled", "one") in lab.events
    assert ("cancelled", "two") in lab.events
    assert [r.call_id for r in hooks.ends] == ["done"]
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_a_spent_budget_in_a_call_that_does_not_wait_stops_the_plan(lab: Lab) -> None:
    """A call finding the run's budget spent stops the plan as from a task group: the error
    comes in an ExceptionGroup and the calls after it never start."""

    @tool
    async def over_budget() -> None:
        """Find the budget spent."""
        raise UsageLimitExceeded(
            "tool_calls: 1 used, limit 1", limit="tool_calls", used=1, allowed=1
        )

    calls = [
        quick_call("a"),
        ParsedToolCall(call_id="spent", tool_name="over_budget"),
        work("never"),
    ]
    with pytest.raises(ExceptionGroup) as raised:
        await ConcurrentExecutor().execute(calls, context(lab.work, quick, over_budget))
    assert [type(e) for e in raised.value.exceptions] == [UsageLimitExceeded]
    assert lab.events == []


# --- cancellation -------------------------------------------------------------------------


async def test_cancelling_execute_cancels_running_tools_and_leaves_no_tasks(lab: Lab) -> None:
    """Cancel mid-plan: running tools see CancelledError, finished results were delivered."""
    hooks = RecordingHooks()
    calls = [work("done"), work("stuck", hold=True), work("later", after=["stuck"])]
    task = asyncio.create_task(ConcurrentExecutor().execute(calls, context(lab.work, hooks=hooks)))
    await lab.wait_started("stuck")
    await hooks.wait_ended("done")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ("cancelled", "stuck") in lab.events
    assert ("start", "later") not in lab.events
    assert [r.call_id for r in hooks.ends] == ["done"]
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_cancelling_the_sequential_executor_cancels_the_running_tool(lab: Lab) -> None:
    """SequentialExecutor propagates cancellation into the tool it is running."""
    task = asyncio.create_task(
        SequentialExecutor().execute([work("stuck", hold=True), work("b")], context(lab.work))
    )
    await lab.wait_started("stuck")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lab.events == [("start", "stuck"), ("cancelled", "stuck")]
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_duplicate_call_id_is_refused_and_the_first_still_runs(
    executor: Executor, lab: Lab
) -> None:
    """The repeat of a call id gets the plan error; the first call with that id runs."""
    results = await executor.execute([work("a"), work("a", "again")], context(lab.work))
    assert results[0].status == "success"
    assert results[1].error == (
        'Not run: Step 2 ("a") reuses the call id "a" of step 1; give every call a unique callId.'
    )
    assert lab.events == [("start", "a"), ("end", "a")]


async def test_each_call_that_reads_its_context_gets_its_own_call_id(executor: Executor) -> None:
    """Calls of tools that take no context run beside ones that do; every call of a tool
    taking a ToolContext (a @tool parameter, a class-based tool) sees its own call id."""
    seen: list[tuple[str, str]] = []

    @tool
    async def plain(n: int) -> int:
        """Return n."""
        return n

    @tool
    async def reads(n: int, context: ToolContext) -> int:
        """Note the call id."""
        seen.append(("reads", context.call_id))
        return n

    class Reader:
        schema = ToolSchema(name="reader", description="Note the call id.", input_schema={})

        async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
            seen.append(("reader", context.call_id))
            return context.call_id

    registry = ToolRegistry([plain, reads, Reader()])
    calls = [
        ParsedToolCall(call_id="p1", tool_name="plain", arguments={"n": 1}),
        ParsedToolCall(call_id="r1", tool_name="reads", arguments={"n": "{step_1_result}"}),
        ParsedToolCall(call_id="p2", tool_name="plain", arguments={"n": 2}),
        ParsedToolCall(call_id="c1", tool_name="reader", arguments={}),
        ParsedToolCall(call_id="r2", tool_name="reads", arguments={"n": "{step_3_result}"}),
        ParsedToolCall(call_id="p3", tool_name="plain", arguments={"n": "x"}),
    ]
    ctx = ExecutionContext(
        thread_id="t",
        trace_id="r",
        tools=registry.as_mapping(),
        enabled_tools=frozenset(registry.names),
    )
    results = await executor.execute(calls, ctx)
    assert [r.output for r in results[:5]] == [1, 1, 2, "c1", 2]
    assert results[5].error == (
        'Invalid arguments for tool "plain": arguments.n: Input should be a valid integer, '
        "unable to parse string as an integer"
    )
    assert sorted(seen) == [("reader", "c1"), ("reads", "r1"), ("reads", "r2")]
