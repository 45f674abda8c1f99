"""run_eagerly: a coroutine's first step at once, the rest awaited like the coroutine itself."""

from __future__ import annotations

import asyncio

import pytest

from pes_agent.execution._eager import run_eagerly


async def test_a_coroutine_that_does_not_wait_finishes_at_once() -> None:
    done: list[str] = []

    async def quick() -> None:
        done.append("quick")

    assert run_eagerly(quick()) is None
    assert done == ["quick"]


async def test_the_rest_of_a_waiting_coroutine_runs_when_awaited() -> None:
    steps: list[str] = []

    async def slow() -> None:
        steps.append("before")
        await asyncio.sleep(0.01)
        steps.append("after")

    rest = run_eagerly(slow())
    assert rest is not None
    assert steps == ["before"]
    await rest
    assert steps == ["before", "after"]


async def test_an_error_after_the_wait_is_raised_by_the_rest() -> None:
    async def failing() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    rest = run_eagerly(failing())
    assert rest is not None
    with pytest.raises(ValueError, match="boom"):
        await rest


async def test_cancelling_the_awaiting_task_cancels_the_coroutine() -> None:
    cleaned: list[str] = []
    started = asyncio.Event()

    async def hook() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            cleaned.append("finally")

    async def runner() -> None:
        rest = run_eagerly(hook())
        assert rest is not None
        started.set()
        await rest

    task = asyncio.create_task(runner())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["finally"]


async def test_a_cancellation_the_coroutine_swallows_lets_it_finish() -> None:
    async def stubborn() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            assert current is not None
            current.uncancel()
        await asyncio.sleep(0)

    async def runner() -> str:
        rest = run_eagerly(stubborn())
        assert rest is not None
        await rest
        return "finished"

    task = asyncio.create_task(runner())
    await asyncio.sleep(0.01)
    task.cancel()
    assert await task == "finished"
