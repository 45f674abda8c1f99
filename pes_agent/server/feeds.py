"""Event streams made of stored and live observations, which any worker process can serve.

- `ThreadFeed` (`GET /v1/threads/{id}/events`): everything recorded on a thread, from any
  worker. An observation's event carries the observation id as its SSE `id`, so a client that
  reconnects with `Last-Event-ID` first gets the observations stored after that one, then the
  live ones, and misses nothing. Tokens, thinking text and model stream events are not stored:
  they come live only, from runs executing in the serving process, and carry no id.
- `SharedRunFeed` (`GET /v1/runs/{trace_id}/events` on a worker that does not execute the
  run): the run's observations stored so far, then the live ones from the cross-process feed
  (PostgreSQL; a store without one, SQLite, is read again each second), ending with an `end`
  event when the run's last observation arrives or its worker's record (on an agent with a
  durable engine: the engine) says it ended. The
  executing worker's own stream has more (tokens, the `final` response).

Both subscribe before they read what is stored and skip what they already sent, so nothing
recorded in between is lost or sent twice. A client too slow to take the events is
disconnected rather than silently losing observations: it resumes with `Last-Event-ID`.

Neither ends by itself while the thread or run goes on, and an ASGI server stopping waits for
every response to end: a process shutting down calls `end_feeds()` so that its streams end
(their clients reconnect to another worker with `Last-Event-ID`) instead of holding it up.
`pes-agent serve` does so on the signals that stop uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pes_agent.core import AgentCore
from pes_agent.observing.manager import ObservationManager
from pes_agent.observing.streams import StreamEvent
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.server.runs import event_for_observation, event_for_stream, yield_to_loop
from pes_agent.server.workers import SharedRun
from pes_agent.storage.base import ObservationFeed

__all__ = ["SharedRunFeed", "ThreadFeed", "end_feeds", "ending_status", "sse"]

_QUEUE_SIZE = 10_000
# A Last-Event-ID not found among the stored observations may name one another worker has
# just recorded and not yet committed: look again for a moment before giving up on it.
_CURSOR_RETRIES_S = (0.05, 0.1, 0.2, 0.4)
# How often a run followed from another worker checks that worker's record for its end, and
# how long it then waits for the run's last observations to be readable.
_END_CHECK_S = 1.0
_END_GRACE_S = (0.1, 0.2, 0.4)
# The last words of a stream ended by `end_feeds` (a comment: no client takes it for an event).
_SHUTTING_DOWN = b": the server is shutting down: reconnect with Last-Event-ID\n\n"


def sse(name: str, data: dict[str, Any], event_id: str | None = None) -> bytes:
    """One server-sent event; an id that cannot be sent on one line is left out."""
    head = ""
    if event_id and not any(c in event_id for c in "\r\n\0"):
        head = f"id: {event_id}\n"
    return f"{head}event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _observation_event(observation: Observation) -> bytes:
    return sse(*event_for_observation(observation), event_id=observation.id)


def ending_status(observation: Observation) -> str | None:
    """The status a run ended with if `observation` is its last, else None."""
    if observation.type is ObservationType.FINAL_RESPONSE:
        return str(observation.content.get("status", "success"))
    if observation.type is ObservationType.ERROR:
        phase = observation.content.get("phase")
        if phase == "retrieval":
            return None  # a failed search: the run goes on without passages
        return "cancelled" if phase == "cancelled" else "error"
    return None


async def _listen(
    agent: AgentCore, callback: Callable[[Observation], None], thread_id: str
) -> Callable[[], None]:
    observations = agent.observations
    # listen() also delivers what other processes record (PostgreSQL); a custom observation
    # manager without it still gives this process's observations.
    if isinstance(observations, ObservationManager):
        return await observations.listen(callback, thread_id=thread_id)
    return observations.subscribe(callback, thread_id=thread_id)


class _Subscription:
    """Observations (and optionally stream events) of one thread, queued for one client."""

    def __init__(self) -> None:
        # None in the queue wakes a reader waiting when the feed is `end`ed.
        self.queue: asyncio.Queue[Observation | StreamEvent | None] = asyncio.Queue(
            maxsize=_QUEUE_SIZE
        )
        self.overflowed = False
        self.ended = False
        self._unsubscribe: list[Callable[[], None]] = []
        _open.add(self)

    @property
    def live(self) -> bool:
        """Whether the stream goes on: neither overflowed (the client resumes from the store)
        nor ended by `end_feeds`."""
        return not (self.overflowed or self.ended)

    def end(self) -> None:
        """Make the stream end (the server shuts down)."""
        self.ended = True
        with contextlib.suppress(asyncio.QueueFull):  # a full queue has no reader waiting
            self.queue.put_nowait(None)

    def put(self, item: Observation | StreamEvent) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            # A lost token is only text; a lost observation ends the stream (see `overflowed`).
            if isinstance(item, Observation):
                self.overflowed = True

    async def open(
        self, agent: AgentCore, thread_id: str, *, trace_id: str | None, tokens: bool
    ) -> None:
        def on_observation(observation: Observation) -> None:
            if trace_id is None or observation.trace_id == trace_id:
                self.put(observation)

        self._unsubscribe.append(await _listen(agent, on_observation, thread_id))
        if tokens:
            self._unsubscribe.append(agent.stream.subscribe(self.put, thread_id=thread_id))

    async def next(self, timeout_s: float) -> Observation | StreamEvent | None:
        """The next item, or None after `timeout_s` without one or once the feed `ended`."""
        if self.ended:
            return None
        try:
            return await asyncio.wait_for(self.queue.get(), timeout_s)
        except TimeoutError:
            return None

    def close(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()
        _open.discard(self)


# The subscriptions of the feeds open in this process (weak: a feed never closed is no leak).
_open: weakref.WeakSet[_Subscription] = weakref.WeakSet()


def end_feeds() -> int:
    """End every thread feed and followed run streaming in this process; returns how many.

    For a server shutting down: each stream ends at once, and its client reconnects (to
    another worker) with `Last-Event-ID`. Call it on the event loop serving them.
    """
    ending = list(_open)
    for subscription in ending:
        subscription.end()
    return len(ending)


async def _stored_after(
    agent: AgentCore, thread_id: str, last_event_id: str | None, *, trace_id: str | None = None
) -> tuple[list[Observation], int | None]:
    """The stored observations, and the position of `last_event_id` among them (None when
    it is not there, even after waiting a moment for it to be committed)."""
    stored = await agent.observations.get_observations(thread_id, trace_id=trace_id)
    if last_event_id is None:
        return stored, None
    for delay in (*_CURSOR_RETRIES_S, None):
        for position, observation in enumerate(stored):
            if observation.id == last_event_id:
                return stored, position
        if delay is None:
            break
        await asyncio.sleep(delay)
        stored = await agent.observations.get_observations(thread_id, trace_id=trace_id)
    return stored, None


class ThreadFeed:
    """One client's feed of a thread; `open` it inside the request, stream `events()`."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self._subscription = _Subscription()
        self._replay: list[Observation] = []
        self._known: set[str] = set()
        self._start_id: str | None = None
        self._unknown: str | None = None

    @classmethod
    async def open(cls, agent: AgentCore, thread_id: str, last_event_id: str | None) -> ThreadFeed:
        """Subscribe (live, from every worker), then read what is stored, so that nothing
        recorded meanwhile is missed; with `last_event_id`, what came after it is replayed."""
        feed = cls(thread_id)
        try:
            await feed._subscription.open(agent, thread_id, trace_id=None, tokens=True)
            stored, position = await _stored_after(agent, thread_id, last_event_id)
        except BaseException:
            feed.close()
            raise
        feed._known = {observation.id for observation in stored}
        if position is not None:
            feed._replay = stored[position + 1 :]
            feed._start_id = last_event_id
        else:
            feed._unknown = last_event_id
            feed._start_id = stored[-1].id if stored else None
        return feed

    async def events(self, *, heartbeat_s: float) -> AsyncIterator[bytes]:
        """`subscribed` (its id: where a reconnect resumes), a `gap` if `Last-Event-ID` named
        no observation of the thread, the observations replayed, then the live events."""
        try:
            yield sse(
                "subscribed",
                {
                    "thread_id": self.thread_id,
                    # The observation the feed goes on after: Last-Event-ID's, or the
                    # thread's last when it was not given (or named none).
                    "after": self._start_id,
                    "replayed": len(self._replay),
                },
                event_id=self._start_id,
            )
            if self._unknown is not None:
                yield sse(
                    "gap",
                    {
                        "last_event_id": self._unknown,
                        "message": "Last-Event-ID names no stored observation of this "
                        "thread: nothing was replayed (GET .../observations lists them)",
                    },
                )
            for observation in self._replay:
                yield _observation_event(observation)
                await yield_to_loop()
            self._replay = []
            while self._subscription.live:
                item = await self._subscription.next(heartbeat_s)
                if self._subscription.ended:
                    yield _SHUTTING_DOWN
                elif item is None:
                    yield b": ping\n\n"
                elif isinstance(item, StreamEvent):
                    yield sse(*event_for_stream(item))
                elif item.id not in self._known:
                    yield _observation_event(item)
        finally:
            self.close()

    def close(self) -> None:
        """Unsubscribe (also done when `events()` ends)."""
        self._subscription.close()


class SharedRunFeed:
    """A run another worker executes, followed from here through the store."""

    def __init__(self, run: SharedRun, find: Callable[[str], Awaitable[SharedRun | None]]) -> None:
        self.run = run
        self._find = find
        self._subscription = _Subscription()
        self._replay: list[Observation] = []
        self._sent: set[str] = set()
        self._unknown: str | None = None

    @classmethod
    async def open(
        cls,
        agent: AgentCore,
        run: SharedRun,
        find: Callable[[str], Awaitable[SharedRun | None]],
        last_event_id: str | None,
    ) -> SharedRunFeed:
        """Subscribe to the run's observations, then read those stored; `find` says later
        whether the run ended (`ApiState.find_run`). A `last_event_id`
        naming one of them resumes after it; any other value (such as an event number of the
        executing worker's own stream, which only that worker can place) replays the run from
        its start, after a `gap` event saying so."""
        feed = cls(run, find)
        try:
            await feed._subscription.open(agent, run.thread_id, trace_id=run.trace_id, tokens=False)
            stored, position = await _stored_after(
                agent, run.thread_id, last_event_id, trace_id=run.trace_id
            )
        except BaseException:
            feed.close()
            raise
        start = 0 if position is None else position + 1
        feed._sent = {observation.id for observation in stored[:start]}
        feed._replay = stored[start:]
        feed._unknown = last_event_id if position is None else None
        return feed

    async def events(self, agent: AgentCore, *, heartbeat_s: float) -> AsyncIterator[bytes]:
        """`run`, a `gap` if `Last-Event-ID` named no observation of the run, the run's
        observations, then `end` with the status it ended with."""
        run = self.run
        try:
            yield sse(
                "run",
                {
                    "thread_id": run.thread_id,
                    "trace_id": run.trace_id,
                    "worker_id": run.worker_id,
                    "status": run.status,
                },
            )
            if self._unknown is not None:
                yield sse(
                    "gap",
                    {
                        "last_event_id": self._unknown,
                        "message": "Last-Event-ID names no observation of this run (an event "
                        "number counts in the stream of the worker executing it only): the "
                        "run's observations follow from its first, some perhaps seen before",
                    },
                )
            for observation in self._replay:
                self._sent.add(observation.id)
                yield _observation_event(observation)
                status = ending_status(observation)
                if status is not None:
                    yield self._end(status)
                    return
                await yield_to_loop()
            self._replay = []
            # A store without a cross-process feed (SQLite) is read again instead.
            pushes = isinstance(agent.storage, ObservationFeed)
            status = None if run.running else run.status
            idle_s = 0.0
            while status is None and self._subscription.live:
                item = await self._subscription.next(_END_CHECK_S)
                if self._subscription.ended:
                    yield _SHUTTING_DOWN
                    return
                if isinstance(item, Observation):
                    idle_s = 0.0
                    if item.id in self._sent:
                        continue
                    self._sent.add(item.id)
                    yield _observation_event(item)
                    status = ending_status(item)
                    if status is not None:
                        yield self._end(status)
                        return
                    continue
                idle_s += _END_CHECK_S
                if idle_s >= heartbeat_s:
                    idle_s = 0.0
                    yield b": ping\n\n"
                if not pushes:
                    for observation in await self._unsent(agent):
                        yield _observation_event(observation)
                        status = ending_status(observation)
                        if status is not None:
                            yield self._end(status)
                            return
                found = await self._find(run.trace_id)
                if found is None or not found.running:
                    status = found.status if found is not None else "unknown"
            if status is None:
                return  # overflowed: the client resumes with Last-Event-ID
            # The worker says the run ended: its last observations may still be on the way.
            for delay in (*_END_GRACE_S, None):
                fresh = await self._unsent(agent)
                for observation in fresh:
                    yield _observation_event(observation)
                if delay is None or any(ending_status(o) is not None for o in fresh):
                    break
                await asyncio.sleep(delay)
            yield self._end(status)
        finally:
            self.close()

    async def _unsent(self, agent: AgentCore) -> list[Observation]:
        """The run's stored observations not sent yet (noted as sent)."""
        stored = await agent.observations.get_observations(
            self.run.thread_id, trace_id=self.run.trace_id
        )
        fresh = [observation for observation in stored if observation.id not in self._sent]
        self._sent.update(observation.id for observation in fresh)
        return fresh

    def _end(self, status: str) -> bytes:
        return sse(
            "end",
            {"thread_id": self.run.thread_id, "trace_id": self.run.trace_id, "status": status},
        )

    def close(self) -> None:
        """Unsubscribe (also done when `events()` ends)."""
        self._subscription.close()
