"""`SQLiteStorage`: the embedded, persistent store (`storage="sqlite:///agent.db"`).

- **Never blocks the event loop.** Each storage object owns one connection used by one
  dedicated thread; every query runs there, in the order the calls were made (so a read
  always sees the writes made before it through the same object).
- **Several processes on one file.** WAL mode (readers never wait for the writer), a busy
  timeout for writers, and `BEGIN IMMEDIATE` for every read-modify-write so two writers cannot
  deadlock upgrading a read lock.
- **Runs on one thread are serialised across processes** by `lock_thread`: an in-process
  `asyncio.Lock` per thread, then an `flock`ed lock file per thread (`<db>-locks/`, see
  `_filelock`). The kernel drops the file lock when its holder dies, even by SIGKILL, so a
  crashed worker never blocks a thread. Runs on different threads never wait for each other.
  `":memory:"` databases live in one process, so they use the in-process lock only.
- **Atomic turns.** `commit_turn` writes the messages and the state in one transaction: a crash
  leaves the whole turn or nothing. Observations are committed one by one as they are
  recorded, so those recorded before a crash survive it.
- **Durability.** `synchronous=NORMAL` (the WAL default): a committed turn survives the process
  crashing; a power cut may lose the last few commits. Pass `synchronous="FULL"` to fsync
  every commit.
- **Schema.** Created on first use and recorded in `schema_version`; older files are migrated
  step by step (`MIGRATIONS`); a file written by a newer pes-agent is refused with a
  `ConfigurationError` instead of being misread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import queue
import sqlite3
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Literal, Self, TypeVar

from pes_agent._closing import ClosedOnExit
from pes_agent.config import AgentState, ThreadConfig
from pes_agent.errors import ConfigurationError, StorageError, UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.storage import _codec
from pes_agent.storage._filelock import FileLockDirectory
from pes_agent.storage._locks import ThreadLockTable
from pes_agent.threads.messages import ConversationMessage

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
}
SCHEMA_VERSION = max(MIGRATIONS)

_UPSERT_STATE = (
    "INSERT INTO agent_states (thread_id, data, version) VALUES (?, ?, 1) "
    "ON CONFLICT (thread_id) DO UPDATE SET data = excluded.data, "
    "version = agent_states.version + 1 RETURNING version"
)
_INSERT_MESSAGE = "INSERT INTO messages (thread_id, message_id, body) VALUES (?, ?, ?)"


class SQLiteStorage(ClosedOnExit):
    """A SQLite file (or `":memory:"`) holding threads, history, state and observations.

    `SQLiteStorage("agent.db")` opens nothing until first use, then creates or migrates the
    schema. Close it with `await storage.aclose()` or `async with SQLiteStorage(...)`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 30.0,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        lock_poll_max_s: float = 0.05,
    ) -> None:
        self._path = os.fspath(path)
        if not self._path:
            raise UsageError("SQLiteStorage needs a file path, or ':memory:'")
        if busy_timeout_s <= 0:
            raise UsageError("busy_timeout_s must be > 0 seconds")
        if synchronous not in ("NORMAL", "FULL"):
            raise UsageError("synchronous must be 'NORMAL' or 'FULL'")
        self._busy_timeout_ms = int(busy_timeout_s * 1000)
        self._synchronous = synchronous
        self._in_memory = self._path == ":memory:" or self._path.startswith("file::memory:")
        self._file_locks = (
            None
            if self._in_memory
            else FileLockDirectory(Path(self._path + "-locks"), max_poll_s=lock_poll_max_s)
        )
        self._locks = ThreadLockTable()
        self._worker: _DatabaseThread | None = None
        # Observations waiting for the worker, written together in one transaction.
        self._pending_observations: list[tuple[str, str, str, str, str]] = []
        self._pending_lock = threading.Lock()
        self._flush_queued = False
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"SQLiteStorage({self._path!r})"

    @property
    def path(self) -> str:
        """The database file (or `":memory:"`)."""
        return self._path

    async def __aenter__(self) -> Self:
        await self.initialize()
        return self

    async def initialize(self) -> None:
        """Open the database and create or migrate its schema now rather than on first use."""
        await self._call(lambda conn: None)

    # -- the worker thread ------------------------------------------------------------------

    async def _call(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        return await self._worker_thread().call(functools.partial(self._run, work))

    def _worker_thread(self) -> _DatabaseThread:
        if self._closed:
            raise UsageError(f"{self!r} is closed: open a new storage object")
        worker = self._worker
        if worker is None:
            worker = self._worker = _DatabaseThread(f"pes-sqlite:{os.path.basename(self._path)}")
            # A store dropped without aclose() must not leave its thread behind forever.
            weakref.finalize(self, worker.stop)
        return worker

    def _submit(self, work: Callable[[sqlite3.Connection], None]) -> None:
        """Queue `work` for the worker without waiting for it; a failure is logged."""
        worker = self._worker_thread()
        path = self._path

        def logged() -> None:
            try:
                self._run(work)
            except Exception:
                _log.exception("sqlite_background_write_failed", path=path)

        worker.submit(logged)

    def _run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        conn = self._conn if self._conn is not None else self._open()
        try:
            return work(conn)
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite error on {self._path!r}: {exc}") from exc

    def _open(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self._path,
                timeout=self._busy_timeout_ms / 1000,
                isolation_level=None,
                uri=self._path.startswith("file:"),
            )
        except sqlite3.Error as exc:
            raise ConfigurationError(
                f"cannot open the SQLite database {self._path!r} ({exc}): check that its "
                "directory exists and is writable"
            ) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            if not self._in_memory:
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            _migrate(conn, self._path)
        except sqlite3.OperationalError as exc:
            conn.close()
            if "locked" not in str(exc):
                raise ConfigurationError(
                    f"cannot use {self._path!r} as a pes-agent SQLite database ({exc})"
                ) from exc
            raise StorageError(
                f"SQLite database {self._path!r} stayed locked by another connection for "
                f"{self._busy_timeout_ms / 1000:g} s while opening it ({exc})"
            ) from exc
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise ConfigurationError(
                f"cannot use {self._path!r} as a pes-agent SQLite database ({exc})"
            ) from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    # -- threads ----------------------------------------------------------------------------

    async def get_thread_config(self, thread_id: str) -> ThreadConfig | None:
        """The thread's saved config, or None if it was never configured."""

        def read(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(
                "SELECT config FROM thread_configs WHERE thread_id = ?", (thread_id,)
            ).fetchone()
            return None if row is None else str(row[0])

        text = await self._call(read)
        return None if text is None else _codec.load_config(text)

    async def set_thread_config(self, thread_id: str, config: ThreadConfig) -> None:
        """Replace the thread's config."""
        text = _codec.dump_config(config, thread_id)
        await self._call(
            lambda conn: _execute(
                conn,
                "INSERT INTO thread_configs (thread_id, config) VALUES (?, ?) "
                "ON CONFLICT (thread_id) DO UPDATE SET config = excluded.config",
                (thread_id, text),
            )
        )

    async def get_agent_state(self, thread_id: str) -> AgentState | None:
        """The thread's saved state, or None if none was saved."""

        def read(conn: sqlite3.Connection) -> tuple[str, int] | None:
            row = conn.execute(
                "SELECT data, version FROM agent_states WHERE thread_id = ?", (thread_id,)
            ).fetchone()
            return None if row is None else (str(row[0]), int(row[1]))

        found = await self._call(read)
        return None if found is None else _codec.load_state(*found)

    async def set_agent_state(self, thread_id: str, state: AgentState) -> AgentState:
        """Save `state` as the next version (stored version + 1) and return what was saved."""
        data = _codec.dump_state_data(state, thread_id)

        def write(conn: sqlite3.Connection) -> int:
            return int(conn.execute(_UPSERT_STATE, (thread_id, data)).fetchone()[0])

        return _codec.load_state(data, await self._call(write))

    # -- messages ---------------------------------------------------------------------------

    async def add_messages(self, thread_id: str, messages: Sequence[ConversationMessage]) -> None:
        """Append messages to the thread's history, all or none."""
        await self.commit_turn(thread_id, messages, None)

    async def get_messages(
        self, thread_id: str, *, limit: int | None = None
    ) -> list[ConversationMessage]:
        """The newest `limit` messages (all when None), oldest first."""
        limit = _codec.check_limit(limit)

        def read(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT body FROM (SELECT seq, body FROM messages WHERE thread_id = ? "
                "ORDER BY seq DESC LIMIT ?) ORDER BY seq",
                (thread_id, -1 if limit is None else limit),
            ).fetchall()
            return [str(row[0]) for row in rows]

        return [_codec.load_message(text) for text in await self._call(read)]

    async def commit_turn(
        self,
        thread_id: str,
        messages: Sequence[ConversationMessage],
        state: AgentState | None,
    ) -> AgentState | None:
        """Save a run's messages and (if given) its state in one transaction."""
        rows = [(thread_id, m.message_id, _codec.dump_message(m, thread_id)) for m in messages]
        data = _codec.dump_state_data(state, thread_id) if state is not None else None
        if not rows and data is None:
            return None

        def write(conn: sqlite3.Connection) -> int | None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if rows:
                    conn.executemany(_INSERT_MESSAGE, rows)
                version = (
                    None
                    if data is None
                    else int(conn.execute(_UPSERT_STATE, (thread_id, data)).fetchone()[0])
                )
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
            return version

        version = await self._call(write)
        return None if version is None or data is None else _codec.load_state(data, version)

    # -- observations -----------------------------------------------------------------------

    async def add_observation(self, observation: Observation) -> None:
        """Append an observation to its thread's log.

        It is queued for the store's worker thread, which writes the observations recorded
        meanwhile in one transaction — a run records a dozen or more, and one commit each
        would cost more than the rest of the run. The worker runs everything in order, so any
        later read, `commit_turn` or `aclose` sees it; a write that fails is logged.
        """
        row = (
            observation.id,
            observation.thread_id,
            observation.trace_id,
            observation.type.value,
            _codec.dump_observation(observation),
        )
        with self._pending_lock:
            self._pending_observations.append(row)
            if self._flush_queued:
                return
            self._flush_queued = True
        self._submit(self._write_pending_observations)

    def _write_pending_observations(self, conn: sqlite3.Connection) -> None:
        with self._pending_lock:
            rows, self._pending_observations = self._pending_observations, []
            self._flush_queued = False
        if not rows:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "INSERT INTO observations (id, thread_id, trace_id, type, body) "
                "VALUES (?, ?, ?, ?, ?)",
                rows,
            )
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    async def get_observations(
        self,
        thread_id: str,
        *,
        types: Sequence[ObservationType] | None = None,
        trace_id: str | None = None,
    ) -> list[Observation]:
        """The thread's observations in recording order, optionally of some types or one trace."""
        sql = "SELECT body FROM observations WHERE thread_id = ?"
        params: list[str] = [thread_id]
        if trace_id is not None:
            sql += " AND trace_id = ?"
            params.append(trace_id)
        if types is not None:
            kinds = sorted({ObservationType(t).value for t in types})
            if not kinds:
                return []
            sql += f" AND type IN ({', '.join('?' * len(kinds))})"
            params.extend(kinds)
        sql += " ORDER BY seq"

        def read(conn: sqlite3.Connection) -> list[str]:
            return [str(row[0]) for row in conn.execute(sql, params).fetchall()]

        return [_codec.load_observation(text) for text in await self._call(read)]

    # -- whole threads ----------------------------------------------------------------------

    async def list_threads(self) -> list[str]:
        """Every thread with a config, state, message or observation, sorted by id."""

        def read(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT thread_id FROM thread_configs UNION SELECT thread_id FROM agent_states "
                "UNION SELECT thread_id FROM messages UNION SELECT thread_id FROM observations "
                "ORDER BY thread_id"
            ).fetchall()
            return [str(row[0]) for row in rows]

        return await self._call(read)

    async def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's config, state, messages and observations in one transaction."""

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for table in ("thread_configs", "agent_states", "messages", "observations"):
                    conn.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise

        await self._call(write)

    def lock_thread(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        """Serialise runs on `thread_id` across every process using this file.

        Not reentrant. Other threads are never blocked. The lock is released when the block
        exits, or by the kernel if the process dies.
        """
        return self._hold(thread_id)

    @asynccontextmanager
    async def _hold(self, thread_id: str) -> AsyncIterator[None]:
        async with self._locks.hold(thread_id):
            if self._file_locks is None:
                yield
            else:
                async with self._file_locks.hold(thread_id):
                    yield

    async def aclose(self) -> None:
        """Close the connection and stop the worker thread; safe to call twice."""
        if self._closed:
            return
        self._closed = True
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
    """

    __slots__ = ("_queue", "_thread")

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[
            tuple[asyncio.AbstractEventLoop | None, asyncio.Future[Any] | None, Callable[[], Any]]
            | None
        ] = queue.SimpleQueue()
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
                outcome: tuple[Any, BaseException | None] = (work(), None)
            except BaseException as exc:
                outcome = (None, exc)
            # RuntimeError: the caller's event loop is closed, so nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, *outcome)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return  # the caller was cancelled; the work itself still ran to completion
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


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


def _recorded_version(conn: sqlite3.Connection) -> int | None:
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if exists is None:
        return None
    row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _rollback(conn: sqlite3.Connection) -> None:
    # SQLite rolls back by itself after some errors (a full disk, for one); don't mask those.
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _execute(conn: sqlite3.Connection, sql: str, params: Sequence[object]) -> None:
    conn.execute(sql, params)
