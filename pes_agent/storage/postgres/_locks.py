"""Thread locks across processes: session-level advisory locks on one dedicated connection.

Advisory locks belong to a session, so one connection can hold any number of them and a run
does not tie up a pooled connection. Acquiring polls `pg_try_advisory_lock` with exponential
backoff. The server drops a session's locks when its process dies or its connection breaks, so
a crashed worker never blocks a thread; a run whose lock went that way is told by `guard` and
saves nothing. Because every lock of the process lives on that one session, the session is
dropped only when it is really broken: a query that fails on a live session (cancelled, say)
fails that one acquire, and an unlock that fails is retried before the next acquire, never by
closing the session under the other runs' locks.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from pes_agent.errors import StorageError
from pes_agent.observing.logs import get_logger
from pes_agent.storage._locks import ThreadLockTable
from pes_agent.storage.postgres._pool import Connector

__all__ = ["AdvisoryLocks", "lock_key"]

_log = get_logger("pes_agent.storage")


def lock_key(schema: str, thread_id: str) -> int:
    """A signed 64-bit advisory-lock key for a thread (64 bits: collisions, which would make
    two threads wait for each other, are practically impossible)."""
    digest = hashlib.blake2b(f"{schema}\0{thread_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _key_halves(key: int) -> tuple[int, int]:
    """How `pg_locks` shows a bigint advisory key: (classid, objid), its high and low halves."""
    unsigned = key & 0xFFFFFFFFFFFFFFFF
    return unsigned >> 32, unsigned & 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class _Held:
    """A thread lock this process holds: the session holding it and its key."""

    conn: Any
    pid: int
    key: int


LockProof = tuple[int, int, int] | tuple[None, None, None]


class AdvisoryLocks:
    """`hold(thread_id)`: the in-process lock of the thread, then its advisory lock."""

    def __init__(
        self,
        connector: Connector,
        schema: str,
        *,
        poll_max_s: float,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self._connector = connector
        self._schema = schema
        self._poll_max_s = poll_max_s
        self._spawn = spawn
        self._local = ThreadLockTable()
        self._conn: Any = None
        self._mutex = asyncio.Lock()
        self._held: dict[str, _Held] = {}
        # Keys whose unlock failed on a session that still works: released before the next
        # acquire, since a session-level lock taken twice needs two unlocks.
        self._unreleased: set[int] = set()

    @property
    def connection(self) -> Any:
        """The session holding this process's thread locks (None until the first lock)."""
        return self._conn

    def guard(self, thread_id: str) -> LockProof:
        """(pid, classid, objid) of the advisory lock the caller holds on `thread_id`, for a
        write to check in `pg_locks`; all None when the caller holds no lock. A lock whose
        session is already gone is a `StorageError`."""
        held = self._held.get(thread_id)
        if held is None:
            return (None, None, None)
        if held.conn.is_closed():
            raise self.lost(thread_id)
        return (held.pid, *_key_halves(held.key))

    def lost(self, thread_id: str) -> StorageError:
        """The error of a write whose thread lock the server dropped with its session."""
        return StorageError(
            f"the cross-process lock on thread {thread_id!r} was lost (its connection to "
            f"{self._connector.safe_url} closed); nothing of this turn was saved",
            thread_id=thread_id,
        )

    @asynccontextmanager
    async def hold(self, thread_id: str) -> AsyncIterator[None]:
        """Hold `thread_id` in this process and across processes for the `async with` body."""
        async with self._local.hold(thread_id):
            await self._connector.pool()  # the schema exists before anyone holds a thread
            key = lock_key(self._schema, thread_id)
            conn = await self._acquire(key, thread_id)
            self._held[thread_id] = _Held(conn, conn.get_server_pid(), key)
            try:
                yield
            finally:
                del self._held[thread_id]
                await asyncio.shield(self._release(conn, key, thread_id))

    def _broken(self, conn: Any, exc: BaseException) -> bool:
        asyncpg = self._connector.asyncpg
        return bool(
            conn.is_closed() or isinstance(exc, OSError | asyncpg.ConnectionDoesNotExistError)
        )

    async def _try(self, key: int, thread_id: str) -> Any:
        async with self._mutex:
            conn = self._conn
            if conn is None or conn.is_closed():
                self._unreleased.clear()  # the server released them with the old session
                conn = self._conn = await self._connector.connect()
            try:
                for stale in tuple(self._unreleased):
                    await conn.fetchval("SELECT pg_advisory_unlock($1)", stale)
                    self._unreleased.discard(stale)
                got = await conn.fetchval("SELECT pg_try_advisory_lock($1)", key)
            except self._connector.db_errors as exc:
                if self._broken(conn, exc):
                    # The session, and every lock it held, is gone: start afresh next time.
                    self._conn = None
                    conn.terminate()
                raise self._connector.query_error(exc, thread_id) from exc
            return conn if got else None

    async def _acquire(self, key: int, thread_id: str) -> Any:
        delay = 0.0005
        while True:
            # Shielded: if we are cancelled after the server granted the lock, it must still
            # be released, or the thread would stay locked for every process.
            attempt = asyncio.ensure_future(self._try(key, thread_id))
            try:
                conn = await asyncio.shield(attempt)
            except asyncio.CancelledError:
                attempt.add_done_callback(lambda done: self._release_abandoned(done, key))
                raise
            if conn is not None:
                return conn
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._poll_max_s)

    def _release_abandoned(self, done: asyncio.Future[Any], key: int) -> None:
        if done.cancelled() or done.exception() is not None or done.result() is None:
            return
        self._spawn(self._release(done.result(), key, None))

    async def _release(self, conn: Any, key: int, thread_id: str | None) -> None:
        if conn.is_closed():
            return  # the server released it with the session
        async with self._mutex:
            try:
                released = await conn.fetchval("SELECT pg_advisory_unlock($1)", key)
            except self._connector.db_errors as exc:
                broken = self._broken(conn, exc)
                _log.warning(
                    "thread_unlock_failed",
                    thread_id=thread_id,
                    error=self._connector.scrub(str(exc)),
                    note="the server released it with the session"
                    if broken
                    else "retried before the next lock is taken",
                )
                if broken:
                    if conn is self._conn:
                        self._conn = None
                    conn.terminate()
                elif conn is self._conn:
                    self._unreleased.add(key)
                return
        if not released:
            _log.warning("thread_lock_was_not_held", thread_id=thread_id)

    async def aclose(self) -> None:
        """Close the session, which releases whatever it still holds."""
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            await conn.close()
