"""Per-call timeouts on one timer, and chains of calls run in one task, behave as before."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from pes_agent.execution._deadlines import Deadlines
from pes_agent.execution.executors import ConcurrentExecutor, SequentialExecutor
from pes_agent.execution.feed import PlanFeed
from pes_agent.execution.hooks import ObservingHooks
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext
from pes_agent.tools import ToolContext, ToolRegistry, ToolSchema, tool


@tool
async def nap(seconds: float, tag: str = "") -> str:
    """Sleep, then return the tag."""
    await asyncio.sleep(seconds)
    return tag


@tool(timeout_s=0.02)
async def quick(seconds: float) -> str:
    """Sleep with a timeout of its own."""
    await asyncio.sleep(seconds)
    return "done"


@tool
async def own_timeout() -> None:
    """Raise a TimeoutError of its own (not the deadline)."""
    raise TimeoutError("the upstream API timed out")


TOOLS = ToolRegistry([nap, quick, own_timeout])


def _context(timeout_s: float = 30.0, hooks: Any = None) -> ExecutionContext:
    return _context_of(TOOLS, tool_timeout_s=timeout_s, hooks=hooks)


def _context_of(registry: ToolRegistry, **settings: Any) -> ExecutionContext:
    """An execution context with every tool of `registry` enabled."""
    return ExecutionContext(
        thread_id="t",
        trace_id="r",
        tools=registry.as_mapping(),
        enabled_tools=frozenset(registry.names),
        **settings,
    )


def _nap(n: int, seconds: float, tag: str | None = None, **extra: Any) -> ParsedToolCall:
    arguments = {"seconds": seconds, "tag": tag if tag is not None else f"t{n}", **extra}
    return ParsedToolCall(call_id=f"call_{n}", tool_name="nap", arguments=arguments)


@pytest.mark.parametrize("executor", [ConcurrentExecutor(), SequentialExecutor()])
async def test_each_call_times_out_at_its_own_deadline(executor: Any) -> None:
    """Calls with different timeouts (the agent's, a tool's own) each end at theirs; the
    others finish."""
    calls = [
        _nap(1, 1.0),
        _nap(2, 0.0),
        ParsedToolCall(call_id="call_3", tool_name="quick", arguments={"seconds": 1.0}),
        ParsedToolCall(call_id="call_4", tool_name="quick", arguments={"seconds": 0.0}),
    ]
    results = await executor.execute(calls, _context(timeout_s=0.05))
    assert [(r.status, r.error or r.output) for r in results] == [
        ("error", 'Tool "nap" timed out after 0.05s.'),
        ("success", "t2"),
        ("error", 'Tool "quick" timed out after 0.02s.'),
        ("success", "done"),
    ]


async def test_a_tools_own_timeout_error_is_a_failure_not_a_deadline() -> None:
    """A TimeoutError the tool raises is its error, reported as such."""
    (result,) = await ConcurrentExecutor().execute(
        [ParsedToolCall(call_id="c", tool_name="own_timeout")], _context()
    )
    assert result.error == "TimeoutError: the upstream API timed out"


async def test_a_chain_after_a_timed_out_call_is_skipped_and_the_task_is_not_cancelled() -> None:
    """In a chain run by one task, a call that timed out takes back its cancellation: the
    dependent is skipped as for any failure and the execution returns normally."""
    calls = [_nap(1, 1.0), _nap(2, 0.0, tag="{step_1_result}"), _nap(3, 0.0)]
    task_before = asyncio.current_task()
    results = await ConcurrentExecutor().execute(calls, _context(timeout_s=0.03))
    assert [r.status for r in results] == ["error", "error", "success"]
    assert "depends on step 1" in (results[1].error or "")
    assert task_before is not None
    assert task_before.cancelling() == 0


async def test_cancelling_the_execution_still_cancels_a_call_with_a_deadline() -> None:
    """A cancellation from outside is not taken for a deadline: it propagates."""
    task = asyncio.create_task(ConcurrentExecutor().execute([_nap(1, 5.0)], _context()))
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


class _EndSink:
    """An observation sink keeping (type, call id) of each record; with `waits`, recording a
    call's end sleeps `delay_s` (a hook that waits)."""

    def __init__(self, *, waits: bool, delay_s: float) -> None:
        self.waits = waits
        self.delay_s = delay_s
        self.seen: list[tuple[ObservationType, str]] = []

    async def record(
        self, type: ObservationType, title: str, content: dict[str, Any], **_: Any
    ) -> Observation:
        if self.waits and type is ObservationType.TOOL_EXECUTION:
            await asyncio.sleep(self.delay_s)
        self.seen.append((type, content["callId"]))
        return Observation(thread_id="t", trace_id="r", type=type, title=title, content={})


def _chain_of_five() -> list[ParsedToolCall]:
    """Five calls of `where`, each taking the previous one's result."""
    return [
        ParsedToolCall(
            call_id=f"call_{n}",
            tool_name="where",
            arguments={"previous": f"{{step_{n - 1}_result}}"} if n > 1 else {},
        )
        for n in range(1, 6)
    ]


async def test_a_chain_runs_its_calls_in_order_in_one_task_unless_a_hook_waits() -> None:
    """A call that releases one dependent goes on with it in its own task, without hooks or
    with hooks that finish without waiting; a hook that waits hands the dependent a task of
    its own (so it is not delayed). The hooks see every end, in order."""
    tasks: list[asyncio.Task[Any] | None] = []

    @tool
    async def where(previous: Any = None) -> int:
        """Note the task the call runs in."""
        tasks.append(asyncio.current_task())
        return len(tasks)

    registry = ToolRegistry([where])
    calls = _chain_of_five()

    def context(hooks: Any) -> ExecutionContext:
        return _context_of(registry, hooks=hooks)

    results = await ConcurrentExecutor().execute(calls, context(None))
    assert [r.output for r in results] == [1, 2, 3, 4, 5]
    assert len(set(map(id, tasks))) == 1

    for waits, task_count in ((False, 1), (True, 5)):
        tasks.clear()
        sink = _EndSink(waits=waits, delay_s=0.05)
        results = await ConcurrentExecutor().execute(calls, context(ObservingHooks(sink)))
        assert [r.output for r in results] == [1, 2, 3, 4, 5]
        assert len(set(map(id, tasks))) == task_count
        kinds = sink.seen
        starts = [c for t, c in kinds if t is ObservationType.TOOL_CALL]
        ends = [c for t, c in kinds if t is ObservationType.TOOL_EXECUTION]
        assert starts == ends == [f"call_{n}" for n in range(1, 6)]
        if not waits:  # each call's end is recorded before the next call starts
            assert [c for _, c in kinds] == [f"call_{n}" for n in range(1, 6) for _ in "se"]


async def test_the_timer_is_stopped_when_the_execution_ends() -> None:
    """No timer of an execution outlives it (a loop full of stale timers costs every run)."""
    loop = asyncio.get_running_loop()
    scheduled_before = len(loop._scheduled)  # type: ignore[attr-defined]
    await ConcurrentExecutor().execute([_nap(n, 0.0) for n in range(1, 20)], _context())
    live = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
    assert len(live) <= scheduled_before


async def test_deadlines_fire_in_order_and_rearm() -> None:
    """Deadlines registered out of order expire in order; a finished one never cancels."""
    deadlines = Deadlines()
    order: list[str] = []

    async def call(name: str, timeout_s: float, seconds: float) -> None:
        deadline = deadlines.start(timeout_s)
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            if deadline.settle():
                order.append(name)
                return
            raise
        deadline.settle()

    await asyncio.gather(
        call("late", 0.06, 1.0), call("early", 0.02, 1.0), call("finishes", 0.04, 0.0)
    )
    deadlines.close()
    assert order == ["early", "late"]


async def test_a_streamed_chain_runs_in_one_task_unless_a_hook_waits() -> None:
    """execute_stream, too, goes on with a released dependent in the same task; a hook that
    waits hands it a task of its own. Results and hook order are those of `execute`."""
    tasks: list[asyncio.Task[Any] | None] = []

    @tool
    async def where(previous: Any = None) -> int:
        """Note the task the call runs in."""
        tasks.append(asyncio.current_task())
        await asyncio.sleep(0.001)
        return len(tasks)

    registry = ToolRegistry([where])
    calls = _chain_of_five()

    for hooks, task_count in ((None, 1), (False, 1), (True, 5)):
        tasks.clear()
        sink = _EndSink(waits=bool(hooks), delay_s=0.01)
        seen = sink.seen
        feed = PlanFeed()
        context = _context_of(registry, hooks=None if hooks is None else ObservingHooks(sink))
        running = asyncio.create_task(ConcurrentExecutor().execute_stream(feed, context))
        for call in calls:
            feed.submit(call)
            await asyncio.sleep(0)
        feed.close()
        results = await running
        assert [r.output for r in results] == [1, 2, 3, 4, 5]
        assert len(set(map(id, tasks))) == task_count
        if hooks is not None:
            ends = [c for t, c in seen if t is ObservationType.TOOL_EXECUTION]
            starts = [c for t, c in seen if t is ObservationType.TOOL_CALL]
            assert starts == ends == [f"call_{n}" for n in range(1, 6)]


async def test_independent_calls_share_a_task_until_one_waits_each_in_its_own_context() -> None:
    """Independent calls that finish without waiting run one after another in one task; a
    call that waits keeps its task and the calls after it start at once in another. A
    ContextVar a call sets is seen by no other call; a timeout still ends the waiting call."""
    import contextvars

    mark: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="")
    seen: list[tuple[str, str, asyncio.Task[Any] | None]] = []

    @tool
    async def visit(tag: str, seconds: float = 0.0) -> str:
        """Note the task and the mark, set a mark of its own, wait `seconds`."""
        seen.append((tag, mark.get(), asyncio.current_task()))
        mark.set(tag)
        if seconds:
            await asyncio.sleep(seconds)
        return tag

    registry = ToolRegistry([visit])
    context = _context_of(registry, tool_timeout_s=0.05)
    calls = [
        ParsedToolCall(call_id="a", tool_name="visit", arguments={"tag": "a"}),
        ParsedToolCall(call_id="b", tool_name="visit", arguments={"tag": "b", "seconds": 5.0}),
        ParsedToolCall(call_id="c", tool_name="visit", arguments={"tag": "c", "seconds": 0.01}),
        ParsedToolCall(call_id="d", tool_name="visit", arguments={"tag": "d"}),
    ]
    results = await ConcurrentExecutor().execute(calls, context)
    assert [r.status for r in results] == ["success", "error", "success", "success"]
    assert "timed out" in (results[1].error or "")
    assert [tag for tag, _, _ in seen] == ["a", "b", "c", "d"]
    assert all(previous == "" for _, previous, _ in seen)  # no call saw another's mark
    tasks = [task for _, _, task in seen]
    assert tasks[0] is tasks[1]  # a finished without waiting: b went on in its task
    assert tasks[2] is not tasks[1]  # b waits: c started in another task
    assert tasks[3] is not tasks[2]  # c waits too: d started in a third
    assert mark.get() == ""


def test_loops_on_two_threads_arm_their_timers_at_the_same_moment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each arming runs in a context of its own: while one loop's thread is inside its
    arming, another loop's arming still runs and its call still times out (a Context shared
    by the two could be entered by only one of them; the other's timer was never set)."""
    import threading

    inside, release = threading.Event(), threading.Event()
    arm = Deadlines._arm

    def arm_slowly_on_a(self: Deadlines) -> None:
        if threading.current_thread().name == "loop-a":
            inside.set()
            release.wait(5)
        arm(self)

    monkeypatch.setattr(Deadlines, "_arm", arm_slowly_on_a)

    async def one_call(timeout_s: float) -> bool:
        deadlines = Deadlines()
        deadline = deadlines.start(timeout_s)
        try:
            await asyncio.sleep(2)
        except asyncio.CancelledError:
            return deadline.settle()
        finally:
            deadlines.close()
        return deadline.settle()

    timed_out: dict[str, bool] = {}
    a = threading.Thread(
        target=lambda: timed_out.setdefault("a", asyncio.run(one_call(0.05))), name="loop-a"
    )
    a.start()
    assert inside.wait(5)
    try:
        timed_out["b"] = asyncio.run(asyncio.wait_for(one_call(0.05), 1))
    finally:
        release.set()
        a.join(5)
    assert timed_out == {"a": True, "b": True}


async def test_a_finished_calls_deadline_lets_its_task_go_once_the_next_call_starts() -> None:
    """The deadline of a call that returned does not keep its task alive until the timer
    fires (30 s on by default) while later calls run: the next call with the same timeout
    drops it. That call still times out at its own deadline."""
    import gc
    import weakref

    deadlines = Deadlines()

    async def call(timeout_s: float, seconds: float) -> bool:
        deadline = deadlines.start(timeout_s)
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            return deadline.settle()
        deadline.settle()
        return False

    long = asyncio.create_task(call(0.05, 1.0))  # keeps the timer armed throughout
    await asyncio.sleep(0)
    short = asyncio.create_task(call(0.2, 0.0))
    gone = weakref.ref(short)
    assert await short is False
    del short
    later = asyncio.create_task(call(0.2, 1.0))  # the next call with that timeout
    await asyncio.sleep(0)
    gc.collect()
    assert gone() is None
    assert await long is True  # timed out at its deadline
    assert await later is True
    deadlines.close()


@tool
async def instant(tag: str) -> str:
    """Return at once, without ever waiting."""
    return tag


async def test_calls_that_never_wait_schedule_nothing_on_the_loop() -> None:
    """Tools that return without waiting get no deadline: executing them leaves no callback
    on the loop (no timer, nothing armed for the next turn)."""
    loop = asyncio.get_running_loop()
    tools = ToolRegistry([instant])
    ctx = _context_of(tools)
    calls = [
        ParsedToolCall(call_id=f"c{n}", tool_name="instant", arguments={"tag": str(n)})
        for n in range(3)
    ]
    for calls_run in (calls[:1], calls):
        ready = len(loop._ready)  # type: ignore[attr-defined]
        scheduled = len(loop._scheduled)  # type: ignore[attr-defined]
        results = await ConcurrentExecutor().execute(calls_run, ctx)
        assert [r.output for r in results] == [str(n) for n in range(len(calls_run))]
        assert len(loop._ready) == ready  # type: ignore[attr-defined]
        assert len(loop._scheduled) == scheduled  # type: ignore[attr-defined]


@pytest.mark.parametrize("executor", [ConcurrentExecutor(), SequentialExecutor()])
async def test_a_deadline_counts_from_when_the_call_began_not_from_its_first_wait(
    executor: Any,
) -> None:
    """A tool that works past its timeout before it first waits is cancelled at once after,
    as under `asyncio.timeout` (counted from its first wait, it would get 20 more turns)."""
    turns: list[int] = []

    @tool(timeout_s=0.02)
    async def busy() -> None:
        """Work synchronously past the timeout, then wait."""
        time.sleep(0.05)  # noqa: ASYNC251 - the synchronous work under test
        for turn in range(20):
            await asyncio.sleep(0)
            turns.append(turn)
        await asyncio.Event().wait()

    tools = ToolRegistry([busy])
    ctx = _context_of(tools)
    results = await executor.execute([ParsedToolCall(call_id="b", tool_name="busy")], ctx)
    assert results[0].error == 'Tool "busy" timed out after 0.02s.'
    assert len(turns) < 20


class FutureTool:
    """A class-based tool whose `execute` is a plain function returning a future."""

    schema = ToolSchema(name="future", description="Answer through a future.", input_schema={})
    timeout_s = 0.02

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> asyncio.Future[str]:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        if arguments.get("answer"):
            future.get_loop().call_soon(future.set_result, "answered")
        return future


@pytest.mark.parametrize("executor", [ConcurrentExecutor(), SequentialExecutor()])
async def test_a_tool_returning_another_kind_of_awaitable_is_awaited_and_timed(
    executor: Any,
) -> None:
    """A tool whose `execute` returns an awaitable that is not a coroutine is awaited as
    before, under its timeout (a registry refuses such a tool; a plain mapping does not)."""
    ctx = ExecutionContext(
        thread_id="t",
        trace_id="r",
        tools={"future": FutureTool()},  # type: ignore[dict-item]
        enabled_tools=frozenset({"future"}),
    )
    calls = [
        ParsedToolCall(call_id="yes", tool_name="future", arguments={"answer": True}),
        ParsedToolCall(call_id="never", tool_name="future"),
    ]
    results = await executor.execute(calls, ctx)
    assert results[0].output == "answered"
    assert results[1].error == 'Tool "future" timed out after 0.02s.'
