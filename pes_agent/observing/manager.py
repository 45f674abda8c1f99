"""Recording typed observations and delivering them to subscribers.

`ObservationManager.record()` stores an observation and hands it to every subscriber whose
filters match. A subscriber may be sync or async; one that raises is logged and skipped — it
never breaks a run or starves the other subscribers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from pes_agent.errors import UsageError
from pes_agent.observing._fanout import Fanout
from pes_agent.observing._filters import name_set
from pes_agent.observing.logs import get_logger
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.storage.base import ObservationFeed, Storage
from pes_agent.threads.ids import check_thread_id

__all__ = [
    "Observation",
    "ObservationCallback",
    "ObservationManager",
    "ObservationType",
]

ObservationCallback = Callable[[Observation], Awaitable[None] | None]

_log = get_logger("pes_agent.observing.manager")

# How many of its own observations' ids a manager remembers to skip them on the store's feed:
# far more than can be recorded in the time one takes to come back through the feed.
_RECENT_IDS = 10_000


def _as_type_set(
    types: Iterable[ObservationType | str] | None, *, subscription: bool
) -> frozenset[ObservationType] | None:
    # A subscription to no type would never fire, so [] is refused there; a query for no
    # type simply finds nothing.
    return name_set(
        types,
        ObservationType,
        what="observation type",
        parameter="types",
        normalize=str.upper,
        allow_empty=not subscription,
    )


class ObservationManager:
    """Store observations in a `Storage` and push them to filtered subscribers."""

    def __init__(self, storage: Storage) -> None:
        """Record into `storage`.

        Args:
            storage: Where the observations are kept; the agent's own store.
        """
        self._storage = storage
        self._subscribers: Fanout[Observation] = Fanout("observations")
        # Ids of what this manager recorded lately: listen() gets those from the store's feed
        # too and skips them, having delivered them already. Not the store's own include_own
        # filter: another agent sharing the store object writes through it as well.
        self._recent_ids: deque[str] = deque(maxlen=_RECENT_IDS)
        self._recent_set: set[str] = set()
        self._listening = 0  # listen() feeds open: only they need the ids remembered
        # A store that writes at once (`InMemoryStorage`, unless a subclass changed how it
        # adds observations): `record_now` stores through it without a coroutine.
        add_now = getattr(storage, "add_observation_now", None)
        kind = type(storage)
        self._add_now: Callable[[Observation], None] | None = (
            add_now
            if add_now is not None
            and getattr(kind, "add_observation", None) is _memory_add()
            and getattr(kind, "add_observation_now", None) is _memory_add_now()
            else None
        )

    async def record(
        self,
        observation: Observation | None = None,
        /,
        **fields: Any,
    ) -> Observation:
        """Store an observation (given whole, or as `Observation` fields) and notify subscribers.

        A store that cannot be written is logged, not raised: the observation log must not
        fail the run it describes, and the subscribers still get the observation.

        Args:
            observation: The observation, whole; leave it out to pass its fields instead.
            **fields: `Observation` fields (`thread_id`, `trace_id`, `type`, `title`,
                `content`, ...), when no `observation` is given.

        Returns:
            The observation as recorded.

        Raises:
            UsageError: Both an observation and fields were given.
        """
        if observation is None:
            observation = Observation(**fields)
        elif fields:
            raise UsageError("pass either an Observation or its fields to record(), not both")
        pending = self.record_soon(observation)
        if pending is not None:
            await pending
        return observation

    def record_soon(self, observation: Observation) -> Awaitable[None] | None:
        """Record `observation` as `record` does, as far as it can without awaiting.

        A store that writes in memory takes it at once, and sync subscribers get it at once.
        Whatever needs awaiting (a store that does I/O, an async subscriber and the ones after
        it) is returned for the caller to await: a run recording 18 observations with a
        tracer subscribed makes no coroutine for them.

        Args:
            observation: The observation, whole.

        Returns:
            None when it is recorded and delivered; else what finishes that, to be awaited.
        """
        if self._listening:
            self._remember(observation.id)
        add_now = self._add_now
        if add_now is None:
            return self._store_and_deliver(observation)
        try:
            add_now(observation)
        except Exception:
            _store_failed(observation)
        subscribers = self._subscribers
        return subscribers.deliver_now(observation) if subscribers.subscribers else None

    async def _store_and_deliver(self, observation: Observation) -> None:
        try:
            await self._storage.add_observation(observation)
        except Exception:
            # An observation log that cannot be written must not fail the run it describes;
            # subscribers still get it, and the failure is logged loudly.
            _store_failed(observation)
        if self._subscribers:
            await self._subscribers.deliver(observation)

    def _remember(self, observation_id: str) -> None:
        if len(self._recent_ids) == self._recent_ids.maxlen:
            self._recent_set.discard(self._recent_ids[0])
        self._recent_ids.append(observation_id)
        self._recent_set.add(observation_id)

    def subscribe(
        self,
        callback: ObservationCallback,
        *,
        types: Iterable[ObservationType | str] | None = None,
        thread_id: str | None = None,
    ) -> Callable[[], None]:
        """Call `callback` for each new observation of `types` on `thread_id` (None: any).

        Callbacks run in order as each observation is recorded, and an async one is awaited
        before the run goes on: a slow subscriber slows the run it watches (hand long work to
        a queue or task of your own). One that raises is logged and skipped.

        Args:
            callback: Called with each `Observation`; sync or async.
            types: One observation type or an iterable of them (members or names in any
                case); None for every type.
            thread_id: Only this thread's observations; None for every thread.

        Returns:
            A function that unsubscribes; calling it twice is harmless.

        Raises:
            UsageError: `callback` is not callable, or `types` has an unknown name or is empty
                (a subscription that could never fire); the message lists the valid types.
        """
        if not callable(callback):
            raise UsageError("subscribe() needs a callable, e.g. subscribe(print)")
        wanted = _as_type_set(types, subscription=True)

        def wants(observation: Observation) -> bool:
            if thread_id is not None and observation.thread_id != thread_id:
                return False
            return wanted is None or observation.type in wanted

        return self._subscribers.add(callback, wants)

    async def listen(
        self,
        callback: ObservationCallback,
        *,
        types: Iterable[ObservationType | str] | None = None,
        thread_id: str | None = None,
    ) -> Callable[[], None]:
        """Like `subscribe`, and also deliver what other processes record in the same store.

        With a store that pushes observations across processes (`PostgresStorage`, through
        LISTEN/NOTIFY) a web server can stream to a UI the runs that worker processes execute;
        with any other store this is the same as `subscribe`.

        Args:
            callback: Called with each `Observation`; sync or async.
            types: One observation type or an iterable of them; None for every type.
            thread_id: Only this thread's observations; None for every thread.

        Returns:
            A function that unsubscribes from both; calling it twice is harmless.

        Raises:
            UsageError: As `subscribe` raises it.
            StorageError: The store's feed could not be listened to.
        """
        # Checked once: `types` may be a one-shot iterator.
        wanted = _as_type_set(types, subscription=True)
        unsubscribe_local = self.subscribe(callback, types=wanted, thread_id=thread_id)
        if not isinstance(self._storage, ObservationFeed):
            return unsubscribe_local
        recent = self._recent_set

        def from_elsewhere(observation: Observation) -> Awaitable[None] | None:
            return None if observation.id in recent else callback(observation)

        self._listening += 1
        try:
            unsubscribe_remote = await self._storage.subscribe_observations(
                from_elsewhere, types=wanted, thread_id=thread_id
            )
        except BaseException:
            self._listening -= 1
            unsubscribe_local()
            raise
        listening = [True]

        def unsubscribe() -> None:
            if listening:
                listening.clear()
                self._listening -= 1
            unsubscribe_local()
            unsubscribe_remote()

        return unsubscribe

    async def get_observations(
        self,
        thread_id: str,
        *,
        types: Iterable[ObservationType | str] | None = None,
        trace_id: str | None = None,
    ) -> list[Observation]:
        """The thread's observations in the order they were recorded, optionally filtered.

        Args:
            thread_id: The thread to read.
            types: One observation type or an iterable of them (members or names in any
                case); None for every type.
            trace_id: Only this run's observations; None for every run.

        Returns:
            The observations, oldest first.

        Raises:
            UsageError: `thread_id` is not a usable thread id, or `types` has an unknown name
                (the message lists the valid ones).
            StorageError: The store could not be read; `transient` says whether trying again
                may help.
        """
        check_thread_id(thread_id)
        wanted = _as_type_set(types, subscription=False)
        return await self._storage.get_observations(
            thread_id, types=sorted(wanted) if wanted is not None else None, trace_id=trace_id
        )


def _memory_add() -> object:
    from pes_agent.storage.memory import InMemoryStorage

    return InMemoryStorage.add_observation


def _memory_add_now() -> object:
    from pes_agent.storage.memory import InMemoryStorage

    return InMemoryStorage.add_observation_now


def _store_failed(observation: Observation) -> None:
    """Log, with the traceback being handled, that `observation` could not be stored."""
    _log.exception(
        "observation_store_failed",
        thread_id=observation.thread_id,
        trace_id=observation.trace_id,
        observation_type=observation.type.value,
    )
