"""The stream feed (`StreamFeed`) on PostgreSQL: model stream events as NOTIFY payloads.

Nothing is stored. A publisher's events go out as payloads of at most `_MAX_PAYLOAD` bytes
(a long token is split over several), numbered so that none is dropped as a duplicate, all in
one statement: PostgreSQL delivers them in commit order, so one publisher's events arrive in
the order it published them. While anyone subscribes, one connection LISTENs on the channel
and hands each payload's events to every subscriber's queue (`StreamDelivery`). `caught_up()`
sends a marker of its own through the channel and waits for it to come back: everything
committed before it has then arrived. A lost LISTEN connection is opened again by the next
subscriber or `caught_up()` (tokens sent meanwhile are lost: they are only tokens).

A subscriber that joins a connection already listening could otherwise get payloads that were
committed before it subscribed and are still on their way to this process: it starts with a
marker of its own, and gets only what arrives after it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from pes_agent.observing.logs import get_logger
from pes_agent.observing.streams import StreamEvent
from pes_agent.storage._streams import (
    StreamCallback,
    StreamDelivery,
    decode_events,
    split_for_payloads,
)
from pes_agent.storage.postgres._pool import Connector

__all__ = ["StreamNotifier"]

_log = get_logger("pes_agent.storage")

# A NOTIFY payload must stay under 8000 bytes.
_MAX_PAYLOAD = 7900
_NOTIFY = "SELECT pg_notify($1, p) FROM unnest($2::text[]) WITH ORDINALITY AS u(p, n) ORDER BY n"


class StreamNotifier:
    """Publishing to and listening on one store's stream channel."""

    def __init__(
        self,
        connector: Connector,
        channel: str,
        *,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self._connector = connector
        self._channel = channel
        self._spawn = spawn
        self._deliveries: list[StreamDelivery] = []
        # Subscribers whose first marker has not come back yet: they get nothing until it does.
        self._joining: set[StreamDelivery] = set()
        self._markers: dict[str, asyncio.Future[None]] = {}
        self._joins: dict[str, StreamDelivery] = {}  # a joining subscriber's marker
        self._conn: Any = None
        self._mutex = asyncio.Lock()

    async def publish(self, origin: str, events: Sequence[StreamEvent]) -> None:
        """Send `events` to every listener, in order."""
        # Numbered within the statement: PostgreSQL drops equal payloads of one transaction.
        payloads = split_for_payloads(origin, events, _MAX_PAYLOAD, 0)
        await self._connector.execute(_NOTIFY, self._channel, payloads)

    async def subscribe(self, callback: StreamCallback) -> StreamDelivery:
        """A subscriber getting each event published from now on."""
        delivery = StreamDelivery(callback, sync=self._sync, on_close=self._remove)
        # Listed at once (a release under way keeps the connection for it), but fed only from
        # its marker on when the connection was listening already: what is still arriving
        # was committed before it subscribed.
        self._deliveries.append(delivery)
        self._joining.add(delivery)
        try:
            if await self._listen():
                self._joining.discard(delivery)  # a new LISTEN hears nothing older
            else:
                await self._round_trip(joining=delivery)
        except BaseException:
            delivery.close()
            raise
        finally:
            self._joining.discard(delivery)
        return delivery

    def _remove(self, delivery: StreamDelivery) -> None:
        self._deliveries.remove(delivery)
        self._joining.discard(delivery)
        if not self._deliveries:
            self._spawn(self._release_if_unused())

    async def _listen(self) -> bool:
        """Make sure a connection LISTENs; whether it had to open one."""
        async with self._mutex:
            if self._conn is not None and not self._conn.is_closed():
                return False
            conn = await self._connector.connect()
            try:
                await conn.add_listener(self._channel, self._on_notify)
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
            return True

    async def _release_if_unused(self) -> None:
        async with self._mutex:
            if self._deliveries:
                return  # someone subscribed again meanwhile
            conn, self._conn = self._conn, None
            if conn is not None and not conn.is_closed():
                await conn.close()

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        # Decoded here, in the order the payloads arrive: each subscriber's queue keeps it.
        try:
            message = json.loads(payload)
            marker = message.get("marker")
            if marker is not None:
                joined = self._joins.pop(str(marker), None)
                if joined is not None:  # fed from the next payload on, in arrival order
                    self._joining.discard(joined)
                reached = self._markers.pop(str(marker), None)
                if reached is not None and not reached.done():
                    reached.set_result(None)
                return
            origin = str(message["o"])
            events = decode_events(message["e"])
        except (ValueError, KeyError, TypeError, AttributeError):
            _log.warning("stream_feed_bad_payload", url=self._connector.safe_url)
            return
        joining = self._joining
        for delivery in tuple(self._deliveries):
            if delivery not in joining:
                delivery.put(origin, events)

    async def _sync(self) -> None:
        """Wait until every payload committed before now has arrived."""
        await self._listen()  # a lost connection is opened again
        await self._round_trip()

    async def _round_trip(self, *, joining: StreamDelivery | None = None) -> None:
        """Send a marker through the channel and wait for it to come back; `joining` is fed
        from then on."""
        marker = uuid.uuid4().hex
        reached: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._markers[marker] = reached
        if joining is not None:
            self._joins[marker] = joining
        try:
            await self._connector.execute(
                "SELECT pg_notify($1, $2)", self._channel, json.dumps({"marker": marker})
            )
            await reached
        finally:
            self._markers.pop(marker, None)
            self._joins.pop(marker, None)

    async def aclose(self) -> None:
        """Stop every subscriber and close the LISTEN connection."""
        for delivery in list(self._deliveries):
            delivery.close()
        for reached in self._markers.values():
            if not reached.done():
                reached.cancel()
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            await conn.close()
