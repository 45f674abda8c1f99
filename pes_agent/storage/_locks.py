"""In-process, per-thread locks shared by every storage backend."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from typing import Any

from pes_agent.errors import UsageError

__all__ = ["ThreadLockTable"]


class ThreadLockTable:
    """One `asyncio.Lock` per thread id, created on first use and dropped when nobody holds or
    waits for it, so a long-lived process serving millions of threads does not grow forever.

    The lock is not reentrant: a task that asks again for a thread it already holds gets a
    `UsageError` instead of a silent deadlock.
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[str, _ThreadLock] = {}

    def __len__(self) -> int:
        """How many threads are currently held or waited for."""
        return len(self._entries)

    def held_by_current_task(self, thread_id: str) -> bool:
        """Whether the calling task holds `thread_id` through this table."""
        entry = self._entries.get(thread_id)
        return entry is not None and entry.owner is not None and entry.owner is _current()

    def hold(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        """Hold `thread_id` for the body of the `async with`."""
        entry = self._entries.get(thread_id)
        return _ThreadLock(self._entries, thread_id) if entry is None else entry


class _ThreadLock(asyncio.Lock):
    """A thread's lock, its table entry and the `async with` of `ThreadLockTable.hold` in one
    object: every run holds its thread for its whole length, and one object a run instead of
    three (lock, entry, hold) is less for the garbage collector to walk at 10,000 runs at once.

    Being its own context manager needs no state per `async with`: a block enters whichever
    lock its table has for the thread when it starts (this one, unless another was registered
    since `hold`), and leaves the one the table has then, which is the one it entered, since
    a held lock is never dropped from its table.
    """

    __slots__ = ("entries", "owner", "thread_id", "users")

    def __init__(self, entries: dict[str, _ThreadLock], thread_id: str) -> None:
        super().__init__()
        self.entries = entries
        self.thread_id = thread_id
        self.users = 0  # holding or waiting: dropped from the table at 0
        self.owner: asyncio.Task[Any] | None = None

    async def __aenter__(self) -> None:
        thread_id = self.thread_id
        task = _current()
        entry = self.entries.get(thread_id)
        if entry is None:
            entry = self.entries[thread_id] = self
        elif task is not None and entry.owner is task:
            raise UsageError(
                f"lock_thread({thread_id!r}) is not reentrant: this task already holds it; "
                "do the work inside the existing `async with storage.lock_thread(...)` block"
            )
        entry.users += 1
        try:
            await entry.acquire()
        except BaseException:
            entry._leave()
            raise
        entry.owner = task

    async def __aexit__(self, *exc_info: object) -> None:
        entry = self.entries.get(self.thread_id)
        if entry is None or entry.owner is not _current():
            return  # left already: the lock is free, or another task's by now
        entry.owner = None
        entry.release()
        entry._leave()

    def _leave(self) -> None:
        self.users -= 1
        if self.users == 0:
            del self.entries[self.thread_id]


def _current() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None
