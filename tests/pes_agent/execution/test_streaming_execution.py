"""ConcurrentExecutor.execute_stream: calls start as the plan streams, results as if whole."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pes_agent.errors import UsageError
from pes_agent.execution.executors import ConcurrentExecutor
from pes_agent.execution.feed import PlanFeed
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext
from pes_agent.tools import ToolRegistry, tool

started: list[str] = []


@tool
async def echo(value: Any = None, tag: str = "") -> Any:
    """Return `value` after letting other calls run."""
    started.append(tag)
    await asyncio.sleep(0)
    return value


@tool
async def boom(tag: str = "") -> None:
    """Fail."""
    started.append(tag)
    raise RuntimeError("boom")


REGISTRY = ToolRegistry([echo, boom])


def _context(max_tool_calls: int = 32, enabled: frozenset[str] | None = None) -> ExecutionContext:
    return ExecutionContext(
        thread_id="t",
        trace_id="r",
        tools=REGISTRY.as_mapping(),
        enabled_tools=enabled if enabled is not None else frozenset(REGISTRY.names),
        max_tool_calls=max_tool_calls,
    )


def _call(
    n: int, tool_name: str = "echo", depends_on: list[str] | None = None, **args: Any
) -> ParsedToolCall:
    return ParsedToolCall(
        call_id=f"call_{n}",
        tool_name=tool_name,
        arguments={"tag": f"call_{n}", **args},
        depends_on=depends_on or [],
    )


async def _pump() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_submitted_call_starts_before_the_feed_closes() -> None:
    """A call whose inputs are known runs while the plan still streams; its dependent starts
    when it ends; the results are in step order."""
    started.clear()
    feed = PlanFeed()
    task = asyncio.create_task(ConcurrentExecutor().execute_stream(feed, _context()))
    feed.submit(_call(1, value=1))
    feed.submit(_call(2, value="{step_1_result}"))
    await _pump()
    assert started == ["call_1", "call_2"]
    assert not task.done()
    feed.close()
    results = await task
    assert [(r.call_id, r.output) for r in results] == [("call_1", 1), ("call_2", 1)]


async def test_calls_that_the_rest_of_the_plan_could_change_wait_for_it() -> None:
    """A forward reference, an unknown dependsOn, a repeated id and a call past the limit do
    not start before the plan is final; then they are refused or run as for a whole plan."""
    started.clear()
    feed = PlanFeed()
    task = asyncio.create_task(
        ConcurrentExecutor().execute_stream(feed, _context(max_tool_calls=5))
    )
    feed.submit(_call(1, value="{step_2_result}"))  # forward: waits
    feed.submit(_call(2, value=2))
    feed.submit(_call(3, depends_on=["call_4"]))  # not submitted yet: waits
    feed.submit(_call(4, value=4))
    feed.submit(ParsedToolCall(call_id="call_4", tool_name="echo", arguments={"tag": "dup"}))
    feed.submit(_call(6))  # past max_tool_calls=5: waits for the plan's size
    await _pump()
    assert started == ["call_2", "call_4"]
    feed.close()
    results = await task
    errors = {r.call_id: r.error for r in results if r.status == "error"}
    assert started == ["call_2", "call_4"]
    assert "a later step" in (errors["call_1"] or "")
    # call_3 waits for both calls named call_4; the repeated one is refused, so it is skipped.
    assert "which failed" in (errors["call_3"] or "")
    assert "reuses the call id" in (errors["call_4"] or "")
    assert "more than the limit of 5" in (errors["call_6"] or "")


async def test_close_may_add_calls_the_stream_did_not_submit() -> None:
    """The final plan may go on past the submitted calls; the rest run from its graph."""
    feed = PlanFeed()
    task = asyncio.create_task(ConcurrentExecutor().execute_stream(feed, _context()))
    feed.submit(_call(1, value="a"))
    feed.close([_call(1, value="a"), _call(2, value="{step_1_result}")])
    results = await task
    assert [r.output for r in results] == ["a", "a"]


async def test_a_feed_refuses_what_would_break_the_plan() -> None:
    """submit after close and a final plan not starting with what was submitted are errors."""
    feed = PlanFeed()
    feed.submit(_call(1))
    with pytest.raises(UsageError, match="must start with the calls already submitted"):
        feed.close([_call(2)])
    feed.close()
    with pytest.raises(UsageError, match="after close"):
        feed.submit(_call(2))
    with pytest.raises(UsageError, match="twice"):
        feed.close()


async def test_cancelling_the_execution_cancels_the_started_calls() -> None:
    """Cancelling execute_stream (a discarded plan) stops the calls that run."""
    gate = asyncio.Event()
    cancelled: list[str] = []

    @tool
    async def wait() -> None:
        """Wait until released."""
        try:
            await gate.wait()
        except asyncio.CancelledError:
            cancelled.append("wait")
            raise

    ctx = _context()
    tools = ToolRegistry([wait])
    ctx = ExecutionContext(
        thread_id="t", trace_id="r", tools=tools.as_mapping(), enabled_tools=frozenset(["wait"])
    )
    feed = PlanFeed()
    task = asyncio.create_task(ConcurrentExecutor().execute_stream(feed, ctx))
    feed.submit(ParsedToolCall(call_id="call_1", tool_name="wait"))
    await _pump()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == ["wait"]


# Plans of up to 8 calls: echo or boom, placeholders to any step (0, earlier, itself, later,
# past the end), dependsOn to any id (unknown ones too), repeated ids, some tools disabled.
_STEP = st.integers(min_value=0, max_value=9)
_PLANS = st.lists(
    st.tuples(
        st.sampled_from(["echo", "echo", "echo", "boom"]),
        st.lists(_STEP, max_size=2),
        st.lists(st.integers(min_value=1, max_value=9), max_size=1),
        st.integers(min_value=1, max_value=9),
    ),
    min_size=1,
    max_size=8,
)


def _plan(spec: list[tuple[str, list[int], list[int], int]]) -> list[ParsedToolCall]:
    calls = []
    for position, (tool_name, steps, after, id_number) in enumerate(spec, start=1):
        arguments: dict[str, Any] = {"tag": f"{position}"}
        if tool_name == "echo":
            arguments["value"] = [f"{{step_{step}_result}}" for step in steps] or position
        calls.append(
            ParsedToolCall(
                call_id=f"call_{id_number if id_number % 3 == 0 else position}",
                tool_name=tool_name,
                arguments=arguments,
                depends_on=[f"call_{number}" for number in after],
            )
        )
    return calls


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_PLANS, st.integers(min_value=1, max_value=8), st.booleans())
async def test_any_plan_streamed_gives_the_results_of_the_whole_plan(
    spec: list[tuple[str, list[int], list[int], int]], limit: int, disable_boom: bool
) -> None:
    """Whatever the plan — valid or not — streaming it call by call gives the same results
    as executing it whole, and never runs a call the whole plan would not run."""
    calls = _plan(spec)
    enabled = frozenset(["echo"] if disable_boom else ["echo", "boom"])
    started.clear()
    whole = await ConcurrentExecutor().execute(calls, _context(limit, enabled))
    ran_whole = sorted(started)
    started.clear()
    feed = PlanFeed()
    task = asyncio.create_task(ConcurrentExecutor().execute_stream(feed, _context(limit, enabled)))
    for call in calls:
        feed.submit(call)
        await asyncio.sleep(0)
    feed.close()
    streamed = await asyncio.wait_for(task, 5)
    assert sorted(started) == ran_whole

    def summary(results: list[Any]) -> list[tuple[str, str, Any, str | None]]:
        return [(r.call_id, r.status, r.output, r.error) for r in results]

    assert summary(streamed) == summary(whole)
