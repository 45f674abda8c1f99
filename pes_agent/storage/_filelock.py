"""Cross-process, per-thread locks for SQLite: one `flock`ed file per thread that is held.

Why `flock`: the kernel releases it when its holder dies, even by SIGKILL, so a crashed worker
can never leave a thread locked. Why one file per held thread (not a striped set): runs on
different threads must never wait for each other. The file exists only while it is held or
contended: the holder unlinks it before unlocking, and an acquirer that finds it locked a file
which is no longer the one at the path (because the previous holder unlinked it) starts again
on a fresh file, so at most one process ever holds the live file of a thread.

Acquiring polls a non-blocking `flock` with exponential backoff instead of parking an OS
thread in a blocking call: waiting costs no threads and a cancelled waiter simply stops. The
system calls involved touch only a local directory and return in microseconds.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from pes_agent.errors import StorageError

__all__ = ["FileLockDirectory"]


class FileLockDirectory:
    """Per-thread lock files under `directory` (created on first use)."""

    __slots__ = ("_directory", "_max_poll_s", "_ready")

    def __init__(self, directory: Path, *, max_poll_s: float = 0.05) -> None:
        self._directory = directory
        self._max_poll_s = max_poll_s
        self._ready = False

    @property
    def directory(self) -> Path:
        """Where the lock files live."""
        return self._directory

    def path_for(self, thread_id: str) -> Path:
        """The lock file of `thread_id` (a hash, so any thread id makes a safe file name)."""
        digest = hashlib.sha256(thread_id.encode()).hexdigest()[:40]
        return self._directory / f"{digest}.lock"

    @asynccontextmanager
    async def hold(self, thread_id: str) -> AsyncIterator[None]:
        """Hold the lock of `thread_id` across processes for the body of the `async with`."""
        path = self.path_for(thread_id)
        fd = await self._acquire(path, thread_id)
        try:
            yield
        finally:
            # Unlink while still holding the lock: see the module docstring for why this is safe.
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            finally:
                os.close(fd)  # closing the last descriptor releases the flock

    async def _acquire(self, path: Path, thread_id: str) -> int:
        delay = 0.0005
        while True:
            fd = self._try_lock(path, thread_id)
            if fd is not None:
                return fd
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_poll_s)

    def _try_lock(self, path: Path, thread_id: str) -> int | None:
        if not self._ready:
            self._make_directory(thread_id)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            self._ready = False  # the directory was removed under us; make it again next time
            return None
        except OSError as exc:
            raise StorageError(
                f"cannot open the lock file {path} ({exc.strerror})", thread_id=thread_id
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
            raise StorageError(f"cannot lock {path} ({exc.strerror})", thread_id=thread_id) from exc
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if not same:
            # We locked a file its previous holder has already unlinked: start again.
            os.close(fd)
            return None
        return fd

    def _make_directory(self, thread_id: str) -> None:
        try:
            self._directory.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot create the lock directory {self._directory} ({exc.strerror})",
                thread_id=thread_id,
            ) from exc
        self._ready = True
