"""The run registry (which finished runs it keeps, which it drops) and the run feeds."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2 as httpx

from pes_agent import AgentCore, AgentProps, create_agent
from pes_agent.observing.streams import StreamEvent, StreamEventKind
from pes_agent.providers.base import LLMPhase
from pes_agent.server import create_app
from pes_agent.server.runs import RunEvent, RunFeeds, RunHandle, RunRegistry
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


def token(
    text: str, *, phase: LLMPhase = "synthesis", kind: StreamEventKind = "token"
) -> StreamEvent:
    return StreamEvent("t", "tr", phase, kind, text)


async def replay(run: RunHandle, after: int = 0) -> list[RunEvent]:
    return [event async for event in run.follow(after)]


def finished_with(*events: tuple[str, dict[str, Any] | StreamEvent]) -> RunHandle:
    """A finished run whose events are `run`, these, then `final` (ids 1, 2, ...)."""
    run = RunHandle("t", "tr", None, replay_limit=100)
    run.add("run", {})
    for name, data in events:
        run.add(name, data)
    run.finish("final", {})
    return run


async def test_a_finished_runs_tokens_are_kept_as_one_event_per_series() -> None:
    """Once the run ends, consecutive tokens of one phase are kept as one event with the text of
    all and the id of the last; other events, thinking text and other phases stay apart."""
    run = finished_with(
        ("thinking", token("hm", kind="thinking")),
        ("token", token("Hel")),
        ("token", token("lo")),
        ("token", token("!")),
        ("PLAN", {"plan": "1"}),
        ("token", token("plan", phase="planning")),
        ("token", token(" again")),
    )
    events = await replay(run)
    assert [(event.id, event.event, event.data.get("text")) for event in events] == [
        (1, "run", None),
        (2, "thinking", "hm"),
        (5, "token", "Hello!"),
        (6, "PLAN", None),
        (7, "token", "plan"),
        (8, "token", " again"),
        (9, "final", None),
    ]
    assert events[2].data["phase"] == "synthesis"
    assert json.loads(events[2].json())["text"] == "Hello!"


async def test_resuming_inside_a_merged_series_gives_only_the_text_not_seen() -> None:
    """A client that saw the events up to one in the middle of a merged series (Last-Event-ID)
    gets the rest of the series' text, under the id of its last event."""
    run = finished_with(("token", token("Hel")), ("token", token("lo")), ("token", token("!")))
    resumed = await replay(run, after=2)
    assert [(event.id, event.event, event.data.get("text")) for event in resumed] == [
        (4, "token", "lo!"),
        (5, "final", None),
    ]
    assert (await replay(run, after=3))[0].data["text"] == "!"
    assert (await replay(run, after=4))[0].event == "final"


async def test_a_client_following_the_run_as_it_ends_gets_each_token_text_once() -> None:
    """A client that got some tokens live, when the run ends and its tokens are merged, gets
    the rest of the text (not again what it got), then `final`."""
    run = RunHandle("t", "tr", None, replay_limit=100)
    for text in ("Hel", "lo"):
        run.add("token", token(text))
    follower = run.follow()
    got = [await anext(follower), await anext(follower)]
    run.add("token", token("!"))
    run.finish("final", {})
    got += [event async for event in follower]
    assert [(event.id, event.data.get("text")) for event in got] == [
        (1, "Hel"),
        (2, "lo"),
        (3, "!"),
        (4, None),
    ]


async def test_a_series_partly_dropped_by_the_replay_limit_reports_the_gap_before_it() -> None:
    """With the replay limit reached, a merged series counts from its first event kept: a client
    resuming before it gets a gap event naming what it missed, then the series' text."""
    run = RunHandle("t", "tr", None, replay_limit=3)
    for text in ("a", "b", "c", "d"):
        run.add("token", token(text))
    run.finish("final", {})
    events = await replay(run)
    assert [(event.event, event.data) for event in events[:1]] == [
        ("gap", {"missed": 2, "resumed_at": 3})
    ]
    assert [(event.id, event.data.get("text")) for event in events[1:]] == [(4, "cd"), (5, None)]


async def test_a_finished_run_keeps_few_events_and_replays_its_whole_answer(
    agent: AgentCore,
) -> None:
    """A run streaming its answer in many tokens keeps a handful of events once finished, and
    its replay's tokens still spell the answer."""
    app = create_app(agent, tokens=None)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        answered = await client.post("/v1/threads/t/runs", json={"query": "long answer please"})
        answer = answered.json()["response"]["content"]
        trace_id = answered.json()["metadata"]["trace_id"]
        replayed = await client.get(
            f"/v1/runs/{trace_id}/events", headers={"Accept": "text/event-stream"}
        )
    kept = app.state.runs.get(trace_id)
    assert len(kept.events) < 20
    data = [json.loads(line[6:]) for line in replayed.text.splitlines() if line[:6] == "data: "]
    text = "".join(
        d["text"] for d in data if d.get("kind") == "token" and d["phase"] == "synthesis"
    )
    assert len(answer) > 1000
    assert text == answer
