"""The storage protocol behind StateManager, ConversationManager and the observation log."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pes_agent.approvals.models import PausedRun
from pes_agent.config import AgentState, ThreadConfig
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.threads.messages import ConversationMessage

if TYPE_CHECKING:
    from pes_agent.observing.streams import StreamEvent

__all__ = [
    "HistoryLimit",
    "ObservationFeed",
    "Storage",
    "StreamFeed",
    "StreamSubscription",
    "TaskRecord",
    "TaskRecords",
    "ThreadSnapshot",
    "ThreadSnapshots",
    "TurnLeases",
    "load_snapshot",
]

#: How many of the newest messages a run reads, given the thread's config (None when the thread
#: was never configured): a number >= 0, or None for all of them. A run passes its settings'
#: rule (`RunSettings.resolve`'s), so that a store need not know it.
HistoryLimit = Callable[[ThreadConfig | None], int | None]


@runtime_checkable
class Storage(Protocol):
    """Where threads, their history, state and observations live.

    Implementations: `InMemoryStorage`, `SQLiteStorage`, `PostgresStorage`. All methods are
    safe to call concurrently. `lock_thread` serialises runs on one thread (in one process at
    least; durable backends also across processes), and never blocks other threads. After
    `aclose()` every method raises a `UsageError`. A stored row that cannot be read is left
    out of a listing (messages, observations, paused runs) with a warning, and read alone is a
    `StorageError` naming the store, table and thread; `StorageError.transient` says whether
    repeating the call may help. What is saved nests at most 100 levels deep: a deeper array
    or object is saved (and read back) as its JSON text, with a warning.
    """

    async def get_thread_config(self, thread_id: str) -> ThreadConfig | None:
        """Read the config stored for `thread_id`.

        Args:
            thread_id: Whose config to read.

        Returns:
            The config, or None if it was never set.

        Raises:
            StorageError: The store could not be read, or the stored config is damaged.
        """
        ...

    async def set_thread_config(self, thread_id: str, config: ThreadConfig) -> None:
        """Replace the thread's config.

        Args:
            thread_id: The thread to configure.
            config: The new config; its `provider_config` must carry no `api_key`.

        Raises:
            ConfigurationError: `config` carries an API key, which storage never saves; give
                the key to the agent's `ProviderConfig` or its environment variable instead.
            StorageError: The store could not be written.
        """
        ...

    async def get_agent_state(self, thread_id: str) -> AgentState | None:
        """Read the state stored for `thread_id`, with the version a compare-and-set save
        passes back as `expected_version`.

        Args:
            thread_id: Whose state to read.

        Returns:
            The state, or None if none was saved.

        Raises:
            StorageError: The store could not be read, or the stored state is damaged.
        """
        ...

    async def set_agent_state(
        self, thread_id: str, state: AgentState, *, expected_version: int | None = None
    ) -> AgentState:
        """Save `state` as the stored version + 1 and return what was saved (`state.version`
        is not looked at). With `expected_version` (the version read; 0 for none) it is a
        compare-and-set: a `StateConflictError`, and nothing saved, if another save landed.

        Args:
            thread_id: The thread whose state it is.
            state: The state to save; its `data` must be JSON-serialisable.
            expected_version: The version read with `get_agent_state` (0 when there was
                none), or None to save over whatever is stored.

        Returns:
            The saved state, with the version it got.

        Raises:
            StateConflictError: Another save landed since `expected_version` was read: read
                again, apply the change and save with the new version.
            UsageError: `expected_version` is neither None nor an int >= 0.
            StorageError: `state.data` cannot be saved as JSON, or the store could not be
                written.
        """
        ...

    async def add_messages(self, thread_id: str, messages: Sequence[ConversationMessage]) -> None:
        """Append messages to the thread's history, all or none.

        Args:
            thread_id: The thread the messages belong to.
            messages: The messages, oldest first; each with this `thread_id` and a message id
                not stored yet.

        Raises:
            UsageError: A message belongs to another thread.
            StorageError: A message cannot be saved (metadata not JSON-serialisable, a
                message id already stored) or the store could not be written; nothing is.
        """
        ...

    async def get_messages(
        self, thread_id: str, *, limit: int | None = None
    ) -> list[ConversationMessage]:
        """The newest `limit` readable messages (all when None), oldest first.

        Args:
            thread_id: The thread to read.
            limit: How many of the newest messages to return (>= 0); None for all.

        Returns:
            The messages, oldest first; a damaged row is left out with a warning.

        Raises:
            UsageError: `limit` is neither None nor an int >= 0.
            StorageError: The store could not be read.
        """
        ...

    async def commit_turn(
        self,
        thread_id: str,
        messages: Sequence[ConversationMessage],
        state: AgentState | None,
        *,
        trace_id: str | None = None,
        expected_version: int | None = None,
    ) -> AgentState | None:
        """Save a run's messages and (if given) its state atomically: all or nothing; return
        the saved state. A turn whose `trace_id` was committed on this thread before writes
        nothing and returns what that commit saved. `expected_version`: as in
        `set_agent_state`; on a conflict nothing of the turn is saved.

        Args:
            thread_id: The thread of the run.
            messages: The run's new messages, oldest first (as in `add_messages`).
            state: The state to save with them, or None to save messages only.
            trace_id: The run's trace id, so a commit repeated after a timeout or a
                transient error never doubles the turn; None to write unconditionally.
            expected_version: As in `set_agent_state`; only together with a `state`.

        Returns:
            The saved state, or None when no state was given.

        Raises:
            StateConflictError: As in `set_agent_state`.
            UsageError: `expected_version` without a `state`, a bad `expected_version` or
                `trace_id`, or a message of another thread.
            StorageError: A message or the state cannot be saved, or the store could not be
                written; `transient` says whether committing again may help.
        """
        ...

    async def add_observation(self, observation: Observation) -> None:
        """Append an observation to its thread's log.

        The durable stores queue it and write it a moment later (any later read of the
        thread, `commit_turn` or `aclose` sees it); a write that fails is logged, not raised,
        since observations are a log that must not fail the run recording them.

        Args:
            observation: The observation; its `thread_id` names the log. A value JSON
                cannot hold is saved as its `repr`.
        """
        ...

    async def get_observations(
        self,
        thread_id: str,
        *,
        types: Sequence[ObservationType] | None = None,
        trace_id: str | None = None,
    ) -> list[Observation]:
        """Observations of a thread in the order they were recorded.

        Args:
            thread_id: The thread to read.
            types: Only observations of these types; None for all.
            trace_id: Only those of this run; None for every run.

        Returns:
            The observations, oldest first; a damaged row is left out with a warning.

        Raises:
            ValueError: `types` holds a name that is not an `ObservationType`.
            StorageError: The store could not be read.
        """
        ...

    async def save_paused_run(self, run: PausedRun) -> None:
        """Store a run waiting for approval (atomically), replacing one with the same
        thread and trace id.

        Args:
            run: The paused run; its `thread_id` and `trace_id` are its key.

        Raises:
            StorageError: The store could not be written.
        """
        ...

    async def get_paused_runs(self, thread_id: str | None = None) -> list[PausedRun]:
        """The runs waiting for approval on `thread_id` (all threads when None), oldest first.

        Args:
            thread_id: The thread to look at; None for every thread.

        Returns:
            The paused runs, oldest first; a damaged row is left out with a warning.

        Raises:
            StorageError: The store could not be read.
        """
        ...

    async def claim_paused_run(self, thread_id: str, trace_id: str) -> PausedRun | None:
        """Delete a paused run and return it in one atomic step (None when it is not there):
        of two processes claiming one run, exactly one gets it.

        Args:
            thread_id: The thread of the run.
            trace_id: The run's trace id.

        Returns:
            The run, now deleted from the store; None when there is no such run (or another
            claim got it first).

        Raises:
            StorageError: The store could not be written, or the stored run is damaged.
        """
        ...

    async def list_threads(self) -> list[str]:
        """List every thread the store holds anything of.

        Returns:
            The ids of the threads with a config, state, message or observation, sorted.

        Raises:
            StorageError: The store could not be read.
        """
        ...

    async def delete_thread(self, thread_id: str) -> None:
        """Delete everything of a thread (config, state, messages, turns, observations) at once.

        Args:
            thread_id: The thread to delete; one that is not stored is no error.

        Raises:
            StorageError: The store could not be written; nothing was deleted.
        """
        ...

    def lock_thread(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        """Hold `thread_id` for one run: `async with storage.lock_thread(thread_id): ...`.

        Args:
            thread_id: The thread to serialise runs on; other threads are never blocked.

        Returns:
            An async context manager that waits for the thread's lock on entry and releases
            it on exit.

        Raises:
            UsageError: On entry, this task holds the thread's lock already (it is not
                reentrant): do the work inside the existing block.
            StorageError: On entry, a durable store could not take the lock.
        """
        ...

    async def aclose(self) -> None:
        """Release the store's connections and threads; safe to call twice.

        Every later call (but `aclose`) raises a `UsageError`: open a new storage object.
        """
        ...


@dataclass(frozen=True, slots=True)
class ThreadSnapshot:
    """What a run reads of its thread before it plans, read at once (`load_snapshot`).

    `paused` is what `get_paused_runs(thread_id)` returns. While a run waits for approval no
    other run may start on the thread, so nothing else is read: `config` and `state` are None
    and `messages` empty. Otherwise `config`, `state` and `messages` are what
    `get_thread_config`, `get_agent_state` and `get_messages(limit=history_limit(config))` return.
    """

    paused: list[PausedRun]
    config: ThreadConfig | None
    state: AgentState | None
    messages: list[ConversationMessage]


@runtime_checkable
class ThreadSnapshots(Protocol):
    """A store that reads what a run needs of its thread in one go: one consistent read, in one
    call to its database (one DB-thread call in SQLite, one connection in PostgreSQL). Every
    bundled store is one; a `Storage` that is not gets the same from `load_snapshot`, read with
    the separate calls.
    """

    async def load_snapshot(self, thread_id: str, *, history_limit: HistoryLimit) -> ThreadSnapshot:
        """The thread's paused runs; when none waits, also its config, state and newest
        messages, as the separate reads return them (`ThreadSnapshot`).

        Args:
            thread_id: The thread to read.
            history_limit: Given the thread's config (None: never configured), how many of the
                newest messages to read (>= 0; None for all).

        Returns:
            The snapshot; a damaged paused run or message is left out with a warning.

        Raises:
            UsageError: `history_limit` gave neither None nor an int >= 0.
            StorageError: The store could not be read, or the stored config or state is
                damaged (as `get_thread_config` and `get_agent_state` raise it).
        """
        ...


async def load_snapshot(
    storage: Storage, thread_id: str, *, history_limit: HistoryLimit
) -> ThreadSnapshot:
    """`storage.load_snapshot(...)` (`ThreadSnapshots`) when the store has it, else the same read
    with the `Storage` protocol's separate calls: what a run reads before it plans.

    Args:
        storage: The store to read.
        thread_id: The thread to read.
        history_limit: Given the thread's config, how many of the newest messages to read.

    Returns:
        As `ThreadSnapshots.load_snapshot`.

    Raises:
        UsageError: As `ThreadSnapshots.load_snapshot`.
        StorageError: As `ThreadSnapshots.load_snapshot`.
    """
    # Not `isinstance(storage, ThreadSnapshots)`: a protocol check costs microseconds a run.
    own: Callable[..., Awaitable[ThreadSnapshot]] | None = getattr(storage, "load_snapshot", None)
    if own is not None:
        return await own(thread_id, history_limit=history_limit)
    paused = await storage.get_paused_runs(thread_id)
    if paused:
        return ThreadSnapshot(paused, None, None, [])
    return await read_rest_of_snapshot(storage, thread_id, history_limit)


async def read_rest_of_snapshot(
    storage: Storage, thread_id: str, history_limit: HistoryLimit
) -> ThreadSnapshot:
    """The snapshot of a thread where no run waits, read with the separate calls."""
    config = await storage.get_thread_config(thread_id)
    state = await storage.get_agent_state(thread_id)
    limit = history_limit(config)
    messages = [] if limit == 0 else await storage.get_messages(thread_id, limit=limit)
    return ThreadSnapshot([], config, state, messages)


@runtime_checkable
class ObservationFeed(Protocol):
    """A store that pushes observations written by other processes (`PostgresStorage`).

    Optional: check with `isinstance(storage, ObservationFeed)`.
    """

    async def subscribe_observations(
        self,
        callback: Callable[[Observation], Awaitable[None] | None],
        *,
        types: Iterable[ObservationType] | None = None,
        thread_id: str | None = None,
        include_own: bool = True,
    ) -> Callable[[], None]:
        """Call `callback` with each observation written to the store by any process (filtered
        by type and thread) until the returned function is called; `include_own=False` leaves
        out those written through this very storage object."""
        ...


@runtime_checkable
class TurnLeases(Protocol):
    """A store that lends a thread's turn to one holder at a time, by name, across processes:
    what a durable engine whose workflow code may do no I/O (Temporal) takes instead of
    `lock_thread`, in a step of its own. Every bundled store is one (`InMemoryStorage`,
    `SQLiteStorage`, `PostgresStorage`); check with `isinstance(storage, TurnLeases)`.

    A lease is a row, not a connection: it outlives a holder that dies. Whoever claims the turn
    and finds it held by someone known to be gone (its workflow ended) breaks it with
    `breaking=`: of two claimers breaking the same lease, one gets it.
    """

    async def claim_turn(self, thread_id: str, owner: str, *, breaking: str | None = None) -> str:
        """Take `thread_id`'s turn for `owner` if it is free, held by `owner` already (a claim
        repeated after a crash takes it again), or held by `breaking`; who holds it now.

        Args:
            thread_id: The thread whose turn to take.
            owner: The claimer's name (a workflow's id and run id, say): non-empty.
            breaking: A holder known to be gone, whose lease this claim may take over.

        Returns:
            The holder after the claim: `owner` when the turn was taken, else the holder's name.

        Raises:
            UsageError: `owner` (or `breaking`) is not a non-empty str.
            StorageError: The store could not be written.
        """
        ...

    async def release_turn(self, thread_id: str, owner: str) -> None:
        """Let go of `thread_id`'s turn if `owner` holds it (nothing happens otherwise: a
        release repeated after a crash cannot free a turn someone else took since).

        Raises:
            StorageError: The store could not be written.
        """
        ...


@runtime_checkable
class StreamSubscription(Protocol):
    """One subscriber of a `StreamFeed`: its callback gets the events in the order published."""

    async def caught_up(self) -> None:
        """Return once every event published (by any process) before this call has been
        handed to the callback."""
        ...

    def close(self) -> None:
        """Stop delivering; safe to call twice."""
        ...


@runtime_checkable
class StreamFeed(Protocol):
    """A store that carries model stream events (tokens) between processes: what a durable
    engine's worker streams reaches the submitting agent's `StreamSocket` subscribers.

    Ephemeral: tokens are not history. What a subscriber did not get while it listened is
    never delivered later, and the store keeps nothing it must clean up for long (memory:
    handed over in process; SQLite: a small table of recent batches, pruned as it grows;
    PostgreSQL: NOTIFY, nothing stored). Events of one publisher arrive in the order it
    published them. Optional: check with `isinstance(storage, StreamFeed)`.
    """

    async def publish_stream(self, origin: str, events: Sequence[StreamEvent]) -> None:
        """Hand `events` to every subscriber of the store, in order, tagged with `origin` (the
        publishing `StreamSocket`'s, so that it can leave out its own events).

        Raises:
            StorageError: The store could not be written (the events are lost: tokens only).
        """
        ...

    async def subscribe_stream(
        self, callback: Callable[[str, StreamEvent], Awaitable[None]]
    ) -> StreamSubscription:
        """Call `callback(origin, event)` with each event published from now on, by any
        process, one at a time in the order published, until the subscription is closed.

        Raises:
            StorageError: The store's feed could not be listened to.
        """
        ...


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A protocol's task as a store keeps it (an A2A task, `pes_agent.interop.a2a`): its id,
    the thread it runs on, the user owning it ("" for an unscoped caller's) and its JSON
    document, which the store keeps as it is given."""

    task_id: str
    thread_id: str
    owner: str
    body: dict[str, Any]


@runtime_checkable
class TaskRecords(Protocol):
    """A store keeping protocol tasks beside the threads they run on (the A2A server's task
    store): every bundled store is one (`InMemoryStorage`, `SQLiteStorage`,
    `PostgresStorage`); check with `isinstance(storage, TaskRecords)`. Deleting a thread
    deletes its tasks. A stored task that cannot be read is left out of a listing with a
    warning, and read alone is a `StorageError` naming the store, table and thread.
    """

    async def save_task_record(self, record: TaskRecord) -> None:
        """Store `record`, replacing the task stored under its id; the owner stays the one it
        was first saved with.

        Raises:
            UsageError: The task id or thread id is empty, or the body is not a JSON object.
            StorageError: The store could not be written.
        """
        ...

    async def get_task_record(self, task_id: str) -> TaskRecord | None:
        """The task stored under `task_id`, or None.

        Raises:
            StorageError: The store could not be read, or the stored task is damaged.
        """
        ...

    async def list_task_records(
        self, *, owner: str | None = None, thread_id: str | None = None
    ) -> list[TaskRecord]:
        """The tasks of `owner` (every owner's when None) on `thread_id` (every thread's when
        None), the most lately saved first.

        Raises:
            StorageError: The store could not be read.
        """
        ...

    async def delete_task_record(self, task_id: str) -> None:
        """Delete the task stored under `task_id` (nothing happens when there is none).

        Raises:
            StorageError: The store could not be written.
        """
        ...
