"""Tokens across processes: a durable engine's worker publishes its runs' model stream events
to the store's stream feed (`StreamFeed`), and the submitting agent forwards them to its own
`StreamSocket` subscribers.

- `StreamPublisher` (the worker's side): a model call of a run on an engine hands it each
  event; one write at a time goes to the store, carrying what gathered meanwhile, so a fast
  stream costs a few writes per call, not one per token. `flush()` waits until the call's
  events are in the store: a model step ends only after its tokens went out, so they all
  reach the feed before the run's response does.
- `StreamRelay` (the submitting side, an agent built with `engine=`): subscribed to the feed
  only while the agent's socket has subscribers (no cost otherwise), it publishes the feed's
  events on the socket, leaving out those the socket's own agent published (they reached it
  directly). `process()` waits for the subscription before it submits a run, and for the feed
  to catch up after the response came, so a subscriber gets every token before the answer.
"""

from __future__ import annotations

import asyncio
import contextlib

from pes_agent.observing.logs import get_logger
from pes_agent.observing.streams import StreamEvent, StreamSocket
from pes_agent.storage.base import StreamFeed, StreamSubscription

__all__ = ["StreamPublisher", "StreamRelay"]

_log = get_logger("pes_agent.streams")

# How long `process()` waits for the feed to bring the last tokens of a run in: past it, the
# answer comes without them (a feed that lost its connection must not hold the run up).
CATCH_UP_S = 10.0


class StreamPublisher:
    """Writes one agent's model stream events to the store's feed, in order, in batches."""

    def __init__(self, feed: StreamFeed, origin: str) -> None:
        self._feed = feed
        self._origin = origin
        self._waiting: list[StreamEvent] = []
        self._writer: asyncio.Task[None] | None = None

    def put(self, event: StreamEvent) -> None:
        """Send `event` with the next write."""
        self._waiting.append(event)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write())

    async def flush(self) -> None:
        """Wait until every event put so far is written (or its write failed)."""
        writer = self._writer
        if writer is not None and not writer.done():
            await asyncio.shield(writer)

    async def _write(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                await self._feed.publish_stream(self._origin, batch)
            except Exception as exc:
                # Tokens only: the run goes on, its answer comes with its response.
                _log.warning("stream_feed_write_failed", events=len(batch), error=str(exc))


class StreamRelay:
    """Forwards the store's stream feed to `socket` while it has subscribers."""

    def __init__(self, feed: StreamFeed, socket: StreamSocket) -> None:
        self._feed = feed
        self._socket = socket
        self._subscription: StreamSubscription | None = None
        self._lock = asyncio.Lock()
        self._syncing: set[asyncio.Task[None]] = set()
        socket.watch(self._changed)

    def _changed(self, active: bool) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (subscribed at setup): `ready()` subscribes
            return
        task = loop.create_task(self._sync())
        self._syncing.add(task)
        task.add_done_callback(self._syncing.discard)

    async def ready(self) -> None:
        """Subscribe to the feed now if the socket has subscribers (before a run is submitted,
        so that none of its tokens is published before the relay listens)."""
        await self._sync()

    async def caught_up(self) -> None:
        """Wait until the events published before now are forwarded (a run's response came)."""
        subscription = self._subscription
        if subscription is None:
            return
        try:
            await asyncio.wait_for(subscription.caught_up(), CATCH_UP_S)
        except TimeoutError:
            _log.warning("stream_feed_behind", waited_s=CATCH_UP_S)

    async def _sync(self) -> None:
        """Subscribe while the socket has subscribers, unsubscribe when it has none."""
        async with self._lock:
            active = self._socket.active
            if active and self._subscription is None:
                try:
                    self._subscription = await self._feed.subscribe_stream(self._forward)
                except Exception as exc:
                    _log.warning("stream_feed_subscribe_failed", error=str(exc))
            elif not active and self._subscription is not None:
                subscription, self._subscription = self._subscription, None
                subscription.close()

    async def _forward(self, origin: str, event: StreamEvent) -> None:
        if origin != self._socket.origin:
            await self._socket.publish(event)

    async def aclose(self) -> None:
        """Stop forwarding."""
        for task in list(self._syncing):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            subscription.close()
