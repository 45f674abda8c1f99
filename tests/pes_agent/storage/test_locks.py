"""The in-process thread lock table: exclusion, and no entry left once nobody holds a thread."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager

import pytest

from pes_agent.errors import UsageError
from pes_agent.storage._locks import ThreadLockTable


async def test_the_table_forgets_a_thread_nobody_holds_or_waits_for() -> None:
    """After holders and a cancelled waiter are gone, the table keeps no entry."""
    table = ThreadLockTable()
    release = asyncio.Event()
    holding = asyncio.Event()

    async def holder() -> None:
        async with table.hold("t"):
            holding.set()
            await release.wait()

    async def waiter() -> None:
        async with table.hold("t"):
            pass

    held = asyncio.create_task(holder())
    await holding.wait()
    assert table.held_by_current_task("t") is False
    waiting = [asyncio.create_task(waiter()) for _ in range(3)]
    await asyncio.sleep(0)
    waiting[1].cancel()
    assert len(table) == 1
    release.set()
    await held
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert [isinstance(r, asyncio.CancelledError) for r in results] == [False, True, False]
    assert len(table) == 0


async def test_holds_taken_before_the_lock_was_dropped_still_exclude() -> None:
    """Context managers obtained from `hold` before the thread's lock was dropped (or before
    another was made) still take turns with each other and with new ones."""
    table = ThreadLockTable()
    early = [table.hold("t") for _ in range(2)]  # neither registered in the table yet
    async with table.hold("t"):
        pass  # made, registered and dropped
    inside = 0
    most = 0

    async def enter(hold: AbstractAsyncContextManager[None]) -> None:
        nonlocal inside, most
        async with hold:
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.001)
            assert table.held_by_current_task("t")
            inside -= 1

    await asyncio.gather(*(enter(h) for h in [*early, table.hold("t"), table.hold("t")]))
    assert most == 1
    assert len(table) == 0


async def test_a_held_thread_is_not_reentrant_through_an_old_hold() -> None:
    """A task holding the thread asking again through any hold gets the usage error."""
    table = ThreadLockTable()
    old = table.hold("t")
    async with table.hold("t"):
        with pytest.raises(UsageError, match="not reentrant"):
            async with old:
                pass
    assert len(table) == 0


async def test_leaving_twice_does_not_release_the_next_holder() -> None:
    """A block left a second time (by hand) leaves the thread to whoever holds it next."""
    table = ThreadLockTable()
    first = table.hold("t")
    await first.__aenter__()
    holding = asyncio.Event()
    release = asyncio.Event()

    async def next_holder() -> None:
        async with table.hold("t"):
            holding.set()
            await release.wait()

    waiting = asyncio.create_task(next_holder())
    await asyncio.sleep(0)
    await first.__aexit__(None, None, None)
    await holding.wait()
    await first.__aexit__(None, None, None)  # must not free the next holder's lock
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05), table.hold("t"):
            pass
    release.set()
    await waiting
    assert len(table) == 0
