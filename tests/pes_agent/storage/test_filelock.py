"""Cross-process per-thread locks (`_filelock`): the byte-range lock file and the file per
thread kept for platforms without OFD locks."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from pes_agent.storage._filelock import FileLockDirectory, ThreadRangeLocks, thread_file_locks

from .conftest import assert_holds_exclude

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="OFD locks are Linux's")


@linux_only
def test_linux_takes_byte_range_locks(tmp_path: Path) -> None:
    """On 64-bit Linux the locks are byte ranges of one file."""
    assert isinstance(thread_file_locks(tmp_path / "locks"), ThreadRangeLocks)


def test_each_thread_has_its_own_byte() -> None:
    """Thread ids map to distinct, non-negative offsets (off_t is signed), spread over all
    the lock files."""
    places = [ThreadRangeLocks.place_for(f"thread-{i}") for i in range(10_000)]
    assert len({offset for _, offset in places}) == 10_000
    assert all(0 <= offset < 2**63 for _, offset in places)
    assert len({shard for shard, _ in places}) == 64


@linux_only
async def test_a_range_lock_excludes_another_open_file_until_released(tmp_path: Path) -> None:
    """A second lock table on the same directory waits while the thread is held, gets it once
    released, and never waits for another thread."""
    first = ThreadRangeLocks(tmp_path, max_poll_s=0.01)
    second = ThreadRangeLocks(tmp_path, max_poll_s=0.01)
    await assert_holds_exclude(first.hold, second.hold)
    first.close()
    second.close()


@linux_only
def test_a_forked_child_does_not_share_its_parents_locks(tmp_path: Path) -> None:
    """A child forked while its parent holds a thread cannot take that thread (the parent's
    open file is not reused for the child's locks), but can take another."""
    locks = ThreadRangeLocks(tmp_path, max_poll_s=0.01)
    loop = asyncio.new_event_loop()
    held = locks.hold("t")
    loop.run_until_complete(held.__aenter__())
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if "t" stays held and "u" is free
        code = 1
        try:
            child_loop = asyncio.new_event_loop()

            async def attempt(thread_id: str) -> bool:
                try:
                    async with asyncio.timeout(0.3), locks.hold(thread_id):
                        return True
                except TimeoutError:
                    return False

            if not child_loop.run_until_complete(attempt("t")):
                code = 0 if child_loop.run_until_complete(attempt("u")) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    loop.run_until_complete(held.__aexit__(None, None, None))
    loop.close()
    locks.close()
    assert os.waitstatus_to_exitcode(status) == 0


async def test_lock_directory_files_are_removed_once_released(tmp_path: Path) -> None:
    """With a file per thread, a thread's lock file exists only while the thread is held."""
    locks = FileLockDirectory(tmp_path / "locks")
    async with locks.hold("t"):
        assert len(list((tmp_path / "locks").iterdir())) == 1
    assert list((tmp_path / "locks").iterdir()) == []


async def test_a_stale_unlocked_lock_file_does_not_block(tmp_path: Path) -> None:
    """A lock file left behind by a dead process is taken over, not waited on."""
    locks = FileLockDirectory(tmp_path / "locks")
    (tmp_path / "locks").mkdir()
    stale = locks.path_for("t")
    stale.touch()
    async with asyncio.timeout(10), locks.hold("t"):
        pass
    assert not stale.exists()
