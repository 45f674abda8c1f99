"""The threads a registry's sync tools run on: bounded, owned by the registry (and its agent).

A sync `@tool` function cannot be stopped once it runs: when its call times out or is
cancelled, its thread stays busy until the function returns, perhaps never. On asyncio's
default executor a few such hung tools would stall every other `asyncio.to_thread` user of
the process. On a `ToolThreadPool` they hold only this pool's threads, and once every thread is
held by a call nobody waits for any more, new sync calls fail at once with a clear error
instead of queueing behind threads that may never come back.

Calls still awaited queue as usual when all threads are busy: each is bounded by its timeout.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from pes_agent.errors import UsageError

__all__ = ["DEFAULT_SYNC_TOOL_THREADS", "ToolThreadPool", "ToolThreadsExhausted"]

DEFAULT_SYNC_TOOL_THREADS = 32
"""Threads per registry unless told otherwise; they start only when sync tools need them."""

R = TypeVar("R")


class ToolThreadsExhausted(RuntimeError):
    """Every thread of the pool is held by a sync tool call that nobody waits for any more."""


class ToolThreadPool:
    """At most `max_threads` threads for sync tools; `await pool.run(func, *args)` uses one.

    Close it with `await pool.aclose()`: that never waits for hung threads (they end when
    their functions return), and a closed pool refuses new work.
    """

    def __init__(
        self, max_threads: int = DEFAULT_SYNC_TOOL_THREADS, *, name: str = "pes-agent-tools"
    ) -> None:
        if isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 1:
            raise UsageError(
                f"sync_threads must be an int >= 1, got {max_threads!r} "
                f"(default {DEFAULT_SYNC_TOOL_THREADS})"
            )
        self._max_threads = max_threads
        self._name = name
        self._executor: ThreadPoolExecutor | None = None
        self._abandoned = 0  # calls whose caller gave up while their thread still runs
        self._lock = threading.Lock()  # _abandoned drops in worker threads; _finished
        # Calls finished on the pool's threads, not yet handed to the loop awaiting them.
        self._finished: dict[
            asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]
        ] = {}
        self._closed = False

    @property
    def max_threads(self) -> int:
        """The most threads this pool runs at once."""
        return self._max_threads

    @property
    def abandoned(self) -> int:
        """Threads still running a call that timed out or was cancelled (a hung tool?)."""
        return self._abandoned

    @property
    def closed(self) -> bool:
        """Whether `aclose()` was called; a closed pool runs nothing more."""
        return self._closed

    async def run(self, func: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
        """Run `func(*args, **kwargs)` on one of the pool's threads and return its result.

        Raises `ToolThreadsExhausted` at once when every thread is held by an abandoned call,
        and `RuntimeError` once the pool is closed. Cancelling the await (a timeout) leaves a
        started function running: Python cannot stop a thread.
        """
        if self._closed:
            raise RuntimeError("the tool thread pool is closed (the agent was closed)")
        if self._abandoned >= self._max_threads:
            raise ToolThreadsExhausted(
                f"the pool for sync tools is exhausted: all {self._max_threads} threads are "
                "held by earlier calls that timed out or were cancelled and have not returned "
                "(a hung sync tool?). Make blocking tools async or give them a timeout of "
                "their own; the pool recovers as those calls return."
            )
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._max_threads, thread_name_prefix=self._name)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[R] = loop.create_future()
        # Like asyncio.to_thread: the function sees the caller's context variables.
        work = functools.partial(
            self._work, loop, waiter, contextvars.copy_context(), func, args, kwargs
        )
        future = self._executor.submit(work)
        try:
            return await waiter
        except BaseException:
            # A call still queued is simply dropped; one already running keeps its thread.
            if not future.cancel() and not future.done():
                self._abandon(future)
            raise

    def _work(
        self,
        loop: asyncio.AbstractEventLoop,
        waiter: asyncio.Future[Any],
        context: contextvars.Context,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        """Run one call on a pool thread and hand its outcome to the waiting loop.

        Outcomes are handed over in batches: the first one finished since the loop last took
        them wakes the loop (one `call_soon_threadsafe`, a write to its self-pipe), the others
        join that batch, so a fan-out of sync calls wakes the loop far fewer times than once
        per call (what `asyncio.wrap_future` does)."""
        try:
            outcome: tuple[asyncio.Future[Any], bool, Any] = (
                waiter,
                True,
                context.run(func, *args, **kwargs),
            )
        except BaseException as exc:  # handed to the awaiting caller, like wrap_future does
            outcome = (waiter, False, exc)
        with self._lock:
            batch = self._finished.get(loop)
            if batch is None:
                self._finished[loop] = [outcome]
            else:
                batch.append(outcome)
                return
        try:
            loop.call_soon_threadsafe(self._deliver, loop)
        except RuntimeError:  # the loop is closed: nobody is left to take the outcome
            with self._lock:
                self._finished.pop(loop, None)

    def _deliver(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop: settle the waiters of every call finished since the last delivery."""
        with self._lock:
            batch = self._finished.pop(loop, ())
        for waiter, ok, value in batch:
            if waiter.done():  # its caller gave up (cancelled, timed out)
                continue
            if ok:
                waiter.set_result(value)
            elif isinstance(value, StopIteration):  # a Future refuses StopIteration
                waiter.set_exception(RuntimeError(f"the tool raised StopIteration: {value}"))
            else:
                waiter.set_exception(value)

    def _abandon(self, future: Future[Any]) -> None:
        with self._lock:
            self._abandoned += 1
        future.add_done_callback(self._returned)

    def _returned(self, _future: Future[Any]) -> None:
        with self._lock:
            self._abandoned -= 1

    async def aclose(self) -> None:
        """Refuse new work and drop queued calls; never waits for the threads still running."""
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def __deepcopy__(self, memo: dict[int, Any]) -> ToolThreadPool:
        # A shared resource, like a connection: a deep copy of a ToolContext shares it.
        return self

    def __repr__(self) -> str:
        return (
            f"ToolThreadPool(max_threads={self._max_threads}, abandoned={self._abandoned}, "
            f"closed={self._closed})"
        )
