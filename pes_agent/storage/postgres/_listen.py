"""The observation feed: LISTEN on one connection while anyone subscribes, a bounded queue per
subscriber.

Every observation insert is followed by a `NOTIFY` carrying the observation (or, when it is too
big for a payload, its row's `seq`). While at least one subscriber is registered, one dedicated
connection LISTENs; the last unsubscribe closes it. Each subscriber has its own task and queue,
so a slow one never holds up the others; its queue is bounded, and when it is full the oldest
waiting observation is dropped, counted, and reported in a warning when the subscriber next
gets one. A lost connection is re-opened with backoff (what was committed meanwhile is not
delivered, and a warning says so).

A process delivers its own observations to its subscribers at once, and other processes' ones
when their NOTIFY arrives. So that a thread's feed keeps the thread's order when its runs move
between processes, a run that takes a thread first waits on `caught_up`: a marker of its own
goes through the channel, and once every subscriber has been handed what arrived before it,
everything the thread's previous holder committed has been delivered.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pes_agent.observing.logs import get_logger
from pes_agent.observing.types import Observation
from pes_agent.storage.postgres._pool import Connector

__all__ = ["FeedItem", "ObservationListener"]

_log = get_logger("pes_agent.storage")

T = TypeVar("T")

# How long a run taking a thread waits for the feed to catch up before it goes on regardless
# (a subscriber stuck in its callback must not stop the runs of the process).
_CATCH_UP_S = 5.0

# Notifications waiting to be decoded and handed to the subscribers' queues. That is quick, so
# only a burst, or a stalled fetch of observations too big for their payload, fills it.
_INBOX_SIZE = 10_000


@dataclass(frozen=True, slots=True)
class FeedItem:
    """An observation from the feed and the storage object (`origin`) that wrote it."""

    origin: str
    observation: Observation


class _Barrier:
    """A place in the subscribers' queues: `reached` is done once every queue it was put in
    has been served up to it (or dropped it, or closed)."""

    __slots__ = ("_left", "reached")

    def __init__(self, reached: asyncio.Future[None]) -> None:
        self.reached = reached
        self._left = 1  # the dispatcher's own hold, let go once the barrier is in every queue

    def enter(self) -> None:
        self._left += 1

    def leave(self) -> None:
        self._left -= 1
        if self._left == 0 and not self.reached.done():
            self.reached.set_result(None)


class _DropOldest(Generic[T]):
    """A queue of at most `size` items that drops its oldest item to take a new one."""

    __slots__ = ("_closed", "_items", "_ready", "_size", "dropped", "unreported")

    def __init__(self, size: int) -> None:
        self._items: deque[T] = deque()
        self._size = size
        self._ready = asyncio.Event()
        self._closed = False
        self.dropped = 0
        self.unreported = 0

    def put(self, item: T) -> None:
        if len(self._items) >= self._size:
            oldest = self._items.popleft()
            if isinstance(oldest, _Barrier):
                oldest.leave()  # nothing before it is left to wait for
            else:
                self.dropped += 1
                self.unreported += 1
        self._items.append(item)
        self._ready.set()

    async def get(self) -> T | None:
        """The oldest item; None once the queue is closed."""
        while not self._items and not self._closed:
            self._ready.clear()
            await self._ready.wait()
        return None if self._closed else self._items.popleft()

    def close(self) -> None:
        self._closed = True
        for item in self._items:
            if isinstance(item, _Barrier):
                item.leave()
        self._items.clear()
        self._ready.set()


@dataclass(eq=False, slots=True)
class _Subscriber:
    callback: Callable[[Observation], Awaitable[None] | None]
    wants: Callable[[FeedItem], bool]
    queue: _DropOldest[FeedItem | _Barrier]


class ObservationListener:
    """Subscribers of one channel, fed by a LISTEN connection that is open only while needed.

    `fetch_body(seq)` reads an observation too big for its NOTIFY payload (None if it is gone).
    """

    def __init__(
        self,
        connector: Connector,
        channel: str,
        *,
        queue_size: int,
        fetch_body: Callable[[int], Awaitable[str | None]],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self._connector = connector
        self._channel = channel
        self._queue_size = queue_size
        self._fetch_body = fetch_body
        self._spawn = spawn
        self._subscribers: list[_Subscriber] = []
        self._conn: Any = None
        self._mutex = asyncio.Lock()
        self._inbox: _DropOldest[str] = _DropOldest(_INBOX_SIZE)
        self._dispatcher: asyncio.Task[None] | None = None
        # The subscribers' tasks, including those of removed subscribers still finishing.
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        # The markers sent by `caught_up`, by id, until they come back through the channel.
        self._barriers: dict[str, _Barrier] = {}

    @property
    def listening(self) -> bool:
        """Whether anyone in this process subscribes (then `caught_up` has work to do)."""
        return bool(self._subscribers)

    async def caught_up(self) -> None:
        """Wait until every subscriber has been handed each observation committed before now.

        A marker goes through the channel: NOTIFYs arrive in commit order, so once it has come
        back and every subscriber has served its queue up to it, nothing committed earlier is
        still on its way. Returns at once when no one subscribes; gives up after a few
        seconds, with a warning, rather than hold up a run for a stuck subscriber.
        """
        if not self._subscribers:
            return
        marker = uuid.uuid4().hex
        barrier = _Barrier(asyncio.get_running_loop().create_future())
        self._barriers[marker] = barrier
        try:
            await self._listen()  # a lost connection is opened again
            await self._connector.execute(
                "SELECT pg_notify($1, $2)", self._channel, json.dumps({"marker": marker})
            )
            await asyncio.wait_for(asyncio.shield(barrier.reached), _CATCH_UP_S)
        except TimeoutError:
            _log.warning(
                "observation_feed_behind",
                url=self._connector.safe_url,
                waited_s=_CATCH_UP_S,
                note="a subscriber is slow or the feed is lagging: a thread's observations "
                "may reach this process's subscribers out of order",
            )
        finally:
            self._barriers.pop(marker, None)

    async def subscribe(
        self,
        callback: Callable[[Observation], Awaitable[None] | None],
        wants: Callable[[FeedItem], bool],
    ) -> Callable[[], None]:
        """Deliver to `callback` each item it `wants` until the returned function is called."""
        subscriber = _Subscriber(callback, wants, _DropOldest(self._queue_size))
        task = asyncio.create_task(self._serve(subscriber))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._subscribers.append(subscriber)
        try:
            await self._listen()
        except BaseException:
            self._remove(subscriber)
            raise
        return lambda: self._remove(subscriber)

    def _remove(self, subscriber: _Subscriber) -> None:
        if subscriber not in self._subscribers:
            return
        self._subscribers.remove(subscriber)
        # The subscriber's task finishes the observation in hand, then ends.
        subscriber.queue.close()
        if not self._subscribers:
            self._release_soon()

    def _release_soon(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no running event loop: nothing can be awaited any more
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.terminate()
            return
        self._spawn(self._release_if_unused())

    async def _release_if_unused(self) -> None:
        async with self._mutex:
            if self._subscribers:
                return  # someone subscribed again meanwhile
            conn, self._conn = self._conn, None
            dispatcher, self._dispatcher = self._dispatcher, None
            if dispatcher is not None:
                dispatcher.cancel()
            self._inbox = _DropOldest(_INBOX_SIZE)
            if conn is not None and not conn.is_closed():
                await conn.close()

    async def _listen(self) -> None:
        async with self._mutex:
            if self._conn is not None and not self._conn.is_closed():
                return
            await self._connector.pool()  # the schema (and so the channel's table) exists
            if self._dispatcher is None or self._dispatcher.done():
                self._dispatcher = asyncio.create_task(self._dispatch())
            conn = await self._connector.connect()
            try:
                await conn.add_listener(self._channel, self._on_notify)
            except BaseException:
                await conn.close()
                raise
            conn.add_termination_listener(self._on_lost)
            self._conn = conn

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        if self._subscribers:
            self._inbox.put(payload)

    def _on_lost(self, conn: Any) -> None:
        if self._closed or conn is not self._conn or not self._subscribers:
            return
        _log.warning("observation_feed_disconnected", url=self._connector.safe_url)
        self._spawn(self._relisten())

    async def _relisten(self) -> None:
        delay = 0.1
        while not self._closed and self._subscribers:
            try:
                await self._listen()
            except Exception as exc:
                _log.warning(
                    "observation_feed_reconnect_failed",
                    url=self._connector.safe_url,
                    error=str(exc),
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            else:
                _log.warning(
                    "observation_feed_reconnected",
                    url=self._connector.safe_url,
                    note="observations committed while disconnected were not delivered",
                )
                return

    async def _dispatch(self) -> None:
        while True:
            inbox = self._inbox
            payload = await inbox.get()
            if payload is None:
                return
            self._report_drops(inbox, "listener")
            if payload.startswith('{"marker"'):
                self._pass_barrier(payload)
                continue
            try:
                item = await self._decode(payload)
            except Exception:
                _log.exception("observation_feed_bad_payload", url=self._connector.safe_url)
                continue
            if item is None:
                continue
            for subscriber in tuple(self._subscribers):
                if subscriber.wants(item):
                    subscriber.queue.put(item)
            # Let the subscribers' tasks take it before the next one: a burst of notifications
            # must not fill the queue of a subscriber that keeps up, only of one that is slow.
            await asyncio.sleep(0)

    def _pass_barrier(self, payload: str) -> None:
        """A marker came back: put its barrier behind what every subscriber has queued (a
        marker of another process's listener is not ours to wait on)."""
        try:
            barrier = self._barriers.get(str(json.loads(payload)["marker"]))
        except (ValueError, KeyError, TypeError):
            _log.warning("observation_feed_bad_payload", url=self._connector.safe_url)
            return
        if barrier is None:
            return
        for subscriber in tuple(self._subscribers):
            barrier.enter()
            subscriber.queue.put(barrier)
        barrier.leave()

    async def _decode(self, payload: str) -> FeedItem | None:
        message = json.loads(payload)
        origin = str(message["origin"])
        if "observation" in message:
            return FeedItem(origin, Observation.model_validate(message["observation"]))
        seq = int(message["seq"])
        body = await self._fetch_body(seq)
        if body is None:
            return None  # deleted before we could read it
        try:
            return FeedItem(origin, Observation.model_validate_json(body))
        except ValueError as exc:  # a row damaged since: left out, as listings leave it
            _log.warning(
                "storage_row_skipped",
                url=self._connector.safe_url,
                table="observations",
                seq=seq,
                reason=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}",
            )
            return None

    async def _serve(self, subscriber: _Subscriber) -> None:
        while (item := await subscriber.queue.get()) is not None:
            if isinstance(item, _Barrier):
                item.leave()  # everything queued before it has been delivered
                continue
            self._report_drops(subscriber.queue, "subscriber")
            try:
                outcome = subscriber.callback(item.observation)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                _log.exception("subscriber_failed", stream="postgres-observations")

    def _report_drops(self, queue: _DropOldest[Any], where: str) -> None:
        if queue.unreported:
            _log.warning(
                "observation_feed_dropped",
                url=self._connector.safe_url,
                queue=where,
                dropped=queue.unreported,
                dropped_total=queue.dropped,
                queue_size=self._queue_size,
                note="the oldest waiting observations were dropped: a subscriber is too slow",
            )
            queue.unreported = 0

    async def aclose(self) -> None:
        """Stop every subscriber and close the LISTEN connection."""
        self._closed = True
        self._subscribers = []
        tasks = [*self._tasks]
        if self._dispatcher is not None:
            tasks.append(self._dispatcher)
        for task in tasks:
            task.cancel()
        for barrier in self._barriers.values():
            if not barrier.reached.done():
                barrier.reached.set_result(None)  # nothing more will come: no one waits
        await asyncio.gather(*tasks, return_exceptions=True)
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            await conn.close()
