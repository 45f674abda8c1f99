"""Two apps over one agent behave as two worker processes on one store: a run executing on one
is cancelled, followed and listed through the other (the worker records in the store)."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from pes_agent import AgentCore, UsageError, create_agent
from pes_agent.config import AgentState
from pes_agent.providers.base import LLMRequest
from pes_agent.server import create_app
from pes_agent.server.feeds import end_feeds
from pes_agent.server.runs import RunHandle
from pes_agent.server.workers import DIRECTORY, WORKER_PREFIX, WorkerDirectory
from pes_agent.storage import InMemoryStorage, SQLiteStorage
from pes_agent.testing import ScriptedProvider

from .conftest import TOKENS, look, nap, pay, plan_json, scripted
from .sse import SSEStream, read_sse, serving

ADMIN = {"Authorization": "Bearer admin-token"}
STREAM = {**ADMIN, "Accept": "text/event-stream"}


def with_long_naps(request: LLMRequest) -> str:
    """`scripted`, except that "long nap" plans a 60 s nap (only a cancel ends it early),
    "slow nap" one of 1.5 s, and "pay then nap" a payment (which waits for approval) followed
    by a 60 s nap."""
    query = str(request.messages[-1].content)
    if request.phase == "planning" and "pay then nap" in query:
        return plan_json(
            {"callId": "call_1", "toolName": "pay", "arguments": {"amount": 5}},
            {
                "callId": "call_2",
                "toolName": "nap",
                "arguments": {"s": 60},
                "dependsOn": ["call_1"],
            },
        )
    for words, seconds in (("long nap", 60), ("slow nap", 1.5)):
        if request.phase == "planning" and words in query:
            return plan_json({"callId": "call_1", "toolName": "nap", "arguments": {"s": seconds}})
    return scripted(request)


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[AgentCore]:
    """An agent on a SQLite file whose model plans a long nap when asked."""
    model = ScriptedProvider([with_long_naps] * 200, chunk_size=3)
    async with create_agent(
        provider=model, tools=[look, nap, pay], storage=f"sqlite:///{tmp_path / 'w.db'}"
    ) as core:
        yield core


@pytest.fixture
async def two_workers(agent: AgentCore) -> AsyncIterator[tuple[Any, Any, str, str]]:
    """Two apps over the agent (two worker records in its store), each on a uvicorn server."""
    first, second = create_app(agent, tokens=TOKENS), create_app(agent, tokens=TOKENS)
    async with serving(first) as url_a, serving(second) as url_b:
        yield first, second, url_a, url_b


async def wait_until_running_elsewhere(client: httpx.AsyncClient, thread: str, trace: str) -> None:
    """Until the worker behind `client` lists `trace` as running (from the other's record)."""
    for _ in range(1000):
        runs = (await client.get(f"/v1/threads/{thread}/runs", headers=ADMIN)).json()["runs"]
        if any(run["trace_id"] == trace and run["status"] == "running" for run in runs):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {trace} never showed as running on the other worker")


async def test_cancel_through_another_worker_is_accepted_then_the_run_ends_cancelled(
    two_workers: tuple[Any, Any, str, str], agent: AgentCore
) -> None:
    """A cancel sent to worker A for a run executing on worker B answers 202 naming B; B's run
    ends `cancelled` without saving a turn; cancelling it again is a 409 saying it ended."""
    _, second, url_a, url_b = two_workers
    async with (
        httpx.AsyncClient(base_url=url_a, timeout=30) as a,
        httpx.AsyncClient(base_url=url_b, timeout=30) as b,
    ):
        run = asyncio.create_task(
            b.post(
                "/v1/threads/t/runs", json={"query": "long nap", "trace_id": "tr-x"}, headers=ADMIN
            )
        )
        await wait_until_running_elsewhere(a, "t", "tr-x")
        bob = await a.post("/v1/runs/tr-x/cancel", headers={"Authorization": "Bearer bob-token"})
        assert bob.status_code == 404
        asked = await a.post("/v1/runs/tr-x/cancel", headers=ADMIN)
        assert asked.status_code == 202
        body = asked.json()
        assert body["pending"] is True
        assert body["was"] == "running"
        assert body["thread_id"] == "t"
        assert body["worker_id"] == second.state.workers.worker_id
        answered = await run
        assert answered.headers["x-worker-id"] == second.state.workers.worker_id
        assert answered.json()["metadata"]["status"] == "cancelled"
        assert await agent.conversation.get_messages("t") == []
        for _ in range(500):  # until B's record says the run ended
            again = await a.post("/v1/runs/tr-x/cancel", headers=ADMIN)
            if again.status_code != 202:
                break
            await asyncio.sleep(0.02)
        assert again.status_code == 409
        assert again.json()["error"]["type"] == "run_finished"
        assert "cancelled" in again.json()["error"]["message"]


async def test_a_run_paused_on_one_worker_and_resumed_on_another_is_cancelled_from_the_first(
    two_workers: tuple[Any, Any, str, str], agent: AgentCore
) -> None:
    """Worker B still remembers the run it paused; once worker A resumes it, a cancel sent to B
    reaches A's run (202), which ends cancelled."""
    first, _, url_a, url_b = two_workers
    async with (
        httpx.AsyncClient(base_url=url_a, timeout=30) as a,
        httpx.AsyncClient(base_url=url_b, timeout=30) as b,
    ):
        paused = await b.post("/v1/threads/p/runs", json={"query": "pay then nap"}, headers=ADMIN)
        assert paused.json()["metadata"]["status"] == "awaiting_approval"
        trace_id = paused.json()["metadata"]["trace_id"]
        decisions = {"decisions": {"call_1": {"approve": True}}}
        resumed = asyncio.create_task(
            a.post(f"/v1/threads/p/runs/{trace_id}/decisions", json=decisions, headers=ADMIN)
        )
        await wait_until_running_elsewhere(b, "p", trace_id)
        asked = await b.post(f"/v1/runs/{trace_id}/cancel", headers=ADMIN)
        assert asked.status_code == 202, asked.text
        assert asked.json()["worker_id"] == first.state.workers.worker_id
        assert (await resumed).json()["metadata"]["status"] == "cancelled"


async def test_cancelling_a_run_this_worker_finished_is_409(
    two_workers: tuple[Any, Any, str, str],
) -> None:
    """A run that ended is reported as ended, with its status, not as unknown."""
    _, _, url_a, _ = two_workers
    async with httpx.AsyncClient(base_url=url_a, timeout=30) as a:
        done = await a.post("/v1/threads/t/runs", json={"query": "hi"}, headers=ADMIN)
        trace_id = done.json()["metadata"]["trace_id"]
        again = await a.post(f"/v1/runs/{trace_id}/cancel", headers=ADMIN)
    assert again.status_code == 409
    assert "success" in again.json()["error"]["message"]


async def test_run_events_on_another_worker_replay_then_follow_to_the_end(
    two_workers: tuple[Any, Any, str, str], agent: AgentCore
) -> None:
    """GET /v1/runs/{trace_id}/events on worker A, for a run executing on worker B, gives the
    run's observations (ids: observation ids) and ends with `end` and the run's status; with
    Last-Event-ID it resumes after that observation, on either worker. Starting the run again
    under its trace id on A is refused."""
    _, second, url_a, url_b = two_workers
    async with (
        httpx.AsyncClient(base_url=url_a, timeout=30) as a,
        httpx.AsyncClient(base_url=url_b, timeout=30) as b,
    ):
        run = asyncio.create_task(
            b.post(
                "/v1/threads/t/runs", json={"query": "slow nap", "trace_id": "tr-f"}, headers=ADMIN
            )
        )
        await wait_until_running_elsewhere(a, "t", "tr-f")
        twice = {"query": "slow nap", "trace_id": "tr-f"}
        again = await a.post("/v1/threads/t/runs", json=twice, headers=ADMIN)
        assert again.status_code == 409  # not started a second time on worker A
        assert "/v1/runs/{trace_id}/events" in again.json()["error"]["message"]
        async with a.stream("GET", "/v1/runs/tr-f/events", headers=STREAM) as response:
            assert response.status_code == 200
            events = await read_sse(response)
        assert (await run).json()["metadata"]["status"] == "success"
        stored = await agent.observations.get_observations("t", trace_id="tr-f")

        first, observed, last = events[0], events[1:-1], events[-1]
        assert first.name == "run"
        assert first.data["worker_id"] == second.state.workers.worker_id
        assert [(e.id, e.name) for e in observed] == [(o.id, o.type.value) for o in stored]
        assert (last.name, last.data["status"]) == ("end", "success")
        assert not any(e.name == "token" for e in events)  # tokens stay in B's process

        resume = {**STREAM, "Last-Event-ID": stored[1].id}
        async with a.stream("GET", "/v1/runs/tr-f/events", headers=resume) as response:
            rest = await read_sse(response)
        assert [e.id for e in rest[1:-1]] == [o.id for o in stored[2:]]
        assert rest[-1].name == "end"

        plan = next(o for o in stored if o.type.value == "PLAN")
        async with b.stream(
            "GET", "/v1/runs/tr-f/events", headers={**STREAM, "Last-Event-ID": plan.id}
        ) as response:
            own = await read_sse(response)
        assert own[0].data["id"] != plan.id
        assert plan.id not in {e.data.get("id") for e in own}
        assert own[-1].name == "final"
        missing = await a.get("/v1/runs/no-such-run/events", headers=STREAM)
        assert missing.status_code == 404
        assert "observations?trace_id=" in missing.json()["error"]["message"]


async def test_thread_feed_resumes_after_last_event_id_with_what_was_missed(
    two_workers: tuple[Any, Any, str, str], agent: AgentCore
) -> None:
    """A client leaving the thread feed and coming back with Last-Event-ID first gets every
    observation stored after that one (runs on either worker), once each, then live ones."""
    _, _, url_a, url_b = two_workers
    async with (
        httpx.AsyncClient(base_url=url_a, timeout=30) as a,
        httpx.AsyncClient(base_url=url_b, timeout=30) as b,
    ):
        await a.post("/v1/threads/t/runs", json={"query": "before"}, headers=ADMIN)
        before = await agent.observations.get_observations("t")
        async with a.stream("GET", "/v1/threads/t/events", headers=STREAM) as response:
            feed = SSEStream(response)
            seen = await feed.read(until=lambda e: e.name == "subscribed")
            run = asyncio.create_task(
                b.post("/v1/threads/t/runs", json={"query": "during"}, headers=ADMIN)
            )
            seen += await feed.read(until=lambda e: e.name == "PLAN")
        # Where a reconnect would resume: the last observation stored when it subscribed.
        assert (seen[0].name, seen[0].id) == ("subscribed", before[-1].id)
        last_seen = seen[-1].id
        assert last_seen is not None
        await run  # finishes while nobody listens
        await b.post("/v1/threads/t/runs", json={"query": "while away"}, headers=ADMIN)

        expected = await a.get(
            "/v1/threads/t/observations", params={"after": last_seen}, headers=ADMIN
        )
        missed = [o["id"] for o in expected.json()["observations"]]
        resume = {**STREAM, "Last-Event-ID": last_seen}
        async with a.stream("GET", "/v1/threads/t/events", headers=resume) as response:
            feed = SSEStream(response)
            replayed = await feed.read(until=lambda e: e.id == missed[-1])
            assert replayed[0].name == "subscribed"
            assert replayed[0].id == last_seen
            assert replayed[0].data["replayed"] == len(missed)
            assert [e.id for e in replayed[1:]] == missed
            live = asyncio.create_task(
                b.post("/v1/threads/t/runs", json={"query": "after"}, headers=ADMIN)
            )
            more = await feed.read(until=lambda e: e.name == "FINAL_RESPONSE")
            after = (await live).json()["metadata"]["trace_id"]
        ids = [e.id for e in more if e.id is not None]
        assert len(ids) == len(set(ids))
        assert not set(ids) & set(missed)
        assert {e.data["trace_id"] for e in more} == {after}

        unknown = {**STREAM, "Last-Event-ID": "no-such-observation"}
        async with a.stream("GET", "/v1/threads/t/events", headers=unknown) as response:
            start = await read_sse(response, until=lambda e: e.name == "gap")
        assert [e.name for e in start] == ["subscribed", "gap"]
        assert start[0].id == (await agent.observations.get_observations("t"))[-1].id


# -- the worker directory itself ------------------------------------------------------------


async def idle(directory: WorkerDirectory) -> None:
    """Until the directory's background task has written everything and stopped."""
    for _ in range(500):
        task = directory._task
        if task is None or task.done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the worker's background task never stopped")


async def test_a_running_run_of_a_silent_worker_is_reported_lost() -> None:
    """A record not refreshed for stale_s marks its running runs `lost`; finished runs keep
    their status."""
    storage = InMemoryStorage()
    reader = WorkerDirectory(storage)
    await storage.set_agent_state(
        "pes-agent-server:workers", AgentState(data={"workers": {"w-dead": 0.0}})
    )
    await storage.set_agent_state(
        WORKER_PREFIX + "w-dead",
        AgentState(
            data={
                "seen": 1.0,
                "runs": {
                    "tr-1": {"thread_id": "t", "user_id": None, "status": "running"},
                    "tr-2": {"thread_id": "t", "user_id": "u", "status": "partial"},
                },
            }
        ),
    )
    lost = await reader.find("tr-1")
    assert lost is not None
    assert (lost.status, lost.running) == ("lost", False)
    done = await reader.find("tr-2")
    assert done is not None
    assert (done.status, done.user_id) == ("partial", "u")
    assert await reader.request_cancel("tr-1") == lost
    assert await reader.find("tr-3") is None


async def test_a_damaged_worker_record_never_fails_the_listing_of_the_others(
    tmp_path: Path,
) -> None:
    """A worker record that cannot be read, or holds fields of the wrong type, is left out (or
    read as long silent) while the other workers' runs are still listed and found."""
    storage = SQLiteStorage(tmp_path / "w.db")
    reader = WorkerDirectory(storage)
    workers = {"w-good": 0.0, "w-torn": 0.0, "w-odd": 0.0, "w-list": 0.0}
    await storage.set_agent_state(DIRECTORY, AgentState(data={"workers": workers}))
    running = {"thread_id": "t", "user_id": None, "status": "running"}
    for worker, record in (
        ("w-good", {"seen": time.time(), "runs": {"tr-good": running}}),
        ("w-torn", {"seen": time.time(), "runs": {"tr-torn": running}}),
        ("w-odd", {"seen": "yesterday", "runs": {"tr-odd": {**running, "ended_at": "x"}}}),
        ("w-list", {"seen": time.time(), "runs": ["tr-list"]}),
    ):
        await storage.set_agent_state(WORKER_PREFIX + worker, AgentState(data=record))
    with sqlite3.connect(tmp_path / "w.db") as raw:
        raw.execute(
            "UPDATE agent_states SET data = '{\"runs\": ' WHERE thread_id = ?",
            (WORKER_PREFIX + "w-torn",),
        )
    try:
        listed = {run.trace_id: run.status for run in await reader.others()}
        assert listed == {"tr-good": "running", "tr-odd": "lost"}
        found = await reader.find("tr-good")
        assert found is not None
        assert found.worker_id == "w-good"
        assert await reader.find("tr-torn") is None
    finally:
        await storage.aclose()


async def test_a_worker_reads_and_writes_nothing_while_it_runs_nothing() -> None:
    """A worker lists its running run for the others; once the run ended and the record says
    so, its background task stops. The record is no thread and records no observation."""
    storage = InMemoryStorage()
    worker, other = WorkerDirectory(storage), WorkerDirectory(storage)
    handle = RunHandle("t", "tr-9", "u", replay_limit=10)
    handle.task = asyncio.create_task(asyncio.sleep(0))
    worker.started(handle)
    for _ in range(500):
        found = await other.find("tr-9")
        if found is not None:
            break
        await asyncio.sleep(0.01)
    assert found is not None
    assert found.running
    assert worker._task is not None
    assert not worker._task.done()  # polling for cancel requests while the run executes
    await handle.task
    handle.finish("final", {})
    worker.ended(handle)
    await idle(worker)
    found = await other.find("tr-9")
    assert found is not None
    assert found.status == "cancelled"  # it ended without a response
    assert WORKER_PREFIX + worker.worker_id in await storage.list_threads()
    assert await storage.get_observations(WORKER_PREFIX + worker.worker_id) == []


async def test_openapi_describes_cross_worker_cancel_and_resume(agent: AgentCore) -> None:
    """The OpenAPI document lists the 202 of a cancel handed to another worker, its fields,
    and Last-Event-ID on both event streams."""
    transport = httpx.ASGITransport(app=create_app(agent, tokens=TOKENS))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        document = (await client.get("/openapi.json")).json()
    paths = document["paths"]
    assert {"200", "202"} <= set(paths["/v1/runs/{trace_id}/cancel"]["post"]["responses"])
    fields = document["components"]["schemas"]["CancelResult"]["properties"]
    assert {"pending", "worker_id"} <= set(fields)
    for path in ("/v1/runs/{trace_id}/events", "/v1/threads/{thread_id}/events"):
        parameters = paths[path]["get"]["parameters"]
        assert {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}} in parameters


async def test_a_worker_that_ran_nothing_writes_nothing(agent: AgentCore) -> None:
    """A worker served and stopped without executing a run leaves no record and no directory
    entry behind (every restart of an idle worker used to add both)."""
    async with serving(create_app(agent, tokens=TOKENS)) as url, httpx.AsyncClient() as client:
        assert (await client.get(f"{url}/v1/threads", headers=ADMIN)).status_code == 200
    assert await agent.storage.get_agent_state(DIRECTORY) is None
    assert await agent.storage.list_threads() == []


async def ran_one(directory: WorkerDirectory, trace_id: str) -> None:
    """Let `directory` execute a run `trace_id` to its end and write that down."""
    handle = RunHandle("t", trace_id, None, replay_limit=10)
    handle.task = asyncio.create_task(asyncio.sleep(0))
    directory.started(handle)
    await handle.task
    directory.ended(handle)
    await idle(directory)


async def test_a_stopped_worker_is_forgotten_once_its_runs_are_past_retention() -> None:
    """A worker that stopped cleanly, or whose process is gone from this machine, stays in the
    directory while its runs may still be asked about (retention_s); then the next busy worker
    drops it and deletes its record. A worker gone silent elsewhere (killed on another
    machine) is kept longer, its running run reported lost."""
    storage = InMemoryStorage()
    stopped = WorkerDirectory(storage, retention_s=0.3)
    await ran_one(stopped, "tr-1")
    await stopped.aclose()
    reader = WorkerDirectory(storage, retention_s=0.3)
    finished = await reader.find("tr-1")
    assert finished is not None
    assert finished.status == "cancelled"  # it ended without a response
    saved = await storage.get_agent_state(stopped.key)
    assert saved is not None
    here = saved.data["machine"]  # None where process ids cannot be checked
    exited = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await exited.wait()
    # Killed workers, listed, their last word a running run a minute ago: one on this
    # machine (its process is gone), one elsewhere.
    now = time.time()
    directory = await storage.get_agent_state(DIRECTORY)
    assert directory is not None
    killed = {"w-killed-here": (here, exited.pid), "w-killed-there": ("elsewhere", 1)}
    listed = {**directory.data["workers"], **dict.fromkeys(killed, now - 60)}
    await storage.set_agent_state(DIRECTORY, AgentState(data={"workers": listed}))
    for n, (worker, (machine, pid)) in enumerate(killed.items()):
        running = {"thread_id": "t", "user_id": None, "status": "running", "ended_at": None}
        record = {"worker": worker, "pid": pid, "machine": machine, "seen": now - 60}
        record |= {"runs": {f"tr-k{n}": running}, "cancel": {}}
        await storage.set_agent_state(WORKER_PREFIX + worker, AgentState(data=record))

    await asyncio.sleep(0.4)
    await ran_one(WorkerDirectory(storage, retention_s=0.3), "tr-3")
    directory = await storage.get_agent_state(DIRECTORY)
    assert directory is not None
    assert stopped.worker_id not in directory.data["workers"]
    assert await storage.get_agent_state(stopped.key) is None
    assert await reader.find("tr-1") is None
    assert "w-killed-there" in directory.data["workers"]
    lost = await reader.find("tr-k1")
    assert lost is not None
    assert lost.status == "lost"
    if here is not None:
        assert "w-killed-here" not in directory.data["workers"]
        assert await reader.find("tr-k0") is None


async def test_following_on_another_worker_from_an_event_number_says_it_starts_over(
    two_workers: tuple[Any, Any, str, str], agent: AgentCore
) -> None:
    """A client that followed a run on the worker executing it (numbered events) and comes
    back through another worker with such a Last-Event-ID, which that worker cannot place, is
    told so by a `gap` event before the run's observations from its first one (not handed
    them again silently)."""
    _, _, url_a, url_b = two_workers
    async with (
        httpx.AsyncClient(base_url=url_a, timeout=30) as a,
        httpx.AsyncClient(base_url=url_b, timeout=30) as b,
    ):
        body = {"query": "slow nap", "trace_id": "tr-n"}
        async with b.stream("POST", "/v1/threads/t/runs", json=body, headers=STREAM) as got:
            seen = await read_sse(got, until=lambda e: e.name == "PLAN")
        number = seen[-1].id
        assert number is not None
        assert number.isdigit()
        await wait_until_running_elsewhere(a, "t", "tr-n")
        resume = {**STREAM, "Last-Event-ID": number}
        async with a.stream("GET", "/v1/runs/tr-n/events", headers=resume) as response:
            events = await read_sse(response)
    stored = await agent.observations.get_observations("t", trace_id="tr-n")
    assert [e.name for e in events[:2]] == ["run", "gap"]
    assert events[1].data["last_event_id"] == number
    assert [e.id for e in events[2:-1]] == [o.id for o in stored]
    assert (events[-1].name, events[-1].data["status"]) == ("end", "success")


async def test_leaving_a_run_followed_on_another_worker_cancels_it_only_when_asked(
    two_workers: tuple[Any, Any, str, str], agent: AgentCore
) -> None:
    """A client following worker B's run through worker A and leaving mid-run leaves the run
    going; with ?cancel_on_disconnect=true leaving asks B to cancel it, and it ends cancelled
    without a saved turn."""
    _, _, url_a, url_b = two_workers
    async with (
        httpx.AsyncClient(base_url=url_a, timeout=30) as a,
        httpx.AsyncClient(base_url=url_b, timeout=30) as b,
    ):
        outcomes = []
        for thread, asked in (("kept", {}), ("dropped", {"cancel_on_disconnect": "true"})):
            body = {"query": "slow nap", "trace_id": f"tr-{thread}"}
            run = asyncio.create_task(
                b.post(f"/v1/threads/{thread}/runs", json=body, headers=ADMIN)
            )
            await wait_until_running_elsewhere(a, thread, f"tr-{thread}")
            async with a.stream(
                "GET", f"/v1/runs/tr-{thread}/events", headers=STREAM, params=asked
            ) as response:
                seen = await read_sse(response, until=lambda e: e.name == "PLAN")
            assert seen[0].name == "run"  # followed through A, then left before the end
            outcomes.append((await run).json()["metadata"]["status"])
    assert outcomes == ["success", "cancelled"]
    assert len(await agent.conversation.get_messages("kept")) == 2
    assert await agent.conversation.get_messages("dropped") == []


async def test_end_feeds_ends_the_feeds_and_leaves_runs_and_their_own_streams_going(
    two_workers: tuple[Any, Any, str, str], agent: AgentCore
) -> None:
    """end_feeds() (a server shutting down) ends a thread feed and a run followed through
    another worker at once, before the run ends (what was stored is still sent first); the
    run itself and the stream of the worker executing it go on to the final response."""
    _, _, url_a, url_b = two_workers
    async with (
        httpx.AsyncClient(base_url=url_a, timeout=30) as a,
        httpx.AsyncClient(base_url=url_b, timeout=30) as b,
    ):
        body = {"query": "slow nap", "trace_id": "tr-e"}
        async with (
            b.stream("POST", "/v1/threads/t/runs", json=body, headers=STREAM) as own,
            a.stream("GET", "/v1/threads/t/events", headers=STREAM) as thread_feed,
        ):
            own_events = SSEStream(own)
            await own_events.read(until=lambda e: e.name == "PLAN")
            await wait_until_running_elsewhere(a, "t", "tr-e")
            async with a.stream("GET", "/v1/runs/tr-e/events", headers=STREAM) as followed:
                feed, run = SSEStream(thread_feed), SSEStream(followed)
                await feed.read(until=lambda e: e.name == "subscribed")
                await run.read(until=lambda e: e.name == "run")
                assert end_feeds() == 2
                async with asyncio.timeout(1):  # both end well before the run (a 1.5 s nap)
                    replayed = await run.read()
                    left = await feed.read()
                assert "end" not in {e.name for e in replayed}
                assert "FINAL_RESPONSE" not in {e.name for e in left}
            rest = await own_events.read()
    assert (rest[-1].name, rest[-1].data["metadata"]["status"]) == ("final", "success")


async def test_a_run_is_listed_settle_s_after_it_starts_not_before() -> None:
    """The record of a run that just started is written settle_s later, so that it does not
    queue in front of the run's own first reads of the store; then the others see it."""
    storage = InMemoryStorage()
    worker = WorkerDirectory(storage, settle_s=0.3, min_interval_s=0.3, poll_s=0.5)
    other = WorkerDirectory(storage)
    handle = RunHandle("t", "tr-s", None, replay_limit=10)
    handle.task = asyncio.create_task(asyncio.sleep(5))
    try:
        worker.started(handle)
        await asyncio.sleep(0.1)
        assert await other.find("tr-s") is None
        await asyncio.sleep(0.4)
        found = await other.find("tr-s")
        assert found is not None
        assert found.running
    finally:
        handle.task.cancel()
        await worker.aclose()


def test_settle_s_longer_than_min_interval_s_is_refused() -> None:
    """settle_s must lie between 0 and min_interval_s: the error names both."""
    with pytest.raises(UsageError, match="settle_s <= min_interval_s"):
        WorkerDirectory(InMemoryStorage(), settle_s=0.1, min_interval_s=0.05)
