"""What every store's stream feed (`StreamFeed`) shares: a subscriber's ordered delivery, and
model stream events as compact JSON.

Each subscriber (`StreamDelivery`) has a queue and a task of its own that hands the events to
its callback one at a time, in the order they were put, so a slow subscriber never holds up
the store or the others. The queue is bounded: past `limit` events the oldest are dropped
(tokens only; a warning counts them). `caught_up()` first asks the store to bring in what was
published before the call (`sync`), then waits until the callback has had all of it.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, get_args

from pes_agent.observing.logs import get_logger
from pes_agent.observing.streams import StreamEvent, StreamEventKind
from pes_agent.providers.base import LLMPhase

__all__ = ["StreamDelivery", "decode_events", "encode_events", "split_for_payloads"]

_log = get_logger("pes_agent.storage")

_PHASES = frozenset(get_args(LLMPhase))
_KINDS = frozenset(get_args(StreamEventKind))
# The kinds whose text is a piece of a longer text: split freely to fit a payload. The others'
# text (a restart's or an error's reason) is cut short instead.
_PIECES = frozenset({"token", "thinking"})
_REASON_CHARS = 1000

StreamCallback = Callable[[str, StreamEvent], Awaitable[None]]


class StreamDelivery:
    """One subscriber of a store's stream feed (a `StreamSubscription`)."""

    def __init__(
        self,
        callback: StreamCallback,
        *,
        sync: Callable[[], Awaitable[None]],
        on_close: Callable[[StreamDelivery], None],
        limit: int = 10_000,
    ) -> None:
        self._callback = callback
        self._sync = sync
        self._on_close = on_close
        self._limit = limit
        self._items: deque[tuple[str, StreamEvent] | asyncio.Future[None]] = deque()
        self._ready = asyncio.Event()
        self._closed = False
        self._dropped = 0
        self._task = asyncio.get_running_loop().create_task(self._serve())

    @property
    def closed(self) -> bool:
        """Whether the subscription was closed."""
        return self._closed

    def put(self, origin: str, events: Sequence[StreamEvent]) -> None:
        """Queue `events` (published by `origin`) for the callback."""
        if self._closed:
            return
        items = self._items
        for event in events:
            if len(items) >= self._limit and isinstance(items[0], tuple):
                items.popleft()
                self._dropped += 1
            items.append((origin, event))
        self._ready.set()

    async def caught_up(self) -> None:
        """Return once the callback has had every event published before this call."""
        if self._closed:
            return
        await self._sync()
        if self._closed:
            return
        reached: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._items.append(reached)
        self._ready.set()
        await reached

    def close(self) -> None:
        """Stop delivering (the event in hand finishes); safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._task.cancel()
        for item in self._items:
            if not isinstance(item, tuple) and not item.done():
                item.set_result(None)
        self._items.clear()
        self._on_close(self)

    async def _serve(self) -> None:
        items = self._items
        while True:
            while not items:
                self._ready.clear()
                await self._ready.wait()
            item = items.popleft()
            if not isinstance(item, tuple):
                if not item.done():
                    item.set_result(None)
                continue
            if self._dropped:
                _log.warning(
                    "stream_feed_dropped",
                    dropped=self._dropped,
                    note="a stream subscriber is too slow: the oldest waiting tokens were dropped",
                )
                self._dropped = 0
            try:
                await self._callback(*item)
            except Exception:
                _log.exception("subscriber_failed", stream="stream-feed")


def encode_events(events: Sequence[StreamEvent]) -> list[list[str]]:
    """`events` as JSON-ready rows."""
    return [[e.thread_id, e.trace_id, e.phase, e.kind, e.text] for e in events]


def decode_events(rows: Any) -> list[StreamEvent]:
    """The events of rows `encode_events` made; rows that are not such are left out."""
    events = []
    for row in rows if isinstance(rows, list) else ():
        if (
            isinstance(row, list)
            and len(row) == 5
            and all(isinstance(part, str) for part in row)
            and row[2] in _PHASES
            and row[3] in _KINDS
        ):
            events.append(StreamEvent(row[0], row[1], row[2], row[3], row[4]))
    return events


def split_for_payloads(
    origin: str, events: Sequence[StreamEvent], max_bytes: int, first_number: int
) -> list[str]:
    """`events` as JSON payloads of at most `max_bytes` UTF-8 bytes each, in order; each names
    `origin` and carries a number (from `first_number` on), so no two are equal (PostgreSQL
    delivers equal payloads of one transaction once). A token too long for one payload is
    split into several; a restart's or error's reason is cut short."""
    head = len(json.dumps({"o": origin, "n": first_number, "e": []}).encode()) + 16
    budget = max_bytes - head
    rows: list[tuple[list[str], int]] = []
    for event in events:
        for row in _fitted(event, budget):
            rows.append((row, len(json.dumps(row, ensure_ascii=False).encode()) + 1))
    payloads: list[str] = []
    batch: list[list[str]] = []
    size = 0
    for row, row_size in rows:
        if batch and size + row_size > budget:
            payloads.append(_payload(origin, first_number + len(payloads), batch))
            batch, size = [], 0
        batch.append(row)
        size += row_size
    if batch:
        payloads.append(_payload(origin, first_number + len(payloads), batch))
    return payloads


def _payload(origin: str, number: int, rows: list[list[str]]) -> str:
    return json.dumps({"o": origin, "n": number, "e": rows}, ensure_ascii=False)


def _fitted(event: StreamEvent, budget: int) -> list[list[str]]:
    """The rows of `event`, each small enough for `budget` bytes."""
    text = event.text if event.kind in _PIECES else event.text[:_REASON_CHARS]
    row = [event.thread_id, event.trace_id, event.phase, event.kind, text]
    if len(json.dumps(row, ensure_ascii=False).encode()) <= budget or event.kind not in _PIECES:
        return [row]
    if len(text) <= 1:  # pragma: no cover - ids alone would have to be larger than a payload
        return [row]
    middle = len(text) // 2
    first = StreamEvent(event.thread_id, event.trace_id, event.phase, event.kind, text[:middle])
    second = StreamEvent(event.thread_id, event.trace_id, event.phase, event.kind, text[middle:])
    return _fitted(first, budget) + _fitted(second, budget)
