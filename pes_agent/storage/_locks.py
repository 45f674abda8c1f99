"""In-process, per-thread locks shared by every storage backend."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from pes_agent.errors import UsageError

__all__ = ["ThreadLockTable"]


@dataclass(slots=True)
class _Entry:
    lock: asyncio.Lock
    users: int = 0
    owner: asyncio.Task[Any] | None = None


class ThreadLockTable:
    """One `asyncio.Lock` per thread id, created on first use and dropped when nobody holds or
    waits for it, so a long-lived process serving millions of threads does not grow forever.

    The lock is not reentrant: a task that asks again for a thread it already holds gets a
    `UsageError` instead of a silent deadlock.
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def __len__(self) -> int:
        """How many threads are currently held or waited for."""
        return len(self._entries)

    def held_by_current_task(self, thread_id: str) -> bool:
        """Whether the calling task holds `thread_id` through this table."""
        entry = self._entries.get(thread_id)
        return entry is not None and entry.owner is not None and entry.owner is _current()

    def hold(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        """Hold `thread_id` for the body of the `async with`."""
        return _Hold(self._entries, thread_id)


class _Hold:
    """One `async with` of `ThreadLockTable.hold` (a class, not a generator: one object a
    run, since every run holds its thread)."""

    __slots__ = ("_entries", "_entry", "_thread_id")

    def __init__(self, entries: dict[str, _Entry], thread_id: str) -> None:
        self._entries = entries
        self._thread_id = thread_id
        self._entry: _Entry | None = None

    async def __aenter__(self) -> None:
        thread_id = self._thread_id
        task = _current()
        entry = self._entries.get(thread_id)
        if entry is None:
            entry = self._entries[thread_id] = _Entry(asyncio.Lock())
        elif task is not None and entry.owner is task:
            raise UsageError(
                f"lock_thread({thread_id!r}) is not reentrant: this task already holds it; "
                "do the work inside the existing `async with storage.lock_thread(...)` block"
            )
        entry.users += 1
        try:
            await entry.lock.acquire()
        except BaseException:
            self._leave(entry)
            raise
        entry.owner = task
        self._entry = entry

    async def __aexit__(self, *exc_info: object) -> None:
        entry = self._entry
        if entry is None:
            return
        self._entry = None
        entry.owner = None
        entry.lock.release()
        self._leave(entry)

    def _leave(self, entry: _Entry) -> None:
        entry.users -= 1
        if entry.users == 0:
            del self._entries[self._thread_id]


def _current() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None
