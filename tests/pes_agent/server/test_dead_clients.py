"""Clients that hang up in the middle of a long stream, on a real uvicorn server: the server
stops writing to them at once instead of pushing the rest into the dead connection."""

from __future__ import annotations

import asyncio
import socket
from typing import Any
from urllib.parse import urlsplit

from pes_agent import AgentCore
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.server import create_app
from pes_agent.server.runs import RunHandle

from .sse import serving

#: Events in the replayed run, and the size of each: 16 MB in all, more than the kernel's
#: socket buffers of both ends hold (4 MB at most for the server's with Linux defaults).
EVENTS = 1000
EVENT_BYTES = 16_000
#: A safety net only: the awaited step happens as soon as the server gets there.
WAIT_S = 60.0


class SendCounter:
    """An ASGI wrapper counting the body chunks the app sends on event streams, and noting
    when each such response has ended."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sends = 0
        self.ended = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/events"):
            await self.app(scope, receive, send)
            return

        async def counting(message: Any) -> None:
            if message["type"] == "http.response.body":
                self.sends += 1
            await send(message)

        try:
            await self.app(scope, receive, counting)
        finally:
            self.ended.set()


async def read_a_little_and_hang_up(url: str, path: str, *headers: str) -> None:
    """GET `path` (with these header lines) with a small receive buffer, read one chunk of the
    answer, close."""
    address = urlsplit(url)
    loop = asyncio.get_running_loop()
    with socket.socket() as client:
        # Small and fixed (no autotuning): the server soon has to wait for the client.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.setblocking(False)
        await loop.sock_connect(client, (address.hostname, address.port))
        lines = [f"GET {path} HTTP/1.1", "Host: api", "Accept: text/event-stream", *headers]
        request = "\r\n".join(lines) + "\r\n\r\n"
        await loop.sock_sendall(client, request.encode())
        assert (await loop.sock_recv(client, 1024)).startswith(b"HTTP/1.1 200")


async def test_a_client_leaving_a_finished_runs_replay_gets_no_more_of_it(
    agent: AgentCore,
) -> None:
    """A client that reads the start of a finished run's replay and hangs up: the server stops
    sending to it long before the end (it sent the whole replay into the dead connection)."""
    app = create_app(agent, tokens=None)
    handle = RunHandle("t", "tr-long", None, replay_limit=app.state.runs.replay_limit)

    async def work(handle: RunHandle) -> None:
        for number in range(EVENTS):
            handle.add("THOUGHTS", {"n": number, "text": "x" * EVENT_BYTES})
        handle.finish("final", {"status": "success"})

    counter = SendCounter(app)
    async with serving(counter) as url:
        started = app.state.runs.start(handle, work)
        assert started.task is not None
        await started.task
        await read_a_little_and_hang_up(url, "/v1/runs/tr-long/events")
        await asyncio.wait_for(counter.ended.wait(), WAIT_S)
    assert counter.sends < EVENTS / 2


async def record_long_run(agent: AgentCore) -> list[Observation]:
    """Stores `EVENTS` big observations of run `tr-stored` on thread `t`."""
    return [
        await agent.observations.record(
            thread_id="t",
            trace_id="tr-stored",
            type=ObservationType.THOUGHTS,
            title="thinking",
            content={"n": number, "text": "x" * EVENT_BYTES},
        )
        for number in range(EVENTS)
    ]


async def test_a_client_leaving_a_thread_feeds_replay_gets_no_more_of_it(
    agent: AgentCore,
) -> None:
    """A client resuming a thread's feed from its first observation, that reads a little and
    hangs up: the server stops sending the stored observations to it long before the end."""
    first = (await record_long_run(agent))[0]
    counter = SendCounter(create_app(agent, tokens=None))
    async with serving(counter) as url:
        await read_a_little_and_hang_up(url, "/v1/threads/t/events", f"Last-Event-ID: {first.id}")
        await asyncio.wait_for(counter.ended.wait(), WAIT_S)
    assert counter.sends < EVENTS / 2


async def test_a_client_leaving_a_run_followed_from_another_worker_gets_no_more_of_it(
    agent: AgentCore,
) -> None:
    """A client following, through a worker that did not execute it, a finished run with many
    stored observations, that reads a little and hangs up: the server stops sending."""
    await record_long_run(agent)
    executed_by = create_app(agent, tokens=None).state.workers
    ran = RunHandle("t", "tr-stored", None, replay_limit=1)
    ran.finish("final", {"status": "success"})
    executed_by.started(ran)
    executed_by.ended(ran)
    app = create_app(agent, tokens=None)
    for _ in range(1000):
        if await app.state.workers.find("tr-stored") is not None:
            break
        await asyncio.sleep(0.01)
    counter = SendCounter(app)
    async with serving(counter) as url:
        await read_a_little_and_hang_up(url, "/v1/runs/tr-stored/events")
        await asyncio.wait_for(counter.ended.wait(), WAIT_S)
    await executed_by.aclose()
    assert counter.sends < EVENTS / 2
