"""The per-call timeouts of one execution, kept on one timer.

`asyncio.timeout()` around every call schedules a timer on the event loop's heap and cancels
it when the call returns; a cancelled timer stays on the heap until the loop sweeps it, so a
plan of 1,000 calls pushes 1,000 timers, each far in the future, through a heap that grows
with them (measured at 3 to 10 µs a call, the dearest part of running a no-op tool). Calls
of one execution share their timeouts here instead: each call's deadline goes in a queue of
this execution's own, one queue per timeout (the loop's clock never goes back, so calls with
the same timeout fall due in the order they started: no heap to keep in order), and one loop
timer waits for the earliest. A call that returns only marks its deadline done; the next call
with the same timeout drops the finished ones from the front of its queue (in a long
execution they no longer stay alive until the timer fires, 30 s on by default), and the
timer, when it fires, cancels the calls whose deadlines passed and re-arms for the next.

The timer is armed on the loop's next turn, and only if a call is still running then: most
calls (a lookup, a computation) return without waiting, and a timer armed for them would be
cancelled at once, yet stay on the loop's heap for the whole timeout with a copy of the
run's context (at 10,000 runs at once, tens of thousands of objects the collector scans).
The deadlines are absolute, so arming late does not move them.

A call whose tool returns without ever waiting needs no deadline at all: nothing could have
cancelled it. The runner takes the tool's first step itself and starts the deadline only if
the tool waits (`start(timeout_s, ran_s)`, `ran_s` being how long that step took, so the
deadline is where `asyncio.timeout` would have put it); a call that did not wait settles
`UNTIMED`.

The outcome is `asyncio.timeout`'s: the call's task is cancelled at its deadline, and the call
tells its own expiry from a cancellation that came from elsewhere by `Deadline.expired` and
the task's `cancelling()` count, which it restores (`Deadline.settle`).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque

__all__ = ["UNTIMED", "Deadline", "Deadlines", "Untimed"]


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


class Untimed:
    """The deadline of a call that never waited: nothing to settle, it never expired."""

    __slots__ = ()

    def settle(self) -> bool:
        """Never expired."""
        return False


UNTIMED = Untimed()


class Deadlines:
    """The deadlines of the calls of one execution, on one loop timer."""

    __slots__ = ("_arming", "_lines", "_loop", "_running", "_timer", "_timer_at")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        # Each timeout's deadlines in the order their calls started: the order they fall due.
        self._lines: dict[float, deque[Deadline]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0  # when `_timer` fires
        self._arming = False  # `_arm` is due on the loop's next turn
        self._running = 0  # deadlines started and not settled

    def start(self, timeout_s: float, ran_s: float = 0.0) -> Deadline:
        """The deadline of a call of the current task that began `ran_s` seconds ago,
        `timeout_s` after it began."""
        task = asyncio.current_task(self._loop)  # the loop given: one call less
        if task is None:  # pragma: no cover - executors always run in a task
            raise RuntimeError("a call's deadline needs a task to cancel")
        deadline = Deadline(self._loop.time() - ran_s + timeout_s, task, self)
        self._running += 1
        line = self._lines.get(timeout_s)
        if line is None:
            line = self._lines[timeout_s] = deque()
        else:
            while line and line[0].done:  # calls that returned: nothing left to time
                line.popleft()
        line.append(deadline)
        timer = self._timer
        if timer is None:
            if not self._arming:  # armed on the next turn, if a call still runs then
                self._arming = True
                # In a context of no variables: the loop would copy the run's for it. A new
                # one each time: a Context is entered by one thread at a time, and other
                # threads' loops may arm theirs at the same moment.
                self._loop.call_soon(self._arm, context=contextvars.Context())
        elif deadline.at < self._timer_at:
            timer.cancel()
            self._set_timer(deadline.at)
        return deadline

    def close(self) -> None:
        """Stop the timer (the execution is over)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._lines.clear()

    def _arm(self) -> None:
        """Set the timer for the earliest deadline of a call still running, if any."""
        self._arming = False
        if not self._running:
            self._lines.clear()  # every call returned: nothing to time
        elif self._timer is None:
            # The earliest may be done already: `_expire` then skips it and re-arms.
            self._set_timer(self._earliest())

    def _earliest(self) -> float | None:
        """When the first deadline still queued falls due (None: none is, or `close()` ran)."""
        return min((line[0].at for line in self._lines.values() if line), default=None)

    def _set_timer(self, at: float | None) -> None:
        if at is not None:
            self._timer_at = at
            self._timer = self._loop.call_at(at, self._expire)

    def _expire(self) -> None:
        self._timer = None
        now = self._loop.time()
        due: list[Deadline] = []
        for line in self._lines.values():
            while line and (line[0].done or line[0].at <= now):
                deadline = line.popleft()
                if not deadline.done:
                    due.append(deadline)
        due.sort()  # cancelled in the order their deadlines passed, whatever their timeout
        for deadline in due:
            deadline.expired = True
            deadline.task.cancel()
        self._set_timer(self._earliest())
