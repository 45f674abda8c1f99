"""What the storage backends share: the public `Storage` methods, written once around each
backend's own reads and writes, the `commit_turn` prelude and the observation batch.

`StorageBase` checks arguments, refuses every call once the store is closed, turns models into
the JSON text of `_codec` and back (a damaged row becomes a `StorageError` naming the store,
table and thread; a listing leaves it out with a warning), and leaves to a backend only the
storing of text: its `_read_*`, `_write_*`, `_list_threads`, `_delete_thread`, `_hold`,
`_open` and `aclose`.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Generic, NamedTuple, Self, TypeVar

from pes_agent._closing import ClosedOnExit
from pes_agent.approvals.models import PausedRun
from pes_agent.config import AgentState, ThreadConfig
from pes_agent.errors import StateConflictError, StorageError, UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.storage import _codec
from pes_agent.storage.base import (
    HistoryLimit,
    TaskRecord,
    ThreadSnapshot,
    read_rest_of_snapshot,
)
from pes_agent.threads.messages import ConversationMessage

_log = get_logger("pes_agent.storage")

_R = TypeVar("_R")

__all__ = [
    "THREAD_TABLES",
    "TYPE_VALUES",
    "LimitOf",
    "ObservationRow",
    "Pending",
    "PendingObservations",
    "SavedState",
    "SnapshotRows",
    "StorageBase",
    "TaskRow",
    "Turn",
    "check_expected_version",
    "prepare_turn",
]

#: The tables holding a thread's rows (all keyed by `thread_id`), which deleting it empties.
THREAD_TABLES = (
    "thread_configs",
    "agent_states",
    "messages",
    "turns",
    "observations",
    "paused_runs",
    "a2a_tasks",
)


class TaskRow(NamedTuple):
    """A protocol task as every backend stores it: the columns it is found by, and its JSON."""

    task_id: str
    thread_id: str
    owner: str
    body: str


class ObservationRow(NamedTuple):
    """An observation as every backend stores it: the columns it is found by, and its JSON."""

    id: str
    thread_id: str
    trace_id: str
    type: str
    body: str

    @classmethod
    def of(cls, observation: Observation) -> ObservationRow:
        return cls(
            observation.id,
            observation.thread_id,
            observation.trace_id,
            TYPE_VALUES[observation.type],
            _codec.dump_observation(observation),
        )


# ObservationType member -> its value, as a plain str (an enum's `.value` is a slow property).
TYPE_VALUES: dict[ObservationType, str] = {kind: kind.value for kind in ObservationType}


class SavedState(NamedTuple):
    """A state as a backend saved it: its JSON data and the version it got."""

    data: str
    version: int


class SnapshotRows(NamedTuple):
    """A thread's rows as a backend read them for `load_snapshot`, in one consistent read.

    `paused` holds the paused runs' (thread id, body); when there are any, the backend stops
    there (`waiting`): a run cannot start, so the rest is not needed. Otherwise `config` and
    `state` are the stored ones and `messages` the bodies of the newest `limit` messages.
    """

    paused: list[tuple[str, str]]
    config: str | None
    state: SavedState | None
    messages: list[str]
    limit: int | None

    @classmethod
    def waiting(cls, paused: list[tuple[str, str]]) -> SnapshotRows:
        """The rows of a thread where runs wait for approval: those runs, nothing else."""
        return cls(paused, None, None, [], 0)


#: A backend's `_read_snapshot` is given this: the config's text (None: none stored) to the
#: number of messages to read; it decodes the config, so a damaged one raises its StorageError.
LimitOf = Callable[[str | None], int | None]


@dataclass(frozen=True, slots=True)
class Turn:
    """A `commit_turn` checked and encoded, ready for a backend to write in one transaction.

    With a `trace_id`, the backend records the turn under it (in the same transaction) and a
    later turn with the same `trace_id` writes nothing and gets back what this one saved.
    With an `expected_version`, the state is saved only if the stored one is at that version
    (0: none stored); otherwise nothing of the turn is.
    """

    thread_id: str
    message_ids: list[str]
    bodies: list[str]
    state: str | None
    trace_id: str | None
    expected_version: int | None


def check_expected_version(expected_version: int | None) -> int | None:
    """`expected_version`, checked: None (save whatever is stored) or a version >= 0."""
    if expected_version is None:
        return None
    if (
        isinstance(expected_version, bool)
        or not isinstance(expected_version, int)
        or expected_version < 0
    ):
        raise UsageError(
            "expected_version must be None (save over whatever is stored) or the version "
            f"read with get_agent_state (0 when there was none), not {expected_version!r}"
        )
    return expected_version


def prepare_turn(
    thread_id: str,
    messages: Sequence[ConversationMessage],
    state: AgentState | None,
    *,
    trace_id: str | None,
    expected_version: int | None,
) -> Turn | None:
    """The turn encoded before anything is written (so a message or state that cannot be saved
    fails it whole), or None when there is nothing to write."""
    expected_version = check_expected_version(expected_version)
    if expected_version is not None and state is None:
        raise UsageError("expected_version applies to the state: pass it with a state, or drop it")
    if trace_id is not None and (not isinstance(trace_id, str) or not trace_id):
        raise UsageError(f"trace_id must be a non-empty string or None, not {trace_id!r}")
    bodies = [_codec.dump_message(m, thread_id) for m in messages]
    data = _codec.dump_state_data(state, thread_id) if state is not None else None
    if not bodies and data is None:
        return None
    return Turn(
        thread_id=thread_id,
        message_ids=[m.message_id for m in messages],
        bodies=bodies,
        state=data,
        trace_id=trace_id,
        expected_version=expected_version,
    )


class Pending(Generic[_R]):
    """Rows (observations, turns) waiting to be written, for one writer to take in batches.

    A run records a dozen observations or more, and a commit (or round trip) for each would
    cost more than the rest of the run: `add` queues a row and says when no writer is on its
    way yet, so the caller starts one; the writer `take`s batches until one comes back empty,
    which frees the place for the next writer. Safe from any thread.
    """

    __slots__ = ("_lock", "_rows", "_writing")

    def __init__(self) -> None:
        self._rows: list[_R] = []
        self._lock = threading.Lock()
        self._writing = False

    def add(self, row: _R) -> bool:
        """Queue `row`; True when the caller must start a writer (none is on its way)."""
        with self._lock:
            self._rows.append(row)
            if self._writing:
                return False
            self._writing = True
            return True

    def take(self) -> list[_R]:
        """Everything queued, oldest first; an empty batch ends the writer's turn."""
        with self._lock:
            rows, self._rows = self._rows, []
            if not rows:
                self._writing = False
            return rows


#: The observations recorded but not yet written.
PendingObservations = Pending[ObservationRow]


class StorageBase(ClosedOnExit):
    """The `Storage` protocol implemented once over a backend's text-level reads and writes;
    `async with store:` opens it (`initialize`) and closes it on the way out."""

    _closed: bool = False

    # -- opening and closing ------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.initialize()
        return self

    async def initialize(self) -> None:
        """Connect and create or migrate the schema now rather than on first use."""
        self._check_open()
        await self._open()

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"{self!r} is closed: open a new storage object")

    @abstractmethod
    async def aclose(self) -> None:
        """Release connections and threads; safe to call twice. Every later call raises."""

    # -- threads ------------------------------------------------------------------------------

    async def get_thread_config(self, thread_id: str) -> ThreadConfig | None:
        """The thread's saved config, or None if it was never configured."""
        self._check_open()
        text = await self._read_config(thread_id)
        return None if text is None else _codec.load_config(text, store=self, thread_id=thread_id)

    async def set_thread_config(self, thread_id: str, config: ThreadConfig) -> None:
        """Replace the thread's config."""
        self._check_open()
        await self._write_config(thread_id, _codec.dump_config(config, thread_id))

    async def get_agent_state(self, thread_id: str) -> AgentState | None:
        """The thread's saved state, or None if none was saved."""
        self._check_open()
        found = await self._read_state(thread_id)
        if found is None:
            return None
        return _codec.load_state(found.data, found.version, store=self, thread_id=thread_id)

    async def set_agent_state(
        self, thread_id: str, state: AgentState, *, expected_version: int | None = None
    ) -> AgentState:
        """Save `state` as the next version (stored version + 1) and return what was saved.

        With `expected_version` (the version read, 0 when there was none) the save is a
        compare-and-set: if another save landed meanwhile, nothing is saved and a
        `StateConflictError` is raised. Without it the save goes over whatever is stored.
        """
        self._check_open()
        expected_version = check_expected_version(expected_version)
        data = _codec.dump_state_data(state, thread_id)
        version = await self._write_state(thread_id, data, expected_version)
        return _codec.load_state(data, version, store=self, thread_id=thread_id)

    # -- messages -----------------------------------------------------------------------------

    async def add_messages(self, thread_id: str, messages: Sequence[ConversationMessage]) -> None:
        """Append messages to the thread's history, all or none."""
        await self.commit_turn(thread_id, messages, None)

    async def get_messages(
        self, thread_id: str, *, limit: int | None = None
    ) -> list[ConversationMessage]:
        """The newest `limit` readable messages (all when None), oldest first."""
        self._check_open()
        limit = _codec.check_limit(limit)
        if limit == 0:
            return []
        return await self._newest_messages(
            thread_id, await self._read_messages(thread_id, limit), limit
        )

    async def _newest_messages(
        self, thread_id: str, texts: list[str], limit: int | None
    ) -> list[ConversationMessage]:
        """The newest `limit` readable messages, from `texts`: the newest `limit` rows."""
        messages = self._load_messages(thread_id, texts)
        if limit is None:
            return messages
        # A row left out (damaged) must not cost the caller a message: reach further back by
        # as many rows as are missing, until `limit` are read or the thread has no more.
        asked = limit
        while len(messages) < limit and len(texts) == asked:
            asked = len(texts) + limit - len(messages)
            wider = await self._read_messages(thread_id, asked)
            older = len(wider) - len(texts)
            if older >= 0 and wider[older:] == texts:  # nothing added meanwhile
                messages = self._load_messages(thread_id, wider[:older]) + messages
            else:
                messages = self._load_messages(thread_id, wider)
            texts = wider
        return messages[-limit:]

    async def load_snapshot(self, thread_id: str, *, history_limit: HistoryLimit) -> ThreadSnapshot:
        """The thread's paused runs and, when none waits, its config, state and newest
        `history_limit(config)` messages, in one read of the backend (`ThreadSnapshots`)."""
        self._check_open()
        config = _SnapshotConfig(self, thread_id, history_limit)
        rows = await self._read_snapshot(thread_id, config.limit_of)
        paused = _codec.load_rows(_codec.load_paused_run, rows.paused, store=self)
        if paused:
            return ThreadSnapshot(paused, None, None, [])
        if rows.paused:  # every waiting run was damaged, and the rest not read: read it now
            return await read_rest_of_snapshot(self, thread_id, history_limit)
        found = rows.state
        state = (
            None
            if found is None
            else _codec.load_state(found.data, found.version, store=self, thread_id=thread_id)
        )
        limit = rows.limit
        messages = (
            [] if limit == 0 else await self._newest_messages(thread_id, rows.messages, limit)
        )
        return ThreadSnapshot([], config.of(rows.config), state, messages)

    def _load_messages(self, thread_id: str, texts: list[str]) -> list[ConversationMessage]:
        return _codec.load_rows(
            _codec.load_message, ((thread_id, text) for text in texts), store=self
        )

    async def commit_turn(
        self,
        thread_id: str,
        messages: Sequence[ConversationMessage],
        state: AgentState | None,
        *,
        trace_id: str | None = None,
        expected_version: int | None = None,
    ) -> AgentState | None:
        """Save a run's messages and (if given) its state atomically: all or nothing.

        Returns the saved state (None without one). With `trace_id`, a turn already committed
        under that id on this thread is not written again: the call returns what that commit
        saved, so a commit repeated after a timeout or a transient error never doubles a turn.
        `expected_version` makes the state save a compare-and-set (see `set_agent_state`);
        on a conflict nothing of the turn is saved.
        """
        self._check_open()
        turn = prepare_turn(
            thread_id, messages, state, trace_id=trace_id, expected_version=expected_version
        )
        if turn is None:
            return None
        saved = await self._write_turn(turn)
        if saved is None:
            return None
        return _codec.load_state(saved.data, saved.version, store=self, thread_id=thread_id)

    def _conflict(self, thread_id: str, expected_version: int | None) -> StateConflictError:
        """The error of a compare-and-set save that found another version than expected.

        Only a compare-and-set save can miss, so `expected_version` is set whenever this is
        reached; None reads as "no saved state" rather than being trusted to an `assert`.
        """
        expected_version = expected_version or 0
        was = f"version {expected_version}" if expected_version else "no saved state"
        return StateConflictError(
            f"the agent state of thread {thread_id!r} changed since it was read ({was}): "
            "nothing was saved; read it again with get_agent_state, apply the change and save "
            "with expected_version set to the version read",
            expected_version=expected_version,
            thread_id=thread_id,
        )

    # -- observations -------------------------------------------------------------------------

    async def add_observation(self, observation: Observation) -> None:
        """Append an observation to its thread's log (see the backend for when it is written)."""
        self._check_open()
        await self._write_observation(ObservationRow.of(observation))

    async def get_observations(
        self,
        thread_id: str,
        *,
        types: Sequence[ObservationType] | None = None,
        trace_id: str | None = None,
    ) -> list[Observation]:
        """The thread's observations in recording order, optionally of some types or one trace."""
        self._check_open()
        kinds = None if types is None else sorted({ObservationType(t).value for t in types})
        if kinds == []:
            return []
        texts = await self._read_observations(thread_id, kinds, trace_id)
        return _codec.load_rows(
            _codec.load_observation, ((thread_id, text) for text in texts), store=self
        )

    # -- runs waiting for approval -----------------------------------------------------------

    async def save_paused_run(self, run: PausedRun) -> None:
        """Store a run waiting for approval (one row, written atomically), replacing one stored
        under the same thread and trace id."""
        self._check_open()
        await self._write_paused(run.thread_id, run.trace_id, _codec.dump_paused_run(run))

    async def get_paused_runs(self, thread_id: str | None = None) -> list[PausedRun]:
        """The runs waiting for approval on `thread_id` (every thread when None), oldest
        first."""
        self._check_open()
        return _codec.load_rows(
            _codec.load_paused_run, await self._read_paused(thread_id), store=self
        )

    async def claim_paused_run(self, thread_id: str, trace_id: str) -> PausedRun | None:
        """Take a paused run out of the store to resume it: delete it and return it in one
        atomic step, so of two processes claiming it only one gets it (None for the other,
        and when there is no such run)."""
        self._check_open()
        text = await self._take_paused(thread_id, trace_id)
        return (
            None if text is None else _codec.load_paused_run(text, store=self, thread_id=thread_id)
        )

    # -- a thread's turn, lent by name (`TurnLeases`) -------------------------------------------

    async def claim_turn(self, thread_id: str, owner: str, *, breaking: str | None = None) -> str:
        """Take the thread's turn for `owner` if it is free, held by `owner`, or held by
        `breaking` (a holder known to be gone); who holds it now (`TurnLeases`)."""
        self._check_open()
        for label, name in (("owner", owner), ("breaking", breaking)):
            if name is not None and (not isinstance(name, str) or not name):
                raise UsageError(f"claim_turn: {label} must be a non-empty str, got {name!r}")
        while True:
            holder = await self._claim_turn(thread_id, owner, breaking or owner)
            if holder is not None:
                return holder
            # The holder let go between the claim and the read: claim again.

    async def release_turn(self, thread_id: str, owner: str) -> None:
        """Let go of the thread's turn if `owner` holds it (`TurnLeases`)."""
        self._check_open()
        await self._release_turn(thread_id, owner)

    # -- protocol tasks (`TaskRecords`) --------------------------------------------------------

    async def save_task_record(self, record: TaskRecord) -> None:
        """Store `record` under its task id; an existing task keeps its owner (`TaskRecords`)."""
        self._check_open()
        for label, value in (("task_id", record.task_id), ("thread_id", record.thread_id)):
            if not isinstance(value, str) or not value:
                raise UsageError(f"a task record's {label} must be a non-empty str, got {value!r}")
        body = _codec.dump_task_body(record.body, record.task_id, record.thread_id)
        await self._write_task(TaskRow(record.task_id, record.thread_id, record.owner, body))

    async def get_task_record(self, task_id: str) -> TaskRecord | None:
        """The task stored under `task_id`, or None (`TaskRecords`)."""
        self._check_open()
        row = await self._read_task(task_id)
        return None if row is None else self._load_task(row)

    async def list_task_records(
        self, *, owner: str | None = None, thread_id: str | None = None
    ) -> list[TaskRecord]:
        """The tasks of `owner` on `thread_id` (None: any), the most lately saved first; a
        damaged one is left out with a warning (`TaskRecords`)."""
        self._check_open()
        found = []
        for row in await self._read_tasks(owner, thread_id):
            try:
                found.append(self._load_task(row))
            except StorageError as exc:
                # As `_codec.load_rows` does: one damaged task never hides the others.
                _log.warning("storage_row_skipped", thread_id=row.thread_id, reason=exc.message)
        return found

    async def delete_task_record(self, task_id: str) -> None:
        """Delete the task stored under `task_id`, if any (`TaskRecords`)."""
        self._check_open()
        await self._delete_task(task_id)

    def _load_task(self, row: TaskRow) -> TaskRecord:
        body = _codec.load_task_body(row.body, store=self, thread_id=row.thread_id)
        return TaskRecord(row.task_id, row.thread_id, row.owner, body)

    # -- whole threads ------------------------------------------------------------------------

    async def list_threads(self) -> list[str]:
        """Every thread with a config, state, message or observation, sorted by id."""
        self._check_open()
        return await self._list_threads()

    async def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's config, state, messages, turns and observations, all at once."""
        self._check_open()
        await self._delete_thread(thread_id)

    def lock_thread(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        """Serialise runs on `thread_id` (across processes for durable stores); not reentrant;
        runs on other threads are never blocked."""
        self._check_open()
        return self._hold(thread_id)

    # -- what a backend implements ------------------------------------------------------------

    @abstractmethod
    async def _open(self) -> None: ...

    @abstractmethod
    async def _read_config(self, thread_id: str) -> str | None: ...

    @abstractmethod
    async def _write_config(self, thread_id: str, text: str) -> None: ...

    @abstractmethod
    async def _read_state(self, thread_id: str) -> SavedState | None: ...

    @abstractmethod
    async def _write_state(self, thread_id: str, data: str, expected_version: int | None) -> int:
        """Save `data` as the next version and return it; `self._conflict(...)` when the
        stored version is not `expected_version` (if given)."""

    @abstractmethod
    async def _read_messages(self, thread_id: str, limit: int | None) -> list[str]:
        """The bodies of the newest `limit` (> 0, or None for all) messages, oldest first."""

    @abstractmethod
    async def _read_snapshot(self, thread_id: str, limit_of: LimitOf) -> SnapshotRows:
        """In one consistent read: the thread's paused runs; when there are none, also its
        config, its state and the newest `limit_of(config)` messages (none when 0).
        `limit_of` decodes the config (a damaged one raises): call it after the paused runs."""

    @abstractmethod
    async def _write_turn(self, turn: Turn) -> SavedState | None:
        """Write `turn` in one transaction and return the state saved (None without one); for
        a trace already committed, write nothing and return what that commit saved."""

    @abstractmethod
    async def _write_observation(self, row: ObservationRow) -> None: ...

    @abstractmethod
    async def _read_observations(
        self, thread_id: str, kinds: list[str] | None, trace_id: str | None
    ) -> list[str]: ...

    @abstractmethod
    async def _list_threads(self) -> list[str]: ...

    @abstractmethod
    async def _delete_thread(self, thread_id: str) -> None: ...

    @abstractmethod
    def _hold(self, thread_id: str) -> AbstractAsyncContextManager[None]: ...

    @abstractmethod
    async def _write_paused(self, thread_id: str, trace_id: str, body: str) -> None: ...

    @abstractmethod
    async def _read_paused(self, thread_id: str | None) -> list[tuple[str, str]]:
        """(thread id, body) of the paused runs of `thread_id` (all when None), oldest first."""

    @abstractmethod
    async def _take_paused(self, thread_id: str, trace_id: str) -> str | None:
        """Delete the paused run and return its body in one atomic step; None if none."""

    @abstractmethod
    async def _claim_turn(self, thread_id: str, owner: str, breaking: str) -> str | None:
        """Lend the turn to `owner` when no one, `owner` or `breaking` holds it, atomically;
        the holder afterwards, or None when the lease vanished between claim and read."""

    @abstractmethod
    async def _release_turn(self, thread_id: str, owner: str) -> None:
        """Delete the thread's lease if `owner` holds it."""

    @abstractmethod
    async def _write_task(self, row: TaskRow) -> None:
        """Insert the task, or replace the thread id and body of the one stored under its id
        (keeping that one's owner), and mark it the most lately saved."""

    @abstractmethod
    async def _read_task(self, task_id: str) -> TaskRow | None: ...

    @abstractmethod
    async def _read_tasks(self, owner: str | None, thread_id: str | None) -> list[TaskRow]:
        """The tasks of `owner` on `thread_id` (None: any), the most lately saved first."""

    @abstractmethod
    async def _delete_task(self, task_id: str) -> None: ...


class _SnapshotConfig:
    """A snapshot's config, decoded once: while the backend reads (`limit_of`, which it may
    call in its database thread) and after (`of`)."""

    __slots__ = ("_history_limit", "_store", "_text", "_thread_id", "config")

    def __init__(self, store: StorageBase, thread_id: str, history_limit: HistoryLimit) -> None:
        self._store = store
        self._thread_id = thread_id
        self._history_limit = history_limit
        self._text: str | None = None
        self.config: ThreadConfig | None = None

    def limit_of(self, text: str | None) -> int | None:
        """How many messages to read for the config stored as `text` (checked: an int >= 0
        or None); a damaged config raises its StorageError."""
        return _codec.check_limit(self._history_limit(self.of(text)))

    def of(self, text: str | None) -> ThreadConfig | None:
        """The config stored as `text`, decoded (once for the same text)."""
        if text is None:
            return None
        if text != self._text or self.config is None:
            self.config = _codec.load_config(text, store=self._store, thread_id=self._thread_id)
            self._text = text
        return self.config
