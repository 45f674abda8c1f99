"""`SQLiteStorage`: the embedded, persistent store (`storage="sqlite:///agent.db"`).

- **Never blocks the event loop.** Each storage object owns one connection used by one
  dedicated thread; every query runs there, in the order the calls were made (so a read
  always sees the writes made before it through the same object).
- **Several processes on one file.** WAL mode (readers never wait for the writer), a busy
  timeout for writers, and `BEGIN IMMEDIATE` for every read-modify-write so two writers cannot
  deadlock upgrading a read lock.
- **Runs on one thread are serialised across processes** by `lock_thread`: an in-process
  `asyncio.Lock` per thread, then a file lock under `<db>-locks/` (on Linux one byte of one
  file per thread, elsewhere a file per thread; see `_filelock`). The kernel drops the file
  lock when its holder dies, even by SIGKILL, so a crashed worker never blocks a thread. Runs
  on different threads never wait for each other.
  `":memory:"` databases live in one process, so they use the in-process lock only.
- **Atomic turns.** `commit_turn` writes the messages, the state and (with a trace id) the
  `turns` row in one transaction: a crash leaves the whole turn or nothing, and a turn
  committed again under the same trace id is found there and not written twice. A state save
  with `expected_version` compares and sets inside that transaction. Turns committed while the
  worker thread is busy share one transaction (each still whole or absent; one that cannot go
  through as it is sends the batch back to one transaction a turn). Observations are queued
  and written in batches by the worker thread, so those recorded before a crash of the process
  survive it once their batch is written.
- **Durability.** `synchronous=NORMAL` (the WAL default): a committed turn survives the process
  crashing; a power cut may lose the last few commits. Pass `synchronous="FULL"` to fsync
  every commit.
- **Model stream events** (`StreamFeed`: the tokens of runs a durable engine's worker
  executes, for the submitting process's subscribers) go through the small table
  `stream_events`: a row per batch a publisher wrote at once (while one write is under way,
  the next tokens gather into the next batch), pruned to the latest `_STREAM_KEEP` rows as it
  grows. While anyone subscribes, one task per storage object reads the new rows every
  `stream_poll_s` (a query on the primary key); with no subscriber nothing is read. Cost: a
  write per batch (a few per model call) on the file every process shares, and tokens arrive
  up to `stream_poll_s` late.
- **Schema.** Created on first use and recorded in `schema_version`; older files are migrated
  step by step (`MIGRATIONS`); a file written by a newer pes-agent is refused with a
  `ConfigurationError` instead of being misread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import queue
import sqlite3
import stat
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

from pes_agent.errors import ConfigurationError, PESAgentError, StorageError, UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.observing.streams import StreamEvent
from pes_agent.storage._common import (
    THREAD_TABLES,
    LimitOf,
    ObservationRow,
    Pending,
    PendingObservations,
    SavedState,
    SnapshotRows,
    StorageBase,
    TaskRow,
    Turn,
)
from pes_agent.storage._filelock import thread_file_locks
from pes_agent.storage._locks import ThreadLockTable
from pes_agent.storage._streams import (
    StreamCallback,
    StreamDelivery,
    decode_events,
    encode_events,
)

_log = get_logger("pes_agent.storage.sqlite")

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLiteStorage"]

_T = TypeVar("_T")

# Each entry upgrades the schema from version (key - 1) to version key. Append, never edit.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE thread_configs (
            thread_id TEXT PRIMARY KEY,
            config TEXT NOT NULL
        )""",
        """CREATE TABLE agent_states (
            thread_id TEXT PRIMARY KEY,
            data TEXT NOT NULL,
            version INTEGER NOT NULL
        )""",
        """CREATE TABLE messages (
            seq INTEGER PRIMARY KEY,
            thread_id TEXT NOT NULL,
            message_id TEXT NOT NULL,
            body TEXT NOT NULL,
            UNIQUE (thread_id, message_id)
        )""",
        "CREATE INDEX messages_by_thread ON messages (thread_id, seq)",
        """CREATE TABLE observations (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL,
            thread_id TEXT NOT NULL,
            trace_id TEXT NOT NULL,
            type TEXT NOT NULL,
            body TEXT NOT NULL
        )""",
        "CREATE INDEX observations_by_thread ON observations (thread_id, seq)",
        "CREATE INDEX observations_by_trace ON observations (thread_id, trace_id, seq)",
    ),
    # The turns committed under a trace id, so that committing one again writes nothing.
    2: (
        """CREATE TABLE turns (
            thread_id TEXT NOT NULL,
            trace_id TEXT NOT NULL,
            state TEXT,
            version INTEGER,
            PRIMARY KEY (thread_id, trace_id)
        )""",
    ),
    # Runs waiting for a person's approval (`AgentCore.resume`), one row each.
    3: (
        """CREATE TABLE paused_runs (
            seq INTEGER PRIMARY KEY,
            thread_id TEXT NOT NULL,
            trace_id TEXT NOT NULL,
            body TEXT NOT NULL,
            UNIQUE (thread_id, trace_id)
        )""",
    ),
    # Model stream events on their way to other processes (`StreamFeed`): recent ones only.
    4: (
        """CREATE TABLE stream_events (
            seq INTEGER PRIMARY KEY,
            origin TEXT NOT NULL,
            body TEXT NOT NULL
        )""",
    ),
    # Who holds each thread's turn (`claim_turn`: a durable engine's lease), while a run does.
    5: (
        """CREATE TABLE turn_leases (
            thread_id TEXT PRIMARY KEY,
            owner TEXT NOT NULL
        )""",
    ),
    # Protocol tasks (`TaskRecords`: the A2A server's), `saved` ordering them by last save.
    6: (
        """CREATE TABLE a2a_tasks (
            task_id TEXT PRIMARY KEY,
            thread_id TEXT NOT NULL,
            owner TEXT NOT NULL,
            saved INTEGER NOT NULL,
            body TEXT NOT NULL
        )""",
        "CREATE INDEX a2a_tasks_by_thread ON a2a_tasks (thread_id)",
    ),
}
SCHEMA_VERSION = max(MIGRATIONS)

# The stream batches kept (older ones are pruned every `_STREAM_PRUNE_EVERY` batches), and the
# most rows one read of the feed takes.
_STREAM_KEEP = 2000
_STREAM_PRUNE_EVERY = 100
_STREAM_READ = 500


class SQLiteStorage(StorageBase):
    """A SQLite file (or `":memory:"`) holding threads, history, state and observations.

    `SQLiteStorage("agent.db")` opens nothing until first use, then creates or migrates the
    schema. Close it with `await storage.aclose()` or `async with SQLiteStorage(...)`.
    Its reads and writes are the `Storage` protocol's, documented there.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 30.0,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        lock_poll_max_s: float = 0.05,
        stream_poll_s: float = 0.05,
    ) -> None:
        """Name the database file; nothing is opened until first use.

        Args:
            path: The database file, created if missing (its directory must exist), or
                `":memory:"` for a database that lives as long as this object.
            busy_timeout_s: How long a write waits for another process's write to finish
                before it fails with a transient `StorageError`.
            synchronous: SQLite's `PRAGMA synchronous`: `"NORMAL"` (a committed turn
                survives the process crashing; a power cut may lose the last few commits)
                or `"FULL"` (every commit is fsynced).
            lock_poll_max_s: The longest pause between two tries at a thread's lock file
                held by another process (`lock_thread`).
            stream_poll_s: How often the stream feed is read while anyone subscribes
                (`subscribe_stream`).

        Raises:
            UsageError: `path` is empty, `busy_timeout_s` or `stream_poll_s` is not > 0, or
                `synchronous` is neither `"NORMAL"` nor `"FULL"`.
        """
        self._path = os.fspath(path)
        if not self._path:
            raise UsageError("SQLiteStorage needs a file path, or ':memory:'")
        if busy_timeout_s <= 0:
            raise UsageError("busy_timeout_s must be > 0 seconds")
        if synchronous not in ("NORMAL", "FULL"):
            raise UsageError("synchronous must be 'NORMAL' or 'FULL'")
        if isinstance(stream_poll_s, bool) or not isinstance(stream_poll_s, int | float):
            raise UsageError(
                f"stream_poll_s must be a number of seconds > 0, not {stream_poll_s!r}"
            )
        if stream_poll_s <= 0:
            raise UsageError("stream_poll_s must be > 0 seconds")
        self._busy_timeout_ms = int(busy_timeout_s * 1000)
        self._synchronous = synchronous
        self._in_memory = self._path == ":memory:" or self._path.startswith("file::memory:")
        self._file_locks = (
            None
            if self._in_memory
            else thread_file_locks(Path(self._path + "-locks"), max_poll_s=lock_poll_max_s)
        )
        if self._file_locks is not None:
            weakref.finalize(self, self._file_locks.close)  # a store dropped without aclose()
        self._locks = ThreadLockTable()
        self._worker: _DatabaseThread | None = None
        self._pending = PendingObservations()
        self._turns: Pending[_QueuedTurn] = Pending()
        self._conn: sqlite3.Connection | None = None
        self._stream_poll_s = float(stream_poll_s)
        self._streams: list[StreamDelivery] = []
        self._stream_seq = 0  # the last stream row read
        # Subscribers that joined a reader already polling: the last row before each came (None:
        # not known yet); rows up to it were published before it subscribed.
        self._stream_starts: dict[StreamDelivery, int | None] = {}
        self._stream_reader: asyncio.Task[None] | None = None
        self._stream_read_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"SQLiteStorage({self._path!r})"

    @property
    def path(self) -> str:
        """The database file (or `":memory:"`)."""
        return self._path

    async def _open(self) -> None:
        await self._call(lambda conn: None)

    # -- the worker thread ------------------------------------------------------------------

    async def _call(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        return await self._worker_thread().call(functools.partial(self._run, work))

    def _worker_thread(self) -> _DatabaseThread:
        self._check_open()
        worker = self._worker
        if worker is None:
            worker = self._worker = _DatabaseThread(f"pes-sqlite:{os.path.basename(self._path)}")
            # A store dropped without aclose() must not leave its thread behind forever.
            weakref.finalize(self, worker.stop)
        return worker

    def _run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        conn = self._conn if self._conn is not None else self._open_connection()
        try:
            return work(conn)
        except sqlite3.Error as exc:
            # Busy or locked past the busy timeout: another writer held on; trying again helps.
            transient = isinstance(exc, sqlite3.OperationalError) and any(
                word in str(exc) for word in ("locked", "busy")
            )
            raise StorageError(
                f"SQLite error on {self._path!r}: {exc}", transient=transient
            ) from exc

    def _open_connection(self) -> sqlite3.Connection:
        # Processes opening a new file at once race to switch it to WAL and create the schema;
        # SQLite answers the loser "database is locked" at once, without waiting (a wait
        # could deadlock). Opening again a moment later finds the work done.
        started = time.monotonic()
        delay = 0.005
        while True:
            try:
                return self._try_open_connection()
            except _LockedWhileOpening as locked:
                waited = time.monotonic() - started
                if waited + delay > self._busy_timeout_ms / 1000:
                    raise StorageError(
                        f"SQLite database {self._path!r} stayed locked by another connection "
                        f"for {waited:.1f} s while opening it ({locked.__cause__})",
                        transient=True,
                    ) from locked.__cause__
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _try_open_connection(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self._path,
                timeout=self._busy_timeout_ms / 1000,
                isolation_level=None,
                uri=self._path.startswith("file:"),
            )
        except sqlite3.Error as exc:
            raise self._unusable(exc, "cannot open") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            if not self._in_memory:
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            _migrate(conn, self._path)
        except sqlite3.OperationalError as exc:
            conn.close()
            if "locked" not in str(exc):
                raise self._unusable(exc, "cannot use") from exc
            raise _LockedWhileOpening from exc
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise self._unusable(exc, "cannot use") from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _unusable(self, exc: sqlite3.Error, what: str) -> ConfigurationError:
        """The error for a file SQLite could not open or set up, saying what is wrong with it:
        SQLite's own "unable to open database file" says nothing of which part failed."""
        problem = None
        if not (self._in_memory or self._path.startswith("file:")):  # URIs are SQLite's to read
            problem = _file_problem(Path(self._path))
        if problem is None:
            if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
                problem = (
                    "the file is not an SQLite database; pass the path of a pes-agent "
                    "database, or of a file that does not exist yet"
                )
            else:
                problem = "check that its folder exists and that this process may write there"
        return ConfigurationError(f"{what} the SQLite database {self._path!r}: {problem} ({exc})")

    # -- threads ----------------------------------------------------------------------------

    async def _read_config(self, thread_id: str) -> str | None:
        def read(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(
                "SELECT config FROM thread_configs WHERE thread_id = ?", (thread_id,)
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._call(read)

    async def _write_config(self, thread_id: str, text: str) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO thread_configs (thread_id, config) VALUES (?, ?) "
                "ON CONFLICT (thread_id) DO UPDATE SET config = excluded.config",
                (thread_id, text),
            )

        await self._call(write)

    async def _read_state(self, thread_id: str) -> SavedState | None:
        def read(conn: sqlite3.Connection) -> SavedState | None:
            row = conn.execute(
                "SELECT data, version FROM agent_states WHERE thread_id = ?", (thread_id,)
            ).fetchone()
            # The version is checked as the state is read (`load_state`): a damaged one is a
            # StorageError naming the table there, not a ValueError here.
            return None if row is None else SavedState(str(row[0]), row[1])

        return await self._call(read)

    async def _write_state(self, thread_id: str, data: str, expected_version: int | None) -> int:
        def write(conn: sqlite3.Connection) -> int:
            version = _save_state(conn, thread_id, data, expected_version)
            if version is None:
                raise self._conflict(thread_id, expected_version)
            return version

        return await self._call(write)

    # -- messages ---------------------------------------------------------------------------

    async def _read_messages(self, thread_id: str, limit: int | None) -> list[str]:
        def read(conn: sqlite3.Connection) -> list[str]:
            return _newest_messages(conn, thread_id, limit)

        return await self._call(read)

    async def _read_snapshot(self, thread_id: str, limit_of: LimitOf) -> SnapshotRows:
        # One call to the worker thread and one read transaction (a WAL snapshot): the reads
        # agree with each other even while other processes write.
        def read(conn: sqlite3.Connection) -> SnapshotRows:
            conn.execute("BEGIN")
            try:
                return _snapshot_rows(conn, thread_id, limit_of)
            finally:
                _rollback(conn)  # it wrote nothing: ending it is all

        return await self._call(read)

    async def _write_turn(self, turn: Turn) -> SavedState | None:
        """Queue the turn for the worker thread, which writes the turns queued meanwhile in
        one transaction (`_write_turns`), and wait for its outcome."""
        worker = self._worker_thread()
        future: asyncio.Future[SavedState | None] = asyncio.get_running_loop().create_future()
        if self._turns.add(_QueuedTurn(turn, future)):
            worker.submit(functools.partial(self._write_pending_turns, worker))
        return await future

    def _write_pending_turns(self, worker: _DatabaseThread) -> None:
        while queued := self._turns.take():
            # The observations recorded before these turns were committed go first, as when
            # every call ran in the order made: a turn joins a batch queued before it.
            self._write_pending_observations()
            try:
                outcomes = self._run(
                    functools.partial(self._write_turns, turns=[q.turn for q in queued])
                )
            except BaseException as exc:  # the file cannot be opened, or stayed busy
                outcomes = [(None, exc)] * len(queued)
            for item, (saved, error) in zip(queued, outcomes, strict=True):
                worker.settle(item.future, saved, error)

    def _write_turns(
        self, conn: sqlite3.Connection, *, turns: list[Turn]
    ) -> list[tuple[SavedState | None, BaseException | None]]:
        """Write `turns` in one transaction when they all go through as they are; else (a
        trace that landed before, a state conflict, a duplicate message: rare) each in its
        own, in order, so each gets its own outcome, as if written one after the other.

        One transaction for all: a commit and each statement cost this thread a wait for the
        GIL while thousands of runs keep the event loop busy; a batch of 100 turns is ~5
        statements instead of 400.
        """
        if len(turns) > 1:
            saved = _write_turns_at_once(conn, turns)
            if saved is not None:
                return [(one, None) for one in saved]
        outcomes: list[tuple[SavedState | None, BaseException | None]] = []
        for turn in turns:
            try:
                outcomes.append(
                    (self._run(functools.partial(self._write_one_turn, turn=turn)), None)
                )
            except (PESAgentError, sqlite3.Error) as exc:
                outcomes.append((None, exc))
        return outcomes

    def _write_one_turn(self, conn: sqlite3.Connection, *, turn: Turn) -> SavedState | None:
        """Write the turn in one `BEGIN IMMEDIATE` transaction: a crash leaves all or nothing.

        The `turns` row goes first, claiming the trace id (an insert that finds it taken
        returns no row: the turn landed before, so nothing is written and what it saved is
        read back), then the messages in one INSERT: each statement costs a wait for the GIL
        (see `_write_turns`).
        """
        thread_id = turn.thread_id
        conn.execute("BEGIN IMMEDIATE")
        try:
            if turn.trace_id is not None and not _claim_trace(conn, thread_id, turn.trace_id):
                landed = conn.execute(
                    "SELECT state, version FROM turns WHERE thread_id = ? AND trace_id = ?",
                    (thread_id, turn.trace_id),
                ).fetchone()
                conn.execute("ROLLBACK")
                return SavedState(landed[0], landed[1]) if landed[0] is not None else None
            _insert_messages(conn, _message_rows([turn]))
            saved = None
            if turn.state is not None:
                version = _save_state(conn, thread_id, turn.state, turn.expected_version)
                if version is None:
                    raise self._conflict(thread_id, turn.expected_version)
                saved = SavedState(turn.state, version)
                if turn.trace_id is not None:
                    _record_trace_state(conn, turn, version)
            conn.execute("COMMIT")
        except BaseException as exc:
            _rollback(conn)
            if isinstance(exc, sqlite3.IntegrityError):
                raise StorageError(
                    f"a message of this turn is already saved in thread {thread_id!r}: "
                    "each message needs its own message_id; nothing was saved",
                    thread_id=thread_id,
                ) from exc
            raise
        return saved

    # -- observations -----------------------------------------------------------------------

    async def _write_observation(self, row: ObservationRow) -> None:
        """Queue the row for the worker thread, which writes the rows queued meanwhile in one
        transaction. The worker runs everything in order (and writes the rows queued before
        a batch of turns first), so any later read, `commit_turn` or `aclose` sees it; a
        write that fails is logged."""
        if self._pending.add(row):
            self._worker_thread().submit(self._write_pending_observations)

    def _write_pending_observations(self) -> None:
        while rows := self._pending.take():
            try:
                self._run(functools.partial(_insert_observations, rows=rows))
            except PESAgentError as exc:
                # Logged, and the writer goes on: the next batch must not be lost with this one.
                # Our own errors say what is wrong (a file that cannot be opened): one line.
                _log.error(
                    "sqlite_observation_write_failed",
                    path=self._path,
                    count=len(rows),
                    error_type=type(exc).__name__,
                    error=str(exc),
                )
            except Exception:
                _log.exception("sqlite_observation_write_failed", path=self._path, count=len(rows))

    async def _read_observations(
        self, thread_id: str, kinds: list[str] | None, trace_id: str | None
    ) -> list[str]:
        sql = "SELECT body FROM observations WHERE thread_id = ?"
        params: list[str] = [thread_id]
        if trace_id is not None:
            sql += " AND trace_id = ?"
            params.append(trace_id)
        if kinds is not None:
            sql += f" AND type IN ({', '.join('?' * len(kinds))})"
            params.extend(kinds)
        sql += " ORDER BY seq"

        def read(conn: sqlite3.Connection) -> list[str]:
            return [str(row[0]) for row in conn.execute(sql, params).fetchall()]

        return await self._call(read)

    # -- whole threads ----------------------------------------------------------------------

    async def _list_threads(self) -> list[str]:
        def read(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT thread_id FROM thread_configs UNION SELECT thread_id FROM agent_states "
                "UNION SELECT thread_id FROM messages UNION SELECT thread_id FROM observations "
                "ORDER BY thread_id"
            ).fetchall()
            return [str(row[0]) for row in rows]

        return await self._call(read)

    async def _delete_thread(self, thread_id: str) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for table in THREAD_TABLES:
                    conn.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise

        await self._call(write)

    # -- model stream events (`StreamFeed`) -------------------------------------------------

    async def publish_stream(self, origin: str, events: Sequence[StreamEvent]) -> None:
        """Write `events` as one row of `stream_events`, for the subscribers of every process
        (`StreamFeed`); every `_STREAM_PRUNE_EVERY` rows, the oldest beyond `_STREAM_KEEP` go.

        Args:
            origin: The publishing `StreamSocket`'s origin, handed to the subscribers.
            events: The events, in the order the subscribers get them.

        Raises:
            StorageError: The file could not be written.
        """
        body = json.dumps(encode_events(events), ensure_ascii=False)

        def write(conn: sqlite3.Connection) -> None:
            cursor = conn.execute(
                "INSERT INTO stream_events (origin, body) VALUES (?, ?)", (origin, body)
            )
            seq = cursor.lastrowid or 0
            if seq % _STREAM_PRUNE_EVERY == 0:
                conn.execute("DELETE FROM stream_events WHERE seq <= ?", (seq - _STREAM_KEEP,))

        await self._call(write)

    async def subscribe_stream(self, callback: StreamCallback) -> StreamDelivery:
        """Call `callback(origin, event)` with each event any process publishes from now on
        (`StreamFeed`), read from `stream_events` every `stream_poll_s` while subscribed.

        Args:
            callback: Awaited with `(origin, event)` for each event, one at a time.

        Returns:
            The subscription: `caught_up()` waits for what was published before it, `close()`
            ends it.

        Raises:
            StorageError: The file could not be read.
        """
        self._check_open()
        delivery = StreamDelivery(callback, sync=self._read_streams, on_close=self._unsubscribe)
        self._streams.append(delivery)
        # Nothing for it until it knows where it starts: rows not yet read may have been
        # written before it came.
        self._stream_starts[delivery] = None
        try:
            last = await self._call(_last_stream_row)
            if self._stream_reader is None:
                # What was published before the first subscriber came is not delivered.
                self._stream_seq = last
                self._stream_reader = asyncio.get_running_loop().create_task(self._poll_streams())
            if delivery in self._stream_starts:  # not closed meanwhile
                self._stream_starts[delivery] = last
        except BaseException:
            delivery.close()
            raise
        return delivery

    def _unsubscribe(self, delivery: StreamDelivery) -> None:
        self._streams.remove(delivery)
        self._stream_starts.pop(delivery, None)
        if not self._streams and self._stream_reader is not None:
            self._stream_reader.cancel()
            self._stream_reader = None

    async def _poll_streams(self) -> None:
        while True:
            await asyncio.sleep(self._stream_poll_s)
            try:
                await self._read_streams()
            except PESAgentError as exc:  # the store closed, or a busy moment: read again
                if self._closed:
                    return
                _log.warning("stream_feed_read_failed", path=self._path, error=str(exc))

    async def _read_streams(self) -> None:
        """Hand the stream rows written since the last read to the subscribers, in order."""
        starts = self._stream_starts
        async with self._stream_read_lock:
            while self._streams:
                after = self._stream_seq
                rows = await self._call(functools.partial(_stream_rows, after=after))
                if not rows:
                    return
                if after and rows[0][0] > after + 1:
                    _log.warning(
                        "stream_feed_dropped",
                        path=self._path,
                        note="stream rows were pruned before they were read: tokens lost",
                    )
                for seq, origin, body in rows:
                    self._stream_seq = seq
                    try:
                        events = decode_events(json.loads(body))
                    except ValueError:
                        continue  # a damaged row: tokens only
                    for delivery in tuple(self._streams):
                        if starts and delivery in starts:  # it joined a reader polling
                            start = starts[delivery]
                            if start is None or seq <= start:
                                continue  # written before it subscribed
                            del starts[delivery]
                        delivery.put(str(origin), events)
                if len(rows) < _STREAM_READ:
                    return

    # -- runs waiting for approval ---------------------------------------------------------

    async def _write_paused(self, thread_id: str, trace_id: str, body: str) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO paused_runs (thread_id, trace_id, body) VALUES (?, ?, ?) "
                "ON CONFLICT (thread_id, trace_id) DO UPDATE SET body = excluded.body",
                (thread_id, trace_id, body),
            )

        await self._call(write)

    async def _read_paused(self, thread_id: str | None) -> list[tuple[str, str]]:
        sql = "SELECT thread_id, body FROM paused_runs"
        params: tuple[str, ...] = ()
        if thread_id is not None:
            sql += " WHERE thread_id = ?"
            params = (thread_id,)

        def read(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            rows = conn.execute(sql + " ORDER BY seq", params).fetchall()
            return [(str(row[0]), str(row[1])) for row in rows]

        return await self._call(read)

    async def _take_paused(self, thread_id: str, trace_id: str) -> str | None:
        def take(conn: sqlite3.Connection) -> str | None:
            # One statement: of two processes deleting the row, only one gets it back.
            row = conn.execute(
                "DELETE FROM paused_runs WHERE thread_id = ? AND trace_id = ? RETURNING body",
                (thread_id, trace_id),
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._call(take)

    # -- protocol tasks ---------------------------------------------------------------------

    async def _write_task(self, row: TaskRow) -> None:
        def write(conn: sqlite3.Connection) -> None:
            # One statement: the number it takes as `saved` is read under the write lock.
            conn.execute(
                "INSERT INTO a2a_tasks (task_id, thread_id, owner, saved, body) "
                "VALUES (?, ?, ?, (SELECT coalesce(max(saved), 0) + 1 FROM a2a_tasks), ?) "
                "ON CONFLICT (task_id) DO UPDATE SET thread_id = excluded.thread_id, "
                "saved = excluded.saved, body = excluded.body",
                (row.task_id, row.thread_id, row.owner, row.body),
            )

        await self._call(write)

    async def _read_task(self, task_id: str) -> TaskRow | None:
        def read(conn: sqlite3.Connection) -> TaskRow | None:
            found = conn.execute(
                "SELECT task_id, thread_id, owner, body FROM a2a_tasks WHERE task_id = ?",
                (task_id,),
            ).fetchone()
            return None if found is None else TaskRow(*map(str, found))

        return await self._call(read)

    async def _read_tasks(self, owner: str | None, thread_id: str | None) -> list[TaskRow]:
        sql = "SELECT task_id, thread_id, owner, body FROM a2a_tasks WHERE 1 = 1"
        params: list[str] = []
        if owner is not None:
            sql += " AND owner = ?"
            params.append(owner)
        if thread_id is not None:
            sql += " AND thread_id = ?"
            params.append(thread_id)

        def read(conn: sqlite3.Connection) -> list[TaskRow]:
            rows = conn.execute(sql + " ORDER BY saved DESC", params).fetchall()
            return [TaskRow(*map(str, found)) for found in rows]

        return await self._call(read)

    async def _delete_task(self, task_id: str) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM a2a_tasks WHERE task_id = ?", (task_id,))

        await self._call(write)

    # -- a thread's turn, lent by name --------------------------------------------------------

    async def _claim_turn(self, thread_id: str, owner: str, breaking: str) -> str | None:
        def claim(conn: sqlite3.Connection) -> str | None:
            # Claim and read in one write transaction: what is read is what the claim left.
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    "INSERT INTO turn_leases (thread_id, owner) VALUES (?, ?) "
                    "ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner "
                    "WHERE turn_leases.owner IN (excluded.owner, ?)",
                    (thread_id, owner, breaking),
                )
                row = conn.execute(
                    "SELECT owner FROM turn_leases WHERE thread_id = ?", (thread_id,)
                ).fetchone()
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
            return None if row is None else str(row[0])

        return await self._call(claim)

    async def _release_turn(self, thread_id: str, owner: str) -> None:
        def release(conn: sqlite3.Connection) -> None:
            conn.execute(
                "DELETE FROM turn_leases WHERE thread_id = ? AND owner = ?", (thread_id, owner)
            )

        await self._call(release)

    def _hold(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        """The in-process lock, then the thread's lock file (released by the kernel if the
        process dies)."""
        return self._hold_both(thread_id)

    @asynccontextmanager
    async def _hold_both(self, thread_id: str) -> AsyncIterator[None]:
        async with self._locks.hold(thread_id):
            if self._file_locks is None:
                yield
                return
            if self._conn is None:
                # A file that cannot be opened fails here, before the lock folder beside it
                # is made (and left behind), and with the reason rather than a lock error.
                await self._open()
            async with self._file_locks.hold(thread_id):
                yield

    async def aclose(self) -> None:
        """Write the observations still queued, close the connection and stop the worker
        thread; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for delivery in list(self._streams):
            delivery.close()
        if self._file_locks is not None:
            self._file_locks.close()
        worker, self._worker = self._worker, None
        if worker is None:
            return

        def close() -> None:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()

        try:
            await worker.call(close)
        finally:
            worker.stop()


class _DatabaseThread:
    """One thread running submitted functions in order, for the connection it alone uses.

    Leaner than a one-worker `ThreadPoolExecutor` (no concurrent.futures round trip), which
    matters: a run makes a dozen calls. A daemon thread, so a store that is never closed does
    not keep the interpreter alive; SQLite rolls back an interrupted transaction on next open.

    Outcomes go back through one list per event loop, which wakes the loop only when it was
    empty: a loop busy with thousands of runs takes every outcome that came meanwhile in one
    callback, instead of one self-pipe write (and one wake-up) per call; the write lets go of
    the GIL, and this thread then waits to take it back while the loop runs. No outcome
    waits for another: each is in the list as soon as its call returns.
    """

    __slots__ = ("_lock", "_queue", "_thread", "_waiting")

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[
            tuple[asyncio.AbstractEventLoop | None, asyncio.Future[Any] | None, Callable[[], Any]]
            | None
        ] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._waiting: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    async def call(self, work: Callable[[], _T]) -> _T:
        """Run `work` on the thread and wait for its result (or exception)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        self._queue.put((loop, future, work))
        return await future

    def submit(self, work: Callable[[], None]) -> None:
        """Queue `work` on the thread without waiting; it must handle its own errors."""
        self._queue.put((None, None, work))

    def stop(self) -> None:
        """Let the thread finish once the calls already queued have run."""
        self._queue.put(None)

    def _main(self) -> None:
        while (item := self._queue.get()) is not None:
            loop, future, work = item
            if loop is None or future is None:
                work()
                continue
            try:
                result, error = work(), None
            except BaseException as exc:
                result, error = None, exc
            self.settle(future, result, error)

    def settle(self, future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
        """From this thread: give `future` its result (or `error`), on its event loop."""
        loop = future.get_loop()
        with self._lock:
            waiting = self._waiting.get(loop)
            if waiting is not None:
                waiting.append((future, result, error))  # the loop is told; it takes this too
                return
            self._waiting[loop] = [(future, result, error)]
        # RuntimeError: the caller's event loop is closed, so nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._settle, loop)

    def _settle(self, loop: asyncio.AbstractEventLoop) -> None:
        """On `loop`: hand the outcomes waiting for it to their callers."""
        with self._lock:
            outcomes = self._waiting.pop(loop, [])
        for future, result, error in outcomes:
            if future.cancelled():
                continue  # the caller was cancelled; the work itself still ran to completion
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)


_Outcome = tuple["asyncio.Future[Any]", Any, BaseException | None]


class _LockedWhileOpening(Exception):
    """Opening the connection found the database locked (the cause says how): try again."""


def _file_problem(path: Path) -> str | None:
    """What the file system says is wrong with opening (or creating) the database at `path`,
    with the fix; None when nothing visibly is."""
    folder = path.absolute().parent
    try:
        if path.is_dir():
            return f"that is a folder; pass a file path, e.g. {path / 'agent.db'}"
        if not folder.is_dir():
            what = "is not a folder" if folder.exists() else "does not exist"
            return f"the folder {folder} {what}; create it, or choose a file in another folder"
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            return (
                f"permission denied: {_whose(path)}, and this process (uid {os.geteuid()}) may "
                "not both read and write it; change its permissions, or run as its owner"
            )
        if not os.access(folder, os.W_OK | os.X_OK):
            return (
                f"permission denied: this process (uid {os.geteuid()}) may not create files in "
                f"the folder {folder} ({_whose(folder)}), where SQLite keeps the database's "
                "-wal and -shm files; change its permissions, or choose another folder"
            )
    except OSError as exc:  # a folder on the way that may not be searched
        return f"{exc.strerror}: {exc.filename}"
    return None


def _whose(path: Path) -> str:
    info = path.stat()
    return f"it is {stat.filemode(info.st_mode)}, owned by uid {info.st_uid}"


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    """Create or upgrade the schema to `SCHEMA_VERSION`, refusing a newer one."""
    if _recorded_version(conn) == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        current = _recorded_version(conn) or 0
        if current > SCHEMA_VERSION:
            raise ConfigurationError(
                f"the SQLite database {path!r} has schema version {current}, newer than the "
                f"{SCHEMA_VERSION} this pes-agent understands: upgrade pes-agent to use it"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
        conn.execute("DELETE FROM schema_version")
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise


def _stream_rows(conn: sqlite3.Connection, *, after: int) -> list[tuple[int, str, str]]:
    return conn.execute(
        "SELECT seq, origin, body FROM stream_events WHERE seq > ? ORDER BY seq LIMIT ?",
        (after, _STREAM_READ),
    ).fetchall()


def _last_stream_row(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT max(seq) FROM stream_events").fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def _recorded_version(conn: sqlite3.Connection) -> int | None:
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if exists is None:
        return None
    row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
    return None if row is None or row[0] is None else int(row[0])


# The config, the state and whether a run waits, in one statement.
_THREAD_ROW = (
    "SELECT (SELECT config FROM thread_configs WHERE thread_id = ?1), "
    "(SELECT data FROM agent_states WHERE thread_id = ?1), "
    "(SELECT version FROM agent_states WHERE thread_id = ?1), "
    "EXISTS (SELECT 1 FROM paused_runs WHERE thread_id = ?1)"
)


def _snapshot_rows(conn: sqlite3.Connection, thread_id: str, limit_of: LimitOf) -> SnapshotRows:
    """`_read_snapshot`'s reads, in the transaction the caller opened."""
    config, data, version, waiting = conn.execute(_THREAD_ROW, (thread_id,)).fetchone()
    if waiting:
        rows = conn.execute(
            "SELECT thread_id, body FROM paused_runs WHERE thread_id = ? ORDER BY seq",
            (thread_id,),
        ).fetchall()
        return SnapshotRows.waiting([(str(row[0]), str(row[1])) for row in rows])
    config = None if config is None else str(config)
    limit = limit_of(config)
    state = None if data is None else SavedState(str(data), version)
    if limit == 0:
        return SnapshotRows([], config, state, [], limit)
    return SnapshotRows([], config, state, _newest_messages(conn, thread_id, limit), limit)


def _newest_messages(conn: sqlite3.Connection, thread_id: str, limit: int | None) -> list[str]:
    """The bodies of the newest `limit` (None: all) messages, oldest first."""
    rows = conn.execute(
        "SELECT body FROM (SELECT seq, body FROM messages WHERE thread_id = ? "
        "ORDER BY seq DESC LIMIT ?) ORDER BY seq",
        (thread_id, -1 if limit is None else limit),
    ).fetchall()
    return [str(row[0]) for row in rows]


def _rollback(conn: sqlite3.Connection) -> None:
    # SQLite rolls back by itself after some errors (a full disk, for one); don't mask those.
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _save_state(
    conn: sqlite3.Connection, thread_id: str, data: str, expected_version: int | None
) -> int | None:
    """Save `data` as the thread's next state version and return it; None (nothing saved) when
    `expected_version` is given and the stored version (0: none) is another."""
    if expected_version is None:
        sql = (
            "INSERT INTO agent_states (thread_id, data, version) VALUES (?, ?, 1) "
            "ON CONFLICT (thread_id) DO UPDATE SET data = excluded.data, "
            "version = agent_states.version + 1 RETURNING version"
        )
        row = conn.execute(sql, (thread_id, data)).fetchone()
    elif expected_version == 0:
        row = conn.execute(
            "INSERT INTO agent_states (thread_id, data, version) VALUES (?, ?, 1) "
            "ON CONFLICT (thread_id) DO NOTHING RETURNING version",
            (thread_id, data),
        ).fetchone()
    else:
        row = conn.execute(
            "UPDATE agent_states SET data = ?, version = version + 1 "
            "WHERE thread_id = ? AND version = ? RETURNING version",
            (data, thread_id, expected_version),
        ).fetchone()
    return None if row is None else int(row[0])


# Messages a single INSERT writes: 3 parameters each, 900 in all, under the 999 that SQLite
# before 3.32 allows.
_MESSAGES_PER_INSERT = 300
# Observation rows a single INSERT writes (`_observation_chunks`): any count up to
# `_EXACT_ROWS`, else a power of two up to `_MOST_ROWS` (5 parameters a row: 5120 at most,
# under the 32766 of SQLite since 3.32; an older SQLite's lower limit is read off the
# connection).
_EXACT_ROWS = 64
_MOST_ROWS = 1024


def _claim_trace(conn: sqlite3.Connection, thread_id: str, trace_id: str) -> bool:
    """Insert the `turns` row of `trace_id` (its state filled in later); False when a turn
    committed under it already holds it."""
    row = conn.execute(
        "INSERT INTO turns (thread_id, trace_id) VALUES (?, ?) "
        "ON CONFLICT (thread_id, trace_id) DO NOTHING RETURNING 1",
        (thread_id, trace_id),
    ).fetchone()
    return row is not None


class _QueuedTurn(NamedTuple):
    """A turn waiting for the worker thread, and its caller's future."""

    turn: Turn
    future: asyncio.Future[SavedState | None]


def _write_turns_at_once(
    conn: sqlite3.Connection, turns: list[Turn]
) -> list[SavedState | None] | None:
    """Write every turn in one transaction and return what each saved; None, with nothing
    written, when one of them cannot go through as it is (see `_write_turns`)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        traced = [(turn.thread_id, turn.trace_id) for turn in turns if turn.trace_id is not None]
        before = conn.total_changes
        for start in range(0, len(traced), _TRACES_PER_INSERT):
            chunk = traced[start : start + _TRACES_PER_INSERT]
            conn.execute(_claim_traces_sql(len(chunk)), [value for row in chunk for value in row])
        if conn.total_changes - before != len(traced):  # one landed before: nothing claimed
            _rollback(conn)
            return None
        _insert_messages(conn, _message_rows(turns))
        saved: list[SavedState | None] = []
        for turn in turns:
            if turn.state is None:
                saved.append(None)
                continue
            version = _save_state(conn, turn.thread_id, turn.state, turn.expected_version)
            if version is None:
                _rollback(conn)
                return None
            saved.append(SavedState(turn.state, version))
            if turn.trace_id is not None:
                _record_trace_state(conn, turn, version)
        conn.execute("COMMIT")
    except sqlite3.IntegrityError:  # a message id saved before
        _rollback(conn)
        return None
    except BaseException:
        _rollback(conn)
        raise
    return saved


def _record_trace_state(conn: sqlite3.Connection, turn: Turn, version: int) -> None:
    conn.execute(
        "UPDATE turns SET state = ?, version = ? WHERE thread_id = ? AND trace_id = ?",
        (turn.state, version, turn.thread_id, turn.trace_id),
    )


# Trace ids one INSERT claims: 2 parameters each, 800 in all, under the 999 that SQLite before
# 3.32 allows.
_TRACES_PER_INSERT = 400


@functools.cache
def _claim_traces_sql(count: int) -> str:
    """An INSERT of `count` `turns` rows that skips the ones already there."""
    return (
        "INSERT INTO turns (thread_id, trace_id) VALUES "
        + ", ".join(["(?, ?)"] * count)
        + " ON CONFLICT (thread_id, trace_id) DO NOTHING"
    )


def _message_rows(turns: list[Turn]) -> list[tuple[str, str, str]]:
    return [
        (turn.thread_id, message_id, body)
        for turn in turns
        for message_id, body in zip(turn.message_ids, turn.bodies, strict=True)
    ]


@functools.cache
def _insert_messages_sql(count: int) -> str:
    """An INSERT of `count` message rows (one statement for SQLite's cache per count)."""
    return "INSERT INTO messages (thread_id, message_id, body) VALUES " + ", ".join(
        ["(?, ?, ?)"] * count
    )


def _insert_messages(conn: sqlite3.Connection, rows: list[tuple[str, str, str]]) -> None:
    """Insert (thread id, message id, body) rows in order, up to `_MESSAGES_PER_INSERT` a
    statement (one step each, as `_insert_observations` explains), so they get their `seq`
    in the order listed."""
    for start in range(0, len(rows), _MESSAGES_PER_INSERT):
        chunk = rows[start : start + _MESSAGES_PER_INSERT]
        conn.execute(_insert_messages_sql(len(chunk)), [value for row in chunk for value in row])


@functools.cache
def _insert_observations_sql(count: int) -> str:
    """An INSERT of `count` observation rows (one statement for SQLite's cache per count)."""
    return "INSERT INTO observations (id, thread_id, trace_id, type, body) VALUES " + ", ".join(
        ["(?, ?, ?, ?, ?)"] * count
    )


def _observation_chunks(count: int, most: int) -> list[int]:
    """How many rows each INSERT of a batch of `count` takes: as few statements as may be,
    from few distinct ones (each is prepared once and kept in SQLite's statement cache, and
    a 1000-row statement is large): `count` itself up to `_EXACT_ROWS`, else the largest
    power of two not above it or `most`, and so on with the rest."""
    chunks = []
    while count > 0:
        size = count if count <= _EXACT_ROWS else min(most, 1 << (count.bit_length() - 1))
        chunks.append(size)
        count -= size
    return chunks


def _insert_observations(conn: sqlite3.Connection, *, rows: list[ObservationRow]) -> None:
    """Write `rows` in one transaction, in as few multi-row INSERTs as `_observation_chunks`
    allows.

    Not `executemany`, nor many small INSERTs: `sqlite3` lets go of the GIL around every
    step of a statement, and taking it back from an event loop that keeps it busy waits for
    the interpreter's switch interval (5 ms). With 10,000 runs at once, batches of ~2000
    rows written 100 rows a statement held this thread 130 ms each, mostly waiting for the
    GIL, while every run's reads and commits queued behind them; 1024 a statement, it is 4
    steps instead of 20. SQLite gives the rows their `seq` in the order listed, as one-row
    inserts did.
    """
    most = min(_MOST_ROWS, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // 5)
    most = 1 << (most.bit_length() - 1)  # a power of two, so a few statements serve all
    conn.execute("BEGIN IMMEDIATE")
    try:
        start = 0
        for size in _observation_chunks(len(rows), most):
            chunk = rows[start : start + size]
            start += size
            conn.execute(_insert_observations_sql(size), [value for row in chunk for value in row])
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise
