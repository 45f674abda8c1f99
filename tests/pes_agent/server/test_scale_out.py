"""Several real `pes-agent serve` processes on one store (issue 16 item 3).

Each worker is the real command (`pes-agent serve --db ... --provider openai:echo --base-url`)
talking to a wire-compatible model server on 127.0.0.1 that this test runs. Its answer names
the query it answers ("answer to <query>"), and it notes the history each planning call saw,
so the tests can tell whose turn is where and whether a run ever missed an earlier turn.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from tests.pes_agent.cli.helpers import cli_command, cli_env, run_cli_async
from tests.pes_agent.providers.model_server import (
    ModelServer,
    RecordedRequest,
    Reply,
    model_server,
)
from tests.pes_agent.storage.conftest import (
    POSTGRES_URL,
    drop_schema,
    listening_sessions,
    pg_schema,
    require_postgres,
)

from .sse import SSEEvent, SSEStream
from .test_sse_uvicorn import free_port

__all__ = ["model_server", "pg_schema"]  # the fixtures, imported for the tests below

pytestmark = pytest.mark.slow

THREADS = 6
CLIENTS_PER_THREAD = 2
TURNS_PER_CLIENT = 5
STREAM = {"Accept": "text/event-stream"}
# A worker asked to stop (SIGINT) with nothing running must be gone by then.
STOP_WITHIN_S = 15
# The longest a test waits for events that should come (keep-alive pings would otherwise keep
# a stream that never delivers them open forever).
EVENTS_WITHIN_S = 60


def _text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return str(content)


class EchoModel:
    """Plans no tool call and answers "answer to <query>"; a query with "slow" gets an answer
    streamed over a minute (a run to cancel). Notes the earlier queries each planning call saw."""

    def __init__(self) -> None:
        self.history_seen: dict[str, list[str]] = {}

    def __call__(self, request: RecordedRequest) -> Reply:
        messages = request.body["messages"]
        last = _text(messages[-1])
        if "# Tools" in _text(messages[0]):  # the planning prompt
            earlier = [_text(m) for m in messages[1:-1] if m["role"] == "user"]
            self.history_seen[last] = earlier
            return Reply(json.dumps({"calls": [], "intent": "answer"}))
        query = last.removeprefix("# Query\n").split("\n\n# ", 1)[0]
        if "slow" in query:
            return Reply("still writing " * 300, chunk_chars=5, chunk_delay_s=0.1)
        return Reply("answer to " + query, chunk_chars=4, chunk_delay_s=0.005)


@dataclass
class Worker:
    """One `pes-agent serve` process and where it listens."""

    url: str
    process: asyncio.subprocess.Process
    log: Path


@asynccontextmanager
async def serve(
    count: int, db: str, model: ModelServer, tmp_path: Path, *extra: str
) -> AsyncIterator[list[Worker]]:
    """`count` serve processes on `db`, each on its own port; all stopped (SIGINT) after."""
    workers = []
    env = cli_env(tmp_path, OPENAI_API_KEY="sk-test")
    for n in range(count):
        port = free_port()
        log = tmp_path / f"worker-{n}.log"
        command = [*cli_command(), "serve", "--db", db, "--port", str(port), *extra]
        command += ["--provider", "openai:echo", "--base-url", model.openai_base_url]
        with log.open("wb") as out:  # a file, not a pipe nobody reads: it never fills up
            process = await asyncio.create_subprocess_exec(
                *command, env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT
            )
        workers.append(Worker(f"http://127.0.0.1:{port}", process, log))
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            for worker in workers:
                for _ in range(600):
                    try:
                        await client.get(f"{worker.url}/openapi.json")
                        break
                    except httpx.TransportError:
                        assert worker.process.returncode is None, worker.log.read_text()
                        await asyncio.sleep(0.1)
                else:
                    pytest.fail(f"a worker never started:\n{worker.log.read_text()}")
        yield workers
    finally:
        stuck = await stop(workers)
    for worker in workers:
        output = worker.log.read_text()
        assert "Traceback" not in output, output
    assert not stuck, f"workers still running {STOP_WITHIN_S} s after SIGINT:\n" + "\n".join(
        worker.log.read_text() for worker in stuck
    )


async def stop(workers: list[Worker]) -> list[Worker]:
    """SIGINT every worker; those not gone within STOP_WITHIN_S are killed and returned."""
    for worker in workers:
        if worker.process.returncode is None:
            worker.process.send_signal(signal.SIGINT)
    stuck = []
    for worker in workers:
        try:
            await asyncio.wait_for(worker.process.wait(), STOP_WITHIN_S)
        except TimeoutError:
            stuck.append(worker)
            worker.process.kill()
            await worker.process.wait()
    return stuck


async def no_one_listens(schema: str) -> None:
    """Until no session LISTENs for `schema` (a few seconds at most): every client that
    followed a feed has left, and no worker keeps its subscription or connection."""
    for _ in range(100):
        if await listening_sessions(schema) == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(
        f"{await listening_sessions(schema)} LISTEN sessions left after every client left"
    )


@dataclass(frozen=True)
class Ran:
    """One finished run as its client saw it."""

    thread: str
    query: str
    worker: int
    worker_id: str
    trace_id: str
    status: str
    answer: str


async def follow_thread(
    url: str, thread: str, runs: int, subscribed: asyncio.Event
) -> list[SSEEvent]:
    """The events of a thread's feed, until `runs` runs sent their FINAL_RESPONSE (a failure
    naming what came, if they do not all come within EVENTS_WITHIN_S)."""
    events: list[SSEEvent] = []
    try:
        async with (
            asyncio.timeout(EVENTS_WITHIN_S),
            httpx.AsyncClient(base_url=url, timeout=120) as client,
            client.stream("GET", f"/v1/threads/{thread}/events", headers=STREAM) as response,
        ):
            feed = SSEStream(response)
            events += await feed.read(until=lambda event: event.name == "subscribed")
            subscribed.set()
            finals = 0
            while finals < runs:
                events += await feed.read(until=lambda event: event.name == "FINAL_RESPONSE")
                finals += 1
            return events
    except TimeoutError:
        ended = [e.data["trace_id"] for e in events if e.name == "FINAL_RESPONSE"]
        pytest.fail(f"the feed of {thread} on {url} showed {len(ended)} of {runs} runs ending")


@pytest.mark.postgres
async def test_sixty_runs_on_three_workers_keep_every_turn_and_cross_workers(
    model_server: ModelServer, pg_schema: str, tmp_path: Path
) -> None:
    """Three serve processes on one PostgreSQL schema take 60 runs over 6 threads from 12
    concurrent clients, every thread's runs spread over all three: each thread keeps its 10
    turns, every question right before its own answer, each client's in its order, and every
    run saw all earlier turns of its thread (runs on a thread were serialised across
    processes). A thread feed on worker A shows the runs of workers B and C by trace id (their
    observations; tokens come only from A's own runs) and resumes on worker B from an
    observation id seen on A."""
    model = EchoModel()
    model_server.default = model
    db = f"{POSTGRES_URL}?schema={pg_schema}"
    async with serve(3, db, model_server, tmp_path) as workers:
        clients = [httpx.AsyncClient(base_url=w.url, timeout=120) for w in workers]
        ready = [asyncio.Event(), asyncio.Event()]
        feeds = [
            asyncio.create_task(follow_thread(workers[0].url, f"t{n}", 10, ready[n]))
            for n in range(2)
        ]
        for subscribed in ready:
            await asyncio.wait_for(subscribed.wait(), 60)
        assert await listening_sessions(pg_schema) == 1  # worker A, for both feeds

        async def client(thread: int, number: int) -> list[Ran]:
            done = []
            for turn in range(TURNS_PER_CLIENT):
                worker = (thread + number + turn) % len(workers)
                query = f"t{thread} c{number} n{turn}"
                response = await clients[worker].post(
                    f"/v1/threads/t{thread}/runs", json={"query": query}
                )
                assert response.status_code == 200, response.text
                body = response.json()
                done.append(
                    Ran(
                        f"t{thread}",
                        query,
                        worker,
                        response.headers["x-worker-id"],
                        body["metadata"]["trace_id"],
                        body["metadata"]["status"],
                        body["response"]["content"],
                    )
                )
            return done

        batches = await asyncio.gather(
            *(client(t, c) for t in range(THREADS) for c in range(CLIENTS_PER_THREAD))
        )
        ran = [run for batch in batches for run in batch]
        followed = await asyncio.gather(*feeds)

        assert len(ran) == 60
        assert all(r.status == "success" and r.answer == "answer to " + r.query for r in ran)
        ids = {r.worker: r.worker_id for r in ran}
        assert len(set(ids.values())) == 3
        assert all(ids[r.worker] == r.worker_id for r in ran)  # each port is one process

        for thread in range(THREADS):
            name = f"t{thread}"
            mine = [r for r in ran if r.thread == name]
            assert {r.worker for r in mine} == {0, 1, 2}
            reader = clients[thread % 3]
            messages = (await reader.get(f"/v1/threads/{name}/messages")).json()["messages"]
            assert [m["role"] for m in messages] == ["USER", "AI"] * 10
            questions = [m["content"] for m in messages[0::2]]
            answers = [m["content"] for m in messages[1::2]]
            assert sorted(questions) == sorted(r.query for r in mine)
            assert answers == ["answer to " + q for q in questions]
            for number in range(CLIENTS_PER_THREAD):
                own = [q for q in questions if f" c{number} " in q]
                assert own == [f"{name} c{number} n{turn}" for turn in range(TURNS_PER_CLIENT)]
            for turn, question in enumerate(questions):
                assert model.history_seen[question] == questions[:turn], question

        for thread, events in enumerate(followed):
            name = f"t{thread}"
            # Every observation of the thread came once, in the order it was stored: nothing
            # lost or repeated, whichever worker recorded it (the feed began on an empty thread).
            stored = await clients[1].get(f"/v1/threads/{name}/observations")
            assert [e.id for e in events if e.id is not None] == [
                o["id"] for o in stored.json()["observations"]
            ]
            on = {r.trace_id: r.worker for r in ran if r.thread == name}
            finals = {e.data["trace_id"] for e in events if e.name == "FINAL_RESPONSE"}
            plans = {e.data["trace_id"] for e in events if e.name == "PLAN"}
            assert finals == plans == set(on)
            assert {on[t] for t in finals} == {0, 1, 2}  # workers B and C among them
            tokens = {e.data["trace_id"] for e in events if e.name == "token"}
            assert tokens  # A's own runs stream their tokens to A's feed...
            assert {on[t] for t in tokens} == {0}  # ...other workers' tokens stay there
            for event in events:
                if event.name not in ("subscribed", "token", "thinking", "stream"):
                    assert event.id == event.data["id"]

        # Resume on worker B from an observation id the client got from worker A.
        events = followed[0]
        middle = [e for e in events if e.name == "FINAL_RESPONSE"][4]
        stored = await clients[2].get("/v1/threads/t0/observations", params={"after": middle.id})
        missed = [o["id"] for o in stored.json()["observations"]]
        assert missed
        resume = {**STREAM, "Last-Event-ID": str(middle.id)}
        async with (
            asyncio.timeout(EVENTS_WITHIN_S),
            clients[1].stream("GET", "/v1/threads/t0/events", headers=resume) as response,
        ):
            replayed = await SSEStream(response).read(until=lambda e: e.id == missed[-1])
        assert replayed[0].name == "subscribed"
        assert [e.id for e in replayed[1:]] == missed
        await no_one_listens(pg_schema)

        for each in clients:
            await each.aclose()

        listed = await run_cli_async(
            "threads", "--json", "--db", db, env=cli_env(tmp_path), cwd=tmp_path
        )
        assert listed.code == 0, listed.stderr
        assert [row["thread_id"] for row in listed.json()] == [f"t{n}" for n in range(THREADS)]


@pytest.mark.postgres
async def test_three_uvicorn_workers_of_one_serve_command(
    model_server: ModelServer, pg_schema: str, tmp_path: Path
) -> None:
    """`pes-agent serve --workers 3` on PostgreSQL: runs from concurrent connections are served
    by different worker processes (X-Worker-Id) and each thread keeps its turns in pairs."""
    model_server.default = EchoModel()
    db = f"{POSTGRES_URL}?schema={pg_schema}"
    async with serve(1, db, model_server, tmp_path, "--workers", "3") as [worker]:

        async def one(thread: str, query: str) -> tuple[str, str]:
            # A connection of its own each time, so that any worker may accept it.
            async with httpx.AsyncClient(base_url=worker.url, timeout=120) as client:
                response = await client.post(f"/v1/threads/{thread}/runs", json={"query": query})
            assert response.json()["response"]["content"] == "answer to " + query
            return thread, response.headers["x-worker-id"]

        served: set[str] = set()
        rounds = 0
        while len(served) < 2 or rounds < 2:
            rounds += 1
            assert rounds <= 10, "every connection went to one worker process"
            done = await asyncio.gather(*(one(f"w{n % 2}", f"r{rounds} q{n}") for n in range(6)))
            served |= {worker_id for _, worker_id in done}
        async with httpx.AsyncClient(base_url=worker.url, timeout=30) as client:
            for thread in ("w0", "w1"):
                got = await client.get(f"/v1/threads/{thread}/messages")
                messages = got.json()["messages"]
                assert len(messages) == 2 * 3 * rounds
                pairs = zip(messages[0::2], messages[1::2], strict=True)
                assert all(a["content"] == "answer to " + q["content"] for q, a in pairs)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def shared_db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A SQLite file, or a fresh PostgreSQL schema (dropped afterwards), as a `--db` value."""
    if request.param == "sqlite":
        yield str(tmp_path / "shared.db")
        return
    require_postgres()
    schema = f"pes_test_{uuid.uuid4().hex[:16]}"
    yield f"{POSTGRES_URL}?schema={schema}"
    await drop_schema(schema)


async def test_cancel_and_follow_a_run_of_another_worker_process(
    shared_db: str, model_server: ModelServer, tmp_path: Path
) -> None:
    """Worker A cancels a run executing on worker B (202 naming B; B's stream ends cancelled,
    no turn saved; asked again: 409 run_finished) and streams that run's events meanwhile,
    ending with `end` and the status cancelled."""
    model_server.default = EchoModel()
    async with (
        serve(2, shared_db, model_server, tmp_path) as (worker_a, worker_b),
        httpx.AsyncClient(base_url=worker_a.url, timeout=60) as a,
        httpx.AsyncClient(base_url=worker_b.url, timeout=60) as b,
    ):
        started: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()

        async def run_on_b() -> list[SSEEvent]:
            body = {"query": "slow answer please"}
            async with b.stream("POST", "/v1/threads/s/runs", json=body, headers=STREAM) as got:
                started.set_result((got.headers["x-trace-id"], got.headers["x-worker-id"]))
                return await SSEStream(got).read(until=lambda e: e.name == "final")

        on_b = asyncio.create_task(run_on_b())
        trace_id, worker_b_id = await asyncio.wait_for(started, 60)
        for _ in range(1500):
            runs = (await a.get("/v1/threads/s/runs")).json()["runs"]
            if any(r["trace_id"] == trace_id and r["status"] == "running" for r in runs):
                break
            await asyncio.sleep(0.02)
        else:
            pytest.fail("worker A never listed worker B's run as running")

        attached: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def follow_on_a() -> list[SSEEvent]:
            async with a.stream("GET", f"/v1/runs/{trace_id}/events", headers=STREAM) as got:
                assert got.status_code == 200
                feed = SSEStream(got)
                events = await feed.read(until=lambda e: e.name == "PLAN")
                attached.set_result(None)
                return events + await feed.read(until=lambda e: e.name == "end")

        on_a = asyncio.create_task(follow_on_a())
        await asyncio.wait_for(attached, 60)
        asked = await a.post(f"/v1/runs/{trace_id}/cancel")
        assert asked.status_code == 202, asked.text
        assert asked.json()["pending"] is True
        assert asked.json()["worker_id"] == worker_b_id

        own = await asyncio.wait_for(on_b, 60)
        assert own[-1].data["metadata"]["status"] == "cancelled"
        followed = await asyncio.wait_for(on_a, 60)
        assert followed[0].name == "run"
        assert followed[0].data["worker_id"] == worker_b_id
        assert (followed[-1].name, followed[-1].data["status"]) == ("end", "cancelled")
        observed = followed[1:-1]
        assert observed
        assert all(e.id == e.data["id"] and e.data["trace_id"] == trace_id for e in observed)
        assert (await a.get("/v1/threads/s/messages")).json()["messages"] == []
        if "?schema=" in shared_db:  # the stream followed through A let go of A's LISTEN
            await no_one_listens(shared_db.rsplit("?schema=", 1)[1])

        for _ in range(500):  # until B's record says the run ended
            again = await a.post(f"/v1/runs/{trace_id}/cancel")
            if again.status_code != 202:
                break
            await asyncio.sleep(0.02)
        assert again.status_code == 409
        assert again.json()["error"]["type"] == "run_finished"
        assert (await a.post("/v1/runs/nothing-here/cancel")).status_code == 404


@pytest.mark.postgres
async def test_a_run_of_a_killed_worker_is_lost_and_its_thread_free_at_once(
    model_server: ModelServer, pg_schema: str, tmp_path: Path
) -> None:
    """Worker B is SIGKILLed mid-run. Worker A, on the same machine, stops listing the run as
    running at once (not after B's record goes stale), answers a cancel with 409 naming the
    stopped worker, streams the run to an `end` with status lost, and runs the thread's next
    turn straight away (B's thread lock died with its connection), which saw no turn of the
    killed run."""
    model = EchoModel()
    model_server.default = model
    db = f"{POSTGRES_URL}?schema={pg_schema}"
    async with (
        serve(2, db, model_server, tmp_path) as (worker_a, worker_b),
        httpx.AsyncClient(base_url=worker_a.url, timeout=30) as a,
        httpx.AsyncClient(base_url=worker_b.url, timeout=30) as b,
    ):
        started: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def run_on_b() -> None:
            body = {"query": "slow answer please"}
            async with b.stream("POST", "/v1/threads/k/runs", json=body, headers=STREAM) as got:
                started.set_result(got.headers["x-trace-id"])
                await SSEStream(got).read()

        on_b = asyncio.create_task(run_on_b())
        trace_id = await asyncio.wait_for(started, 60)

        async def status_on_a() -> str | None:
            runs = (await a.get("/v1/threads/k/runs")).json()["runs"]
            return next((r["status"] for r in runs if r["trace_id"] == trace_id), None)

        for _ in range(1500):
            if await status_on_a() == "running":
                break
            await asyncio.sleep(0.02)
        else:
            pytest.fail("worker A never listed worker B's run as running")

        worker_b.process.kill()
        await worker_b.process.wait()
        with pytest.raises(httpx.TransportError):
            await on_b
        for _ in range(100):  # 5 s: well before B's record could go stale (30 s)
            if await status_on_a() != "running":
                break
            await asyncio.sleep(0.05)
        assert await status_on_a() == "unfinished"
        cancel = await a.post(f"/v1/runs/{trace_id}/cancel")
        assert cancel.status_code == 409, cancel.text
        assert "the worker executing it stopped" in cancel.json()["error"]["message"]
        async with (
            asyncio.timeout(EVENTS_WITHIN_S),
            a.stream("GET", f"/v1/runs/{trace_id}/events", headers=STREAM) as response,
        ):
            events = await SSEStream(response).read()
        assert (events[0].name, events[0].data["status"]) == ("run", "lost")
        assert (events[-1].name, events[-1].data["status"]) == ("end", "lost")

        async with asyncio.timeout(10):  # no wait for a lock nobody holds any more
            after = await a.post("/v1/threads/k/runs", json={"query": "after the crash"})
        assert after.json()["metadata"]["status"] == "success"
        assert model.history_seen["after the crash"] == []
        messages = (await a.get("/v1/threads/k/messages")).json()["messages"]
        assert [m["content"] for m in messages] == ["after the crash", "answer to after the crash"]
