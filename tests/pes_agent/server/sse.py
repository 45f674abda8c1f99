"""Test helpers: uvicorn serving an app on 127.0.0.1 in the test's event loop, and an SSE reader
that keeps each event's id as the string the server sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn

from .test_sse_uvicorn import free_port

__all__ = ["SSEEvent", "SSEStream", "read_sse", "serving"]


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One server-sent event: its `id` line (None without one), name and JSON data."""

    id: str | None
    name: str
    data: dict[str, Any]


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Serve `app` with uvicorn on a free local port while the block runs; yields its URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    for _ in range(1000):
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


class SSEStream:
    """The events of one SSE response, read in as many parts as a test needs."""

    def __init__(self, response: Any) -> None:
        self._lines = response.aiter_lines()

    async def read(self, until: Callable[[SSEEvent], bool] = lambda event: False) -> list[SSEEvent]:
        """The next events until the stream ends or `until(event)` is true for one (that
        event included). Keep-alive comments are skipped."""
        events: list[SSEEvent] = []
        fields: dict[str, str] = {}
        async for line in self._lines:
            if line == "":
                if "event" in fields:
                    event = SSEEvent(fields.get("id"), fields["event"], json.loads(fields["data"]))
                    events.append(event)
                    if until(event):
                        return events
                fields = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                fields[key] = value
        return events


async def read_sse(
    response: Any, until: Callable[[SSEEvent], bool] = lambda event: False
) -> list[SSEEvent]:
    """The events of a whole SSE response, or until `until(event)` is true for one."""
    return await SSEStream(response).read(until)
