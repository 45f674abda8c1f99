"""Test helpers: uvicorn serving an app on 127.0.0.1 in the test's event loop, and the one SSE
reader of the server tests, which keeps each event's id as the string the server sent (read a
stream with `SSEStream`/`read_sse`, a whole body with `parse_sse`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn

from ...helpers import free_port

__all__ = [
    "READ_WITHIN_S",
    "SSEEvent",
    "SSEStream",
    "numbered",
    "parse_sse",
    "read_sse",
    "serving",
]

#: How long a read waits for the event it is after: keep-alive pings would otherwise keep a
#: stream that never sends it open forever, and the test with it.
READ_WITHIN_S = 60.0


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One server-sent event: its `id` line (None without one), name and JSON data."""

    id: str | None
    name: str
    data: dict[str, Any]


class _EventLines:
    """Collects one event's fields line by line; a blank line ends the event (comments, the
    keep-alive pings, are skipped)."""

    def __init__(self) -> None:
        self._fields: dict[str, str] = {}

    def feed(self, line: str) -> SSEEvent | None:
        """The event `line` ends, if it is the blank line after one."""
        if line == "":
            fields, self._fields = self._fields, {}
            if "event" not in fields:
                return None
            return SSEEvent(fields.get("id"), fields["event"], json.loads(fields["data"]))
        if not line.startswith(":"):
            key, _, value = line.partition(": ")
            self._fields[key] = value
        return None


def parse_sse(body: str) -> list[SSEEvent]:
    """The events of a whole SSE body, as `SSEStream` reads them."""
    lines = _EventLines()
    found = (lines.feed(line) for line in [*body.splitlines(), ""])
    return [event for event in found if event is not None]


def numbered(events: list[SSEEvent]) -> list[tuple[int, str, dict[str, Any]]]:
    """(id as a number, 0 without one; name; data) of each event, for tests that count ids."""
    return [(int(event.id or 0), event.name, event.data) for event in events]


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
        self._event = _EventLines()

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
        try:
            async with asyncio.timeout(within_s):
                async for line in self._lines:
                    event = self._event.feed(line)
                    if event is not None:
                        events.append(event)
                        if until(event):
                            return events
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
