"""Sync tools run on the agent's own bounded threads, so hung ones cannot stall anyone else."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from pes_agent import AgentProps, create_agent
from pes_agent.errors import UsageError
from pes_agent.execution.executors import ConcurrentExecutor
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext
from pes_agent.testing import ScriptedProvider
from pes_agent.tools import FunctionTool, ToolRegistry, ToolThreadPool, ToolThreadsExhausted, tool

# As many hung tools as asyncio's default executor has threads: enough to stall it completely.
HUNG = min(32, (os.cpu_count() or 1) + 4)
DEADLINE_S = 5.0


class Hang:
    """A sync `hang` tool whose calls block until `release` is set; counts the calls started."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = 0
        self._lock = threading.Lock()
        self._all_started: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._expected = 0

        @tool
        def hang(n: int) -> int:
            """Block until released."""
            with self._lock:
                self.started += 1
                done = self.started == self._expected
            if done and self._loop is not None and self._all_started is not None:
                self._loop.call_soon_threadsafe(self._all_started.set)
            self.release.wait()
            return n

        self.tool: FunctionTool[..., int] = hang

    def expect(self, count: int) -> asyncio.Event:
        self._loop = asyncio.get_running_loop()
        self._all_started = asyncio.Event()
        self._expected = count
        return self._all_started


@pytest.fixture
def hang() -> Iterator[Hang]:
    made = Hang()
    yield made
    made.release.set()  # let the hung threads end, so nothing outlives the test


@pytest.fixture
async def registry(hang: Hang) -> AsyncIterator[ToolRegistry]:
    made = ToolRegistry([hang.tool], sync_threads=HUNG)
    yield made
    hang.release.set()
    await made.aclose()


def _calls(count: int) -> list[ParsedToolCall]:
    return [
        ParsedToolCall(call_id=f"c{i}", tool_name="hang", arguments={"n": i}) for i in range(count)
    ]


def _context(registry: ToolRegistry, **options: Any) -> ExecutionContext:
    return ExecutionContext(
        thread_id="t",
        trace_id="tr",
        tools=registry.as_mapping(),
        enabled_tools=frozenset(registry.names),
        max_concurrency=HUNG,
        max_tool_calls=HUNG,
        **options,
    )


async def test_hung_sync_tools_leave_to_thread_free_and_exhaust_only_their_own_pool(
    hang: Hang, registry: ToolRegistry
) -> None:
    """While HUNG sync tools hang, to_thread still works; once they time out, the next sync
    call fails fast with a result saying the pool is exhausted."""
    all_started = hang.expect(HUNG)
    first = asyncio.create_task(
        ConcurrentExecutor().execute(_calls(HUNG), _context(registry, tool_timeout_s=1.0))
    )
    async with asyncio.timeout(DEADLINE_S):
        await all_started.wait()
    assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), DEADLINE_S) == "free"
    timed_out = await asyncio.wait_for(first, DEADLINE_S)
    assert [r.status for r in timed_out] == ["error"] * HUNG
    assert all("timed out" in (r.error or "") for r in timed_out)

    started = time.perf_counter()
    [refused] = await asyncio.wait_for(
        ConcurrentExecutor().execute(_calls(1), _context(registry, tool_timeout_s=30.0)),
        DEADLINE_S,
    )
    assert time.perf_counter() - started < 1.0
    assert refused.status == "error"
    assert refused.error is not None
    assert "exhausted" in refused.error
    assert f"{HUNG} threads" in refused.error
    assert hang.started == HUNG


async def test_a_sync_tool_runs_on_the_agents_own_threads_until_aclose() -> None:
    """An agent's sync tool runs on its own named threads, which aclose() shuts down."""

    @tool
    def where() -> str:
        """Name the thread this runs on."""
        return threading.current_thread().name

    plan = json.dumps(
        {"intent": "i", "plan": "p", "toolCalls": [{"callId": "c1", "toolName": "where"}]}
    )
    agent = create_agent(provider=ScriptedProvider([plan, "ok"]), tools=[where])
    seen: list[Any] = []
    agent.observations.subscribe(
        lambda o: seen.append(o.content.get("output")), types="TOOL_EXECUTION"
    )
    async with agent:
        result = await agent.process(AgentProps("q", "t"))
        assert result.metadata.status == "success"
    assert any(isinstance(s, str) and s.startswith("pes-agent-tools") for s in seen), seen
    assert agent.tools.thread_pool.closed


async def test_calls_still_awaited_queue_for_a_busy_pool_instead_of_failing() -> None:
    """With its one thread busy on a live call, the next call waits for it and then runs."""
    pool = ToolThreadPool(1)
    gate = threading.Event()
    try:
        first = asyncio.create_task(pool.run(lambda: gate.wait(DEADLINE_S) and "first"))
        second = asyncio.create_task(pool.run(lambda: "second"))
        await asyncio.sleep(0.05)
        assert not second.done()
        gate.set()
        assert await asyncio.wait_for(asyncio.gather(first, second), DEADLINE_S) == [
            "first",
            "second",
        ]
    finally:
        gate.set()
        await pool.aclose()


async def test_an_exhausted_pool_recovers_when_the_hung_call_returns() -> None:
    """A call abandoned by its timeout holds the thread; once it returns the pool works again."""
    pool = ToolThreadPool(1)
    gate = threading.Event()
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pool.run(gate.wait), 0.05)
        assert pool.abandoned == 1
        with pytest.raises(ToolThreadsExhausted, match="all 1 threads"):
            await pool.run(lambda: "refused")
        gate.set()
        async with asyncio.timeout(DEADLINE_S):
            # The count drops in the worker thread, which has no event to await.
            while pool.abandoned:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert await pool.run(lambda: "again") == "again"
    finally:
        gate.set()
        await pool.aclose()


async def test_a_closed_pool_refuses_new_work() -> None:
    """After aclose() the pool runs nothing more, with an error saying why."""
    pool = ToolThreadPool(2)
    await pool.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await pool.run(lambda: None)


@pytest.mark.parametrize("size", [0, -1, 1.5, True])
def test_sync_threads_must_be_a_positive_int(size: Any) -> None:
    """A pool size that is not an int >= 1 is a UsageError naming the default."""
    with pytest.raises(UsageError, match="sync_threads must be an int >= 1"):
        ToolRegistry(sync_threads=size)


async def test_create_agent_sizes_its_sync_tool_threads(hang: Hang) -> None:
    """With `sync_tool_threads=1`, a sync call after one that hung and timed out fails fast."""

    def plan(n: int) -> str:
        call = {"callId": "c1", "toolName": "hang", "arguments": {"n": n}}
        return json.dumps({"intent": "i", "plan": "p", "toolCalls": [call]})

    agent = create_agent(
        provider=ScriptedProvider([plan(1), "ok", plan(2), "ok"]),
        tools=[hang.tool],
        sync_tool_threads=1,
        tool_timeout_s=0.2,
    )
    async with asyncio.timeout(DEADLINE_S):
        first = await agent.process(AgentProps("q", "t"))
        second = await agent.process(AgentProps("q", "t"))
    errors = [
        o.content["error"]
        for o in await agent.observations.get_observations("t", types="TOOL_EXECUTION")
    ]
    hang.release.set()
    await agent.aclose()
    assert (first.metadata.status, second.metadata.status) == ("partial", "partial")
    assert "timed out" in errors[0]
    assert "exhausted" in errors[1], errors
    assert hang.started == 1


@pytest.mark.parametrize("name", ["sync_tool_threads", "max_providers"])
@pytest.mark.parametrize("value", [0, -1, True, 1.5])
def test_create_agent_refuses_a_pool_size_that_is_not_a_positive_int(name: str, value: Any) -> None:
    """A pool size below 1 or not an int is a UsageError naming the parameter and its default."""
    with pytest.raises(UsageError, match=f"{name} must be an int >= 1 \\(default 32\\)"):
        create_agent(provider=ScriptedProvider(["x"]), **{name: value})


async def test_a_fan_out_of_sync_calls_settles_each_caller_with_its_own_outcome() -> None:
    """Outcomes reach the loop in batches (`ToolThreadPool._deliver`); each caller still gets
    its own result or error, with its own context variables, and a StopIteration (which a
    Future refuses) comes back as a RuntimeError."""
    import contextvars

    seen: contextvars.ContextVar[int] = contextvars.ContextVar("seen", default=-1)

    def work(n: int) -> int:
        if n % 7 == 3:
            raise ValueError(f"bad {n}")
        if n == 5:
            raise StopIteration("done early")
        return n * 10 + seen.get()

    async def call(n: int) -> int:
        seen.set(n % 3)
        return await pool.run(work, n)

    pool = ToolThreadPool(4)
    outcomes = await asyncio.gather(*(call(n) for n in range(60)), return_exceptions=True)
    await pool.aclose()

    for n, outcome in enumerate(outcomes):
        if n % 7 == 3:
            assert isinstance(outcome, ValueError)
            assert str(outcome) == f"bad {n}"
        elif n == 5:
            assert isinstance(outcome, RuntimeError)
            assert "StopIteration" in str(outcome)
        else:
            assert outcome == n * 10 + n % 3


def test_a_pool_serves_one_event_loop_after_another() -> None:
    """A pool outlives the loop it first ran on (an agent driven by one `asyncio.run` after
    another); a call its caller abandoned, finishing after that loop closed, troubles
    nobody."""
    pool = ToolThreadPool(2)
    release = threading.Event()

    def slow() -> str:
        release.wait(5)
        return "late"

    async def abandon() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pool.run(slow), 0.05)

    asyncio.run(abandon())  # the loop closes while `slow` still runs
    release.set()
    for _ in range(100):
        if pool.abandoned == 0:
            break
        time.sleep(0.01)
    assert pool.abandoned == 0

    async def again() -> list[int]:
        return await asyncio.gather(*(pool.run(abs, -n) for n in range(10)))

    assert asyncio.run(again()) == list(range(10))
    assert asyncio.run(again()) == list(range(10))
    assert pool._finished == {}
    asyncio.run(pool.aclose())
