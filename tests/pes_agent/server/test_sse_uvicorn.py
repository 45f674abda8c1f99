"""Server-sent events read from a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from itertools import pairwise
from typing import Any

import httpx2 as httpx
import pytest
import uvicorn

from pes_agent import AgentCore
from pes_agent.server import create_app

from ...helpers import free_port
from .sse import SSEEvent, numbered, read_sse

Event = tuple[int, str, dict[str, Any]]


@pytest.fixture
async def base_url(agent: AgentCore) -> AsyncIterator[str]:
    """A uvicorn server for the agent's app, in this event loop, on a free local port."""
    port = free_port()
    config = uvicorn.Config(
        create_app(agent, tokens=["t0k"]), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await task


async def read_events(response: Any, stop: int | None = None) -> list[Event]:
    """Events of an SSE response, until `final`/`error` or `stop` events were read."""
    read = 0

    def done(event: SSEEvent) -> bool:
        nonlocal read
        read += 1
        return event.name in ("final", "error") or bool(stop and read >= stop)

    return numbered(await read_sse(response, done))


HEADERS = {"Authorization": "Bearer t0k", "Accept": "text/event-stream"}


async def start_stream(client: httpx.AsyncClient, query: str, stop: int, **params: str) -> Any:
    async with client.stream(
        "POST", "/v1/threads/t/runs", json={"query": query}, headers=HEADERS, params=params
    ) as response:
        assert response.status_code == 200
        return response.headers["x-trace-id"], await read_events(response, stop)


async def test_disconnect_keeps_the_run_and_last_event_id_resumes(
    base_url: str, agent: AgentCore
) -> None:
    """A client leaving mid-run does not stop it; reattaching with Last-Event-ID resumes."""
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        trace_id, first = await start_stream(client, "nap please", stop=3)
        assert first[0][1] == "run"
        last_id = first[-1][0]
        headers = {**HEADERS, "Last-Event-ID": str(last_id)}
        async with client.stream("GET", f"/v1/runs/{trace_id}/events", headers=headers) as again:
            rest = await read_events(again)
    assert rest[0][0] == last_id + 1
    # Nothing missed: each event follows the one before, but where the run ended while this
    # client read, its tokens since then come merged into one event under the id of the
    # last of them (`merge_text`), skipping the ids of the others.
    for (before, _, _), (event_id, name, _) in pairwise(rest):
        merged = event_id > before and name in ("token", "thinking")
        assert event_id == before + 1 or merged, rest
    assert rest[-1][1] == "final"
    assert rest[-1][2]["metadata"]["status"] == "success"
    assert len(await agent.conversation.get_messages("t")) == 2


async def test_disconnect_cancels_when_asked(base_url: str, agent: AgentCore) -> None:
    """With cancel_on_disconnect=true leaving the stream cancels the run: no turn is saved."""
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        trace_id, _ = await start_stream(client, "nap please", stop=3, cancel_on_disconnect="true")
        async with client.stream("GET", f"/v1/runs/{trace_id}/events", headers=HEADERS) as again:
            events = await read_events(again)
    assert events[-1][1] == "final"
    assert events[-1][2]["metadata"]["status"] == "cancelled"
    assert await agent.conversation.get_messages("t") == []


async def test_thread_events_feed_shows_a_run_live(base_url: str) -> None:
    """GET /v1/threads/{id}/events streams the observations and tokens of a run on the thread;
    an observation's event id is the observation's id, a token has none."""
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        headers = {"Authorization": "Bearer t0k"}
        async with client.stream("GET", "/v1/threads/t/events", headers=HEADERS) as feed:
            lines = feed.aiter_lines()
            assert await anext(lines) == "event: subscribed"  # an empty thread: no id yet
            run = asyncio.create_task(
                client.post("/v1/threads/t/runs", json={"query": "hello"}, headers=headers)
            )
            events: list[tuple[str | None, str, dict[str, Any]]] = []
            event_id: str | None = None
            name = "subscribed"
            async for line in lines:
                if line.startswith("id: "):
                    event_id = line.removeprefix("id: ")
                elif line.startswith("event: "):
                    name = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    events.append((event_id, name, json.loads(line.removeprefix("data: "))))
                    event_id = None
                if events and events[-1][1] == "FINAL_RESPONSE":
                    break
            assert (await run).status_code == 200
    names = [name for _, name, _ in events]
    assert {"PLAN", "TOOL_EXECUTION", "token", "FINAL_RESPONSE"} <= set(names)
    assert names[0] == "subscribed"
    for event_id, name, data in events:
        live_only = name in ("subscribed", "token", "thinking", "stream")
        assert event_id == (None if live_only else data["id"])
