"""The per-call timeouts of one execution, kept on one timer.

`asyncio.timeout()` around every call schedules a timer on the event loop's heap and cancels
it when the call returns; a cancelled timer stays on the heap until the loop sweeps it, so a
plan of 1,000 calls pushes 1,000 timers, each far in the future, through a heap that grows
with them (measured at 3 to 10 µs a call, the dearest part of running a no-op tool). Calls
of one execution share their timeouts here instead: each call's deadline goes on a small heap
of this execution's own, and one loop timer waits for the earliest. A call that returns only
marks its deadline done; the timer, when it fires, cancels the calls whose deadlines passed
and re-arms for the next.

The timer is armed on the loop's next turn, and only if a call is still running then: most
calls (a lookup, a computation) return without waiting, and a timer armed for them would be
cancelled at once, yet stay on the loop's heap for the whole timeout with a copy of the
run's context (at 10,000 runs at once, tens of thousands of objects the collector scans).
The deadlines are absolute, so arming late does not move them.

The outcome is `asyncio.timeout`'s: the call's task is cancelled at its deadline, and the call
tells its own expiry from a cancellation that came from elsewhere by `Deadline.expired` and
the task's `cancelling()` count, which it restores (`Deadline.settle`).
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq

__all__ = ["Deadline", "Deadlines"]


class Deadline:
    """One running call's deadline (`at`, on the loop's clock)."""

    __slots__ = ("_owner", "at", "cancelling", "done", "expired", "task")

    def __init__(self, at: float, task: asyncio.Task[object], owner: Deadlines) -> None:
        self.at = at
        self.task = task
        self._owner = owner  # counts the calls still running
        self.cancelling = task.cancelling()  # cancellations already asked of the task
        self.done = False
        self.expired = False

    def __lt__(self, other: Deadline) -> bool:
        return self.at < other.at

    def settle(self) -> bool:
        """The call ended: whether it ended because its deadline passed (its task's
        cancellation is then taken back, as `asyncio.timeout` does)."""
        if not self.done:
            self._owner._running -= 1
        self.done = True
        if not self.expired:
            return False
        self.expired = False
        return self.task.uncancel() <= self.cancelling


class Deadlines:
    """The deadlines of the calls of one execution, on one loop timer."""

    __slots__ = ("_arming", "_heap", "_loop", "_running", "_timer")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._heap: list[Deadline] = []
        self._timer: asyncio.TimerHandle | None = None
        self._arming = False  # `_arm` is due on the loop's next turn
        self._running = 0  # deadlines started and not settled

    def start(self, timeout_s: float) -> Deadline:
        """The deadline of a call starting now in the current task, `timeout_s` from now."""
        task = asyncio.current_task(self._loop)  # the loop given: one call less
        if task is None:  # pragma: no cover - executors always run in a task
            raise RuntimeError("a call's deadline needs a task to cancel")
        deadline = Deadline(self._loop.time() + timeout_s, task, self)
        self._running += 1
        heapq.heappush(self._heap, deadline)
        timer = self._timer
        if timer is None:
            if not self._arming:  # armed on the next turn, if a call still runs then
                self._arming = True
                # In a context of no variables: the loop would copy the run's for it. A new
                # one each time: a Context is entered by one thread at a time, and other
                # threads' loops may arm theirs at the same moment.
                self._loop.call_soon(self._arm, context=contextvars.Context())
        elif deadline.at < timer.when():
            timer.cancel()
            self._timer = self._loop.call_at(deadline.at, self._expire)
        return deadline

    def close(self) -> None:
        """Stop the timer (the execution is over)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._heap.clear()

    def _arm(self) -> None:
        """Set the timer for the earliest deadline of a call still running, if any."""
        self._arming = False
        if not self._running:
            self._heap.clear()  # every call returned: nothing to time
        elif self._timer is None and self._heap:  # (empty once `close()` ran)
            # The earliest may be done already: `_expire` then skips it and re-arms.
            self._timer = self._loop.call_at(self._heap[0].at, self._expire)

    def _expire(self) -> None:
        self._timer = None
        heap = self._heap
        now = self._loop.time()
        while heap and (heap[0].done or heap[0].at <= now):
            deadline = heapq.heappop(heap)
            if not deadline.done:
                deadline.expired = True
                deadline.task.cancel()
        if heap:
            self._timer = self._loop.call_at(heap[0].at, self._expire)
