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

__all__ = ["READ_WITHIN_S", "SSEEvent", "SSEStream", "read_sse", "serving"]

#: How long a read waits for the event it is after: keep-alive pings would otherwise keep a
#: stream that never sends it open forever, and the test with it.
READ_WITHIN_S = 60.0


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

    async def read(
        self,
        until: Callable[[SSEEvent], bool] = lambda event: False,
        *,
        within_s: float = READ_WITHIN_S,
    ) -> list[SSEEvent]:
        """The next events until the stream ends or `until(event)` is true for one (that
        event included); an AssertionError naming what came if neither happens within
        `within_s`. Keep-alive comments are skipped."""
        events: list[SSEEvent] = []
        fields: dict[str, str] = {}
        try:
            async with asyncio.timeout(within_s):
                async for line in self._lines:
                    if line == "":
                        if "event" in fields:
                            data = json.loads(fields["data"])
                            event = SSEEvent(fields.get("id"), fields["event"], data)
                            events.append(event)
                            if until(event):
                                return events
                        fields = {}
                    elif not line.startswith(":"):
                        key, _, value = line.partition(": ")
                        fields[key] = value
        except TimeoutError:
            got = [event.name for event in events]
            raise AssertionError(f"the awaited event did not come in {within_s} s: {got}") from None
        return events


async def read_sse(
    response: Any,
    until: Callable[[SSEEvent], bool] = lambda event: False,
    *,
    within_s: float = READ_WITHIN_S,
) -> list[SSEEvent]:
    """The events of a whole SSE response, or until `until(event)` is true for one."""
    return await SSEStream(response).read(until, within_s=within_s)
