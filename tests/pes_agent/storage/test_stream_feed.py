"""The stores' stream feed (`StreamFeed`): model stream events from one storage object reach
the subscribers of another on the same store, in order, whole, and only while they listen."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

from pes_agent import StreamEvent
from pes_agent.storage import SQLiteStorage, StreamFeed
from pes_agent.storage.sqlite import _STREAM_KEEP, _STREAM_PRUNE_EVERY

from .conftest import StorageFactory

Received = list[tuple[str, StreamEvent]]


def token(text: str, *, kind: str = "token", trace_id: str = "tr-1") -> StreamEvent:
    return StreamEvent("t1", trace_id, "synthesis", kind, text)  # type: ignore[arg-type]


async def test_events_reach_a_subscriber_of_another_storage_object_in_order(
    open_backend: StorageFactory,
) -> None:
    """Every batch, in the order published, each event tagged with its publisher's origin;
    `caught_up()` returns once all of them were delivered."""
    writer, reader = open_backend(), open_backend()
    assert isinstance(writer, StreamFeed)
    assert isinstance(reader, StreamFeed)
    received: Received = []
    subscription = await reader.subscribe_stream(_collector(received))
    sent = [token(f"piece {n} ") for n in range(300)]
    for start in range(0, 300, 7):
        await writer.publish_stream("origin-a", sent[start : start + 7])
    await writer.publish_stream("origin-b", [token("", kind="end")])
    await subscription.caught_up()
    assert [event for _, event in received] == [*sent, token("", kind="end")]
    assert {origin for origin, _ in received[:-1]} == {"origin-a"}
    assert received[-1][0] == "origin-b"
    subscription.close()


async def test_a_token_longer_than_any_payload_arrives_whole(open_backend: StorageFactory) -> None:
    """A 60 KB token (PostgreSQL's NOTIFY takes under 8000 bytes) arrives whole, maybe in
    pieces, before the next event; an error's long reason arrives as one event (PostgreSQL
    cuts it short)."""
    writer, reader = open_backend(), open_backend()
    assert isinstance(writer, StreamFeed)
    assert isinstance(reader, StreamFeed)
    received: Received = []
    subscription = await reader.subscribe_stream(_collector(received))
    long_text = "".join(f'"{n}" été ✓ 日本語 \\ ' for n in range(3000))
    await writer.publish_stream("o", [token(long_text), token("x" * 20_000, kind="error")])
    await subscription.caught_up()
    tokens = [event.text for _, event in received if event.kind == "token"]
    assert "".join(tokens) == long_text
    errors = [event.text for _, event in received if event.kind == "error"]
    assert len(errors) == 1
    assert errors[0]
    assert ("x" * 20_000).startswith(errors[0])
    assert received[-1][1].kind == "error"
    subscription.close()


async def test_only_events_published_while_subscribed_are_delivered(
    open_backend: StorageFactory,
) -> None:
    """Tokens are not history: what was published before a subscriber came, or after it
    closed its subscription, never reaches it."""
    writer, reader = open_backend(), open_backend()
    assert isinstance(writer, StreamFeed)
    assert isinstance(reader, StreamFeed)
    await writer.publish_stream("o", [token("before")])
    received: Received = []
    subscription = await reader.subscribe_stream(_collector(received))
    await writer.publish_stream("o", [token("during")])
    await subscription.caught_up()
    subscription.close()
    await writer.publish_stream("o", [token("after")])
    later: Received = []
    other = await reader.subscribe_stream(_collector(later))
    await other.caught_up()
    other.close()
    assert [event.text for _, event in received] == ["during"]
    assert later == []


async def test_a_subscriber_joining_a_listening_feed_gets_nothing_published_before_it(
    open_backend: StorageFactory,
) -> None:
    """With a subscriber already listening, one that subscribes after an event was published
    never gets that event, even while it is still on its way to this process: SQLite's
    poller had not read its row yet (every time), PostgreSQL's NOTIFY had not arrived (about
    one time in eight)."""
    writer, reader = open_backend(), open_backend()
    assert isinstance(writer, StreamFeed)
    assert isinstance(reader, StreamFeed)
    kept: Received = []
    listening = await reader.subscribe_stream(_collector(kept))
    for n in range(40):
        await writer.publish_stream("o", [token(f"old {n}")])
        received: Received = []
        joined = await reader.subscribe_stream(_collector(received))
        await writer.publish_stream("o", [token(f"new {n}")])
        await joined.caught_up()
        joined.close()
        assert [event.text for _, event in received] == [f"new {n}"]
    await listening.caught_up()
    assert len(kept) == 80
    listening.close()


async def test_sqlite_keeps_only_the_latest_stream_batches(tmp_path: Path) -> None:
    """The SQLite feed's table is pruned as it grows: it never holds much more than
    `_STREAM_KEEP` batches, however much was published."""
    path = tmp_path / "agent.db"
    async with SQLiteStorage(path) as storage:
        for n in range(_STREAM_KEEP + 3 * _STREAM_PRUNE_EVERY):
            await storage.publish_stream("o", [token(f"t{n}")])
    with sqlite3.connect(path) as conn:
        (rows,) = conn.execute("SELECT count(*) FROM stream_events").fetchone()
    assert _STREAM_KEEP <= rows <= _STREAM_KEEP + _STREAM_PRUNE_EVERY


def _collector(into: Received) -> Callable[[str, StreamEvent], Awaitable[None]]:
    async def collect(origin: str, event: StreamEvent) -> None:
        into.append((origin, event))

    return collect
