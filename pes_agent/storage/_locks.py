"""In-process, per-thread locks shared by every storage backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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

    @asynccontextmanager
    async def hold(self, thread_id: str) -> AsyncIterator[None]:
        """Hold `thread_id` for the body of the `async with`."""
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
            try:
                entry.owner = task
                yield
            finally:
                entry.owner = None
                entry.lock.release()
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[thread_id]


def _current() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None
