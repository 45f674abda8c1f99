"""`InMemoryStorage`: the default store for library use and tests; gone when the process ends."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from itertools import islice

from pes_agent.errors import StorageError
from pes_agent.observing.streams import StreamEvent
from pes_agent.observing.types import Observation
from pes_agent.storage._codec import dump_observation
from pes_agent.storage._common import (
    TYPE_VALUES,
    LimitOf,
    ObservationRow,
    SavedState,
    SnapshotRows,
    StorageBase,
    TaskRow,
    Turn,
)
from pes_agent.storage._locks import ThreadLockTable
from pes_agent.storage._streams import StreamCallback, StreamDelivery

__all__ = ["InMemoryStorage"]


@dataclass(slots=True)
class _Thread:
    config: str | None = None
    state: SavedState | None = None
    # message id -> body, oldest first: the bodies and the duplicate check in one dict, which
    # (holding only strings) the garbage collector never tracks; a list and a set were two
    # tracked objects more for every thread, from its first observation on.
    messages: dict[str, str] = field(default_factory=dict)
    # trace id -> what that turn saved (None: no state)
    turns: dict[str, SavedState | None] = field(default_factory=dict)
    # (trace id, type, body): plain tuples of strings, which the garbage collector stops
    # tracking, so a long log costs no collection time.
    observations: list[tuple[str, str, str]] = field(default_factory=list)
    paused: dict[str, str] = field(default_factory=dict)  # trace id -> paused run


class InMemoryStorage(StorageBase):
    """Keeps every thread in this process's memory, behind the same contract as the durable
    stores: data is saved as the same JSON (so what cannot be persisted fails here too), every
    read returns a fresh copy, and `lock_thread` serialises runs on one thread within the process.
    Its reads and writes are the `Storage` protocol's, documented there; its stream feed
    (`StreamFeed`) hands the events over in this process.
    """

    def __init__(self) -> None:
        self._threads: dict[str, _Thread] = {}
        self._locks = ThreadLockTable()
        self._turns: dict[str, str] = {}  # thread id -> who holds its turn (`claim_turn`)
        self._streams: list[StreamDelivery] = []
        # task id -> its row (`TaskRecords`), the most lately saved last
        self._tasks: dict[str, TaskRow] = {}

    def __repr__(self) -> str:
        return f"InMemoryStorage(threads={len(self._threads)})"

    def _thread(self, thread_id: str) -> _Thread:
        found = self._threads.get(thread_id)
        if found is None:
            found = self._threads[thread_id] = _Thread()
        return found

    async def _open(self) -> None:
        """Nothing to open."""

    async def aclose(self) -> None:
        """Refuse every later call, like the durable stores; the data stays until it is dropped."""
        self._closed = True
        for delivery in list(self._streams):
            delivery.close()

    async def publish_stream(self, origin: str, events: Sequence[StreamEvent]) -> None:
        """Hand `events` to this store's stream subscribers (`StreamFeed`).

        Args:
            origin: The publishing `StreamSocket`'s origin, handed to the subscribers.
            events: The events, in the order the subscribers get them.
        """
        self._check_open()
        for delivery in self._streams:
            delivery.put(origin, events)

    async def subscribe_stream(self, callback: StreamCallback) -> StreamDelivery:
        """Call `callback(origin, event)` with each event published from now on (`StreamFeed`).

        Args:
            callback: Awaited with `(origin, event)` for each event, one at a time.

        Returns:
            The subscription: `caught_up()` waits for what was published before it, `close()`
            ends it.
        """
        self._check_open()
        delivery = StreamDelivery(callback, sync=_nothing, on_close=self._streams.remove)
        self._streams.append(delivery)
        return delivery

    async def _read_config(self, thread_id: str) -> str | None:
        found = self._threads.get(thread_id)
        return None if found is None else found.config

    async def _write_config(self, thread_id: str, text: str) -> None:
        self._thread(thread_id).config = text

    async def _read_state(self, thread_id: str) -> SavedState | None:
        found = self._threads.get(thread_id)
        return None if found is None else found.state

    async def _write_state(self, thread_id: str, data: str, expected_version: int | None) -> int:
        return self._put_state(thread_id, data, expected_version).version

    def _put_state(self, thread_id: str, data: str, expected_version: int | None) -> SavedState:
        found = self._threads.get(thread_id)
        stored = 0 if found is None or found.state is None else found.state.version
        if expected_version is not None and stored != expected_version:
            raise self._conflict(thread_id, expected_version)
        saved = self._thread(thread_id).state = SavedState(data, stored + 1)
        return saved

    async def _read_messages(self, thread_id: str, limit: int | None) -> list[str]:
        found = self._threads.get(thread_id)
        if found is None:
            return []
        return _newest(found.messages, limit)

    async def _read_snapshot(self, thread_id: str, limit_of: LimitOf) -> SnapshotRows:
        # No await in here: one consistent read within the event loop.
        found = self._threads.get(thread_id)
        if found is None:
            return SnapshotRows([], None, None, [], limit_of(None))
        if found.paused:
            return SnapshotRows.waiting([(thread_id, body) for body in found.paused.values()])
        limit = limit_of(found.config)
        newest = [] if limit == 0 else _newest(found.messages, limit)
        return SnapshotRows([], found.config, found.state, newest, limit)

    async def _write_turn(self, turn: Turn) -> SavedState | None:
        found = self._threads.get(turn.thread_id)
        if found is not None and turn.trace_id in found.turns:
            return found.turns[turn.trace_id]
        # Everything that can fail is checked before the first change.
        seen = found.messages if found is not None else {}
        batch: set[str] = set()
        for message_id in turn.message_ids:
            if message_id in seen or message_id in batch:
                raise StorageError(
                    f"message {message_id!r} is already saved in thread {turn.thread_id!r}: "
                    "each message needs its own message_id; nothing was saved",
                    thread_id=turn.thread_id,
                )
            batch.add(message_id)
        found = found if found is not None else self._thread(turn.thread_id)
        saved = None
        if turn.state is not None:
            saved = self._put_state(turn.thread_id, turn.state, turn.expected_version)
        found.messages.update(zip(turn.message_ids, turn.bodies, strict=True))
        if turn.trace_id is not None:
            found.turns[turn.trace_id] = saved
        return saved

    async def add_observation(self, observation: Observation) -> None:
        """Append an observation to its thread's log.

        The common path writes the stored tuple directly, without a row object: a run records
        one for every step it takes.

        Args:
            observation: The observation; its `thread_id` names the log. A value JSON
                cannot hold is saved as its `repr`.
        """
        self.add_observation_now(observation)

    def add_observation_now(self, observation: Observation) -> None:
        """`add_observation`, done at once: nothing to wait for in memory, so a recorder may
        skip the coroutine (see `ObservationManager.record`).

        Args:
            observation: The observation; its `thread_id` names the log. A value JSON
                cannot hold is saved as its `repr`.

        Raises:
            UsageError: The store was closed.
        """
        if self._closed:
            self._check_open()
        found = self._threads.get(observation.thread_id)
        if found is None:
            found = self._thread(observation.thread_id)
        found.observations.append(
            (observation.trace_id, TYPE_VALUES[observation.type], dump_observation(observation))
        )

    async def _write_observation(self, row: ObservationRow) -> None:
        self._thread(row.thread_id).observations.append((row.trace_id, row.type, row.body))

    async def _read_observations(
        self, thread_id: str, kinds: list[str] | None, trace_id: str | None
    ) -> list[str]:
        found = self._threads.get(thread_id)
        if found is None:
            return []
        wanted = None if kinds is None else frozenset(kinds)
        return [
            body
            for trace, kind, body in found.observations
            if (wanted is None or kind in wanted) and (trace_id is None or trace == trace_id)
        ]

    async def _list_threads(self) -> list[str]:
        return sorted(
            thread_id
            for thread_id, thread in self._threads.items()
            if thread.config is not None
            or thread.state is not None
            or thread.messages
            or thread.observations
        )

    async def _delete_thread(self, thread_id: str) -> None:
        self._threads.pop(thread_id, None)
        for row in [row for row in self._tasks.values() if row.thread_id == thread_id]:
            del self._tasks[row.task_id]

    def _hold(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        return self._locks.hold(thread_id)

    async def _write_paused(self, thread_id: str, trace_id: str, body: str) -> None:
        self._thread(thread_id).paused[trace_id] = body

    async def _read_paused(self, thread_id: str | None) -> list[tuple[str, str]]:
        # Dicts keep insertion order, so each thread's runs come oldest first.
        threads = (
            self._threads.items()
            if thread_id is None
            else [(thread_id, self._threads[thread_id])]
            if thread_id in self._threads
            else []
        )
        return [(owner, body) for owner, thread in threads for body in thread.paused.values()]

    async def _take_paused(self, thread_id: str, trace_id: str) -> str | None:
        # No await between the lookup and the removal: atomic within the event loop.
        found = self._threads.get(thread_id)
        return None if found is None else found.paused.pop(trace_id, None)

    async def _claim_turn(self, thread_id: str, owner: str, breaking: str) -> str | None:
        # No await between the lookup and the write: atomic within the event loop.
        holder = self._turns.get(thread_id)
        if holder is None or holder in (owner, breaking):
            self._turns[thread_id] = holder = owner
        return holder

    async def _release_turn(self, thread_id: str, owner: str) -> None:
        if self._turns.get(thread_id) == owner:
            del self._turns[thread_id]

    async def _write_task(self, row: TaskRow) -> None:
        stored = self._tasks.pop(row.task_id, None)
        self._tasks[row.task_id] = row if stored is None else row._replace(owner=stored.owner)

    async def _read_task(self, task_id: str) -> TaskRow | None:
        return self._tasks.get(task_id)

    async def _read_tasks(self, owner: str | None, thread_id: str | None) -> list[TaskRow]:
        return [
            row
            for row in reversed(self._tasks.values())
            if (owner is None or row.owner == owner)
            and (thread_id is None or row.thread_id == thread_id)
        ]

    async def _delete_task(self, task_id: str) -> None:
        self._tasks.pop(task_id, None)


def _newest(messages: dict[str, str], limit: int | None) -> list[str]:
    """The newest `limit` message bodies (None: all), oldest first."""
    if limit is None or limit >= len(messages):
        return list(messages.values())
    newest = list(islice(reversed(messages.values()), limit))
    newest.reverse()
    return newest


async def _nothing() -> None:
    """Events published in process are queued at once: nothing to bring in."""
