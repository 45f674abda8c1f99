"""A plan's calls as its planner streams them, for an executor that starts them early.

LLMCompiler's trick: a call can start the moment the planner has finished writing it, while the
rest of the plan still streams. The planner `submit`s each complete call; the executor
(`SupportsStreaming.execute_stream`) starts every call whose inputs are known and `wait`s for
more; `close(calls)` makes the plan final — the submitted calls, then whatever the full answer
adds — and from then on the executor runs exactly as it would on that plan given whole.

```python
feed = PlanFeed()
results = asyncio.create_task(ConcurrentExecutor().execute_stream(feed, ctx))
feed.submit(call_1)            # call_1 may start now
feed.submit(call_2)
feed.close([call_1, call_2])   # the plan is final
await results
```

A feed made with `PlanFeed(calls, closed=True)` (`PlanFeed.whole`) is a plan given whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pes_agent.errors import UsageError
from pes_agent.planning.plan import ParsedToolCall, same_call

__all__ = ["PlanFeed"]


class PlanFeed:
    """The calls of one plan, submitted one by one as they stream, then closed as final.

    `calls` grows; `closed` turns True once, when the plan is final. One executor reads it.
    """

    __slots__ = ("_changed", "_final", "calls", "closed")

    def __init__(self, calls: Sequence[ParsedToolCall] = (), *, closed: bool = False) -> None:
        self.calls: list[ParsedToolCall] = list(calls)
        self.closed = closed
        self._changed: asyncio.Event | None = None
        self._final: asyncio.Event | None = None

    @classmethod
    def whole(cls, calls: Sequence[ParsedToolCall]) -> PlanFeed:
        """A feed of a plan that is final already."""
        return cls(calls, closed=True)

    def submit(self, call: ParsedToolCall) -> None:
        """Add the next call of the plan (complete: its arguments will not change).

        Raises:
            UsageError: The feed was closed.
        """
        if self.closed:
            raise UsageError("submit() after close(): the plan was final already")
        self.calls.append(call)
        if self._changed is not None:
            self._changed.set()

    def close(self, calls: Sequence[ParsedToolCall] | None = None) -> None:
        """Make the plan final: `calls` (the submitted calls, then any more), or the
        submitted calls alone when None.

        Raises:
            UsageError: `calls` does not start with the submitted calls (`same_call`: a
                call's `why` may differ), or the feed was closed already.
        """
        if self.closed:
            raise UsageError("close() was called twice on one PlanFeed")
        if calls is not None:
            submitted = len(self.calls)
            if len(calls) < submitted or not all(map(same_call, calls, self.calls)):
                raise UsageError(
                    "the final plan must start with the calls already submitted; discard the "
                    "feed and execute the final plan instead"
                )
            self.calls.extend(calls[submitted:])
        self.closed = True
        if self._changed is not None:
            self._changed.set()
        if self._final is not None:
            self._final.set()

    async def wait(self, seen: int) -> None:
        """Return once more than `seen` calls were submitted, or the feed is closed."""
        while not self.closed and len(self.calls) <= seen:
            if self._changed is None:
                self._changed = asyncio.Event()
            self._changed.clear()
            await self._changed.wait()

    async def final(self) -> None:
        """Return once the plan is final (at once for a closed feed)."""
        if self.closed:
            return
        if self._final is None:
            self._final = asyncio.Event()
        await self._final.wait()
