"""The run registry (which finished runs it keeps, which it drops) and the run feeds."""

from __future__ import annotations

import asyncio

from pes_agent import AgentProps, create_agent
from pes_agent.server.runs import RunFeeds, RunHandle, RunRegistry
from pes_agent.testing import ScriptedProvider

from .conftest import look, scripted


def handle(trace_id: str, registry: RunRegistry) -> RunHandle:
    return RunHandle("t", trace_id, None, replay_limit=registry.replay_limit)


async def finish(handle: RunHandle) -> None:
    handle.finish("final", {"trace_id": handle.trace_id})


async def run_to_end(registry: RunRegistry, trace_id: str) -> RunHandle:
    started = registry.start(handle(trace_id, registry), finish)
    assert started.task is not None
    await started.task
    await asyncio.sleep(0)  # the task's done callbacks run on the next loop pass
    return started


async def test_finished_runs_beyond_max_finished_go_oldest_first() -> None:
    """With max_finished=2, a third finished run pushes out the first; the last two stay."""
    registry = RunRegistry(max_finished=2)
    first, second, third = [await run_to_end(registry, f"tr-{n}") for n in range(3)]
    assert registry.get("tr-0") is None
    assert registry.get("tr-1") is second
    assert registry.get("tr-2") is third
    assert first.done


async def test_finished_runs_go_after_the_retention_time() -> None:
    """A finished run older than retention_s is no longer found."""
    registry = RunRegistry(retention_s=0.0)
    await run_to_end(registry, "tr-old")
    await asyncio.sleep(0.001)
    assert registry.get("tr-old") is None


async def test_a_resumed_run_outlives_the_paused_run_whose_trace_id_it_took() -> None:
    """A run started under a finished run's trace id (a resume) stays while it executes, even
    when the finished run it replaced is the oldest to drop; then it is dropped in its turn."""
    registry = RunRegistry(max_finished=1)
    await run_to_end(registry, "tr")
    release = asyncio.Event()

    async def wait_then_finish(handle: RunHandle) -> None:
        await release.wait()
        await finish(handle)

    resumed = registry.start(handle("tr", registry), wait_then_finish)
    await run_to_end(registry, "tr-a")
    await run_to_end(registry, "tr-b")
    assert registry.get("tr") is resumed
    assert registry.running() == [resumed]
    release.set()
    assert resumed.task is not None
    await resumed.task
    await asyncio.sleep(0)
    await run_to_end(registry, "tr-c")
    assert registry.get("tr") is None
    assert registry.get("tr-c") is not None


async def test_run_feeds_route_each_event_to_its_run_and_unsubscribe_when_idle() -> None:
    """Runs executing at once on separate threads each get their own observations and model
    tokens (by trace id) through one subscription of each kind; none is left afterwards."""
    agent = create_agent(
        provider=ScriptedProvider([scripted] * 20, latency_s=0.05, chunk_size=3),
        tools=[look],
        storage="memory",
    )
    feeds = RunFeeds(agent.observations, agent.stream)
    handles = [RunHandle(f"t{n}", f"tr-{n}", None, replay_limit=100) for n in range(3)]
    for run in handles:
        feeds.attach(run)
    assert agent.stream.active
    try:
        await asyncio.gather(
            *(
                agent.process(AgentProps("hello", run.thread_id, trace_id=run.trace_id))
                for run in handles
            )
        )
    finally:
        for run in handles:
            feeds.detach(run)
    assert not agent.stream.active
    for run in handles:
        events = list(run.events)
        assert {event.data["trace_id"] for event in events} == {run.trace_id}
        assert "FINAL_RESPONSE" in [event.event for event in events]
        assert "".join(e.data["text"] for e in events if e.event == "token").endswith("42.")
    await agent.aclose()
