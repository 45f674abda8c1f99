"""Cross-process, per-thread locks for SQLite, released by the kernel when their holder dies.

Two ways, one chosen per platform by `thread_file_locks`; both poll a non-blocking attempt with
exponential backoff instead of parking an OS thread in a blocking call, so waiting costs no
threads and a cancelled waiter simply stops.

- **`ThreadRangeLocks`** (Linux): a few files, `<db>-locks/threads-NN`, each opened once per
  storage object, and an open-file-description lock (`F_OFD_SETLK`) on one byte per held
  thread, at a file and offset hashed from the thread id (63 bits: two threads sharing one is
  as likely as a SHA-256 collision of that length, so runs on different threads never wait for
  each other).
  Two system calls a run, and no file created or deleted. OFD locks belong to the open file,
  not the process: two storage objects in one process exclude each other as two processes do,
  and the kernel drops them when the file's last descriptor closes, even by SIGKILL. A forked
  child shares its parent's open file (and its locks), so it opens the file again before its
  first lock.
- **`FileLockDirectory`** (elsewhere): one `flock`ed file per held thread under `<db>-locks/`,
  which exists only while it is held or contended: the holder unlinks it before unlocking, and
  an acquirer that finds it locked a file which is no longer the one at the path (because the
  previous holder unlinked it) starts again on a fresh file, so at most one process ever holds
  the live file of a thread. Six system calls a run, two of them creating and deleting a file.

Processes sharing a database must take the same kind of lock: a pes-agent from before
`ThreadRangeLocks` takes the per-thread files, so upgrade every process on a file together.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import hashlib
import os
import struct
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Protocol

from pes_agent.errors import StorageError

__all__ = ["FileLockDirectory", "ThreadFileLocks", "ThreadRangeLocks", "thread_file_locks"]

# Linux's `struct flock` on 64-bit platforms: l_type, l_whence, l_start, l_len, l_pid (0 for
# OFD locks), in native alignment.
_FLOCK = struct.Struct("@hhqqi")
_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)
_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
# The files `ThreadRangeLocks` spreads the threads over (see there why).
_SHARDS = 64


class ThreadFileLocks(Protocol):
    """Per-thread locks shared by every process using the same directory."""

    @property
    def directory(self) -> Path:
        """Where the lock files live."""
        ...

    def hold(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the lock of `thread_id` across processes for the body of the `async with`."""
        ...

    def close(self) -> None:
        """Let go of any descriptor kept open between holds (none may be held)."""
        ...


def thread_file_locks(directory: Path, *, max_poll_s: float = 0.05) -> ThreadFileLocks:
    """The per-thread locks under `directory` this platform takes: byte ranges of one file
    where the kernel has OFD locks (64-bit Linux), else a file per held thread."""
    if _OFD_SETLK is not None and sys.platform == "linux" and sys.maxsize > 2**32:
        return ThreadRangeLocks(directory, max_poll_s=max_poll_s)
    return FileLockDirectory(directory, max_poll_s=max_poll_s)


def _make_directory(directory: Path, thread_id: str) -> None:
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise StorageError(
            f"cannot create the lock directory {directory} ({exc.strerror})", thread_id=thread_id
        ) from exc


class ThreadRangeLocks:
    """One byte of one of the files `<directory>/threads-NN` per held thread, locked with
    `F_OFD_SETLK`.

    Several files, not one, because the kernel keeps a file's locks in a list it walks on
    every lock and unlock: with 10,000 threads held at once on a single file, that walk cost
    more system time than the per-thread files did. `_SHARDS` files make each list that much
    shorter, for as many descriptors (opened as they are first needed).
    """

    __slots__ = ("_directory", "_fds", "_max_poll_s", "_pid")

    def __init__(self, directory: Path, *, max_poll_s: float = 0.05) -> None:
        self._directory = directory
        self._max_poll_s = max_poll_s
        self._fds: dict[int, int] = {}  # shard -> its file, opened by process `_pid`
        self._pid = os.getpid()

    @property
    def directory(self) -> Path:
        """Where the lock files live."""
        return self._directory

    @staticmethod
    def place_for(thread_id: str) -> tuple[int, int]:
        """The lock file (its shard number) and the byte of it that stand for `thread_id`."""
        digest = hashlib.sha256(thread_id.encode()).digest()
        return digest[8] % _SHARDS, int.from_bytes(digest[:8], "big") >> 1  # off_t is signed

    def path_for(self, shard: int) -> Path:
        """The lock file of shard number `shard`."""
        return self._directory / f"threads-{shard:02d}"

    @asynccontextmanager
    async def hold(self, thread_id: str) -> AsyncIterator[None]:
        """Hold the lock of `thread_id` across processes for the body of the `async with`."""
        shard, offset = self.place_for(thread_id)
        fd = self._descriptor(shard, thread_id)
        delay = 0.0005
        while not self._set(fd, offset, fcntl.F_WRLCK, thread_id):
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_poll_s)
        try:
            yield
        finally:
            if self._fds.get(shard) == fd:  # else `close` came first, releasing every lock
                self._set(fd, offset, fcntl.F_UNLCK, thread_id)

    def close(self) -> None:
        """Close the lock files (no thread may be held: closing releases every lock)."""
        fds, self._fds = self._fds, {}
        if self._pid == os.getpid():
            for fd in fds.values():
                os.close(fd)

    def _descriptor(self, shard: int, thread_id: str) -> int:
        if self._pid != os.getpid():
            # A forked child: its copies of the parent's descriptors share the parent's open
            # files, whose locks would count as the child's own. Left open, not closed: the
            # parent's locks must stay the parent's.
            self._fds, self._pid = {}, os.getpid()
        fd = self._fds.get(shard)
        if fd is not None:
            return fd
        _make_directory(self._directory, thread_id)
        path = self.path_for(shard)
        try:
            fd = self._fds[shard] = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StorageError(
                f"cannot open the lock file {path} ({exc.strerror})", thread_id=thread_id
            ) from exc
        return fd

    def _set(self, fd: int, offset: int, kind: int, thread_id: str) -> bool:
        """Lock (`F_WRLCK`) or unlock (`F_UNLCK`) the byte at `offset`; False when another
        open file holds it."""
        assert _OFD_SETLK is not None  # `thread_file_locks` checked
        try:
            fcntl.fcntl(fd, _OFD_SETLK, _FLOCK.pack(kind, os.SEEK_SET, offset, 1, 0))
        except OSError as exc:
            if kind == fcntl.F_WRLCK and exc.errno in _BUSY:
                return False
            raise StorageError(
                f"cannot lock a thread in {self._directory} ({exc.strerror})", thread_id=thread_id
            ) from exc
        return True


class FileLockDirectory:
    """Per-thread lock files under `directory` (created on first use), each `flock`ed."""

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
            if exc.errno in _BUSY:
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

    def close(self) -> None:
        """Nothing stays open between holds."""

    def _make_directory(self, thread_id: str) -> None:
        _make_directory(self._directory, thread_id)
        self._ready = True
