"""Following a run that executes in another process: its observations, as they are stored.

```python
async with follow_stored(agent, thread_id, trace_id, on_observation):
    result = await agent.process(AgentProps(query, thread_id, trace_id=trace_id))
```

A run on a durable engine records its observations on the worker that runs it, in the store
the worker shares with the submitting process; the submitting agent's own subscribers hear
nothing. `follow_stored` hands the run's observations to a callback as they reach the store:
pushed by a store with a cross-process feed (PostgreSQL), read again every `every_s`
otherwise (SQLite). Each is delivered once, in order within a read; leaving the block reads
the store a last time, so the observations stored before the run's response came are all
delivered. Tokens are not stored: they come through the store's stream feed to the agent's
`stream` subscribers (`pes_agent.observing.relay`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from pes_agent.core import AgentCore
from pes_agent.observing.manager import ObservationManager
from pes_agent.observing.types import Observation
from pes_agent.storage.base import ObservationFeed

__all__ = ["follow_stored"]


@asynccontextmanager
async def follow_stored(
    agent: AgentCore,
    thread_id: str,
    trace_id: str,
    callback: Callable[[Observation], None],
    *,
    every_s: float = 0.2,
) -> AsyncIterator[None]:
    """Call `callback` with each observation of run `trace_id` on `thread_id` stored while
    the block lasts (and those stored before it), once each; see the module docstring."""
    seen: set[str] = set()

    def deliver(observation: Observation) -> None:
        if observation.trace_id == trace_id and observation.id not in seen:
            seen.add(observation.id)
            callback(observation)

    async def read() -> None:
        for observation in await agent.observations.get_observations(thread_id, trace_id=trace_id):
            deliver(observation)

    async def poll() -> None:
        while True:
            await read()
            await asyncio.sleep(every_s)

    observations = agent.observations
    unsubscribe: Callable[[], None] | None = None
    poller: asyncio.Task[None] | None = None
    if isinstance(observations, ObservationManager) and isinstance(agent.storage, ObservationFeed):
        unsubscribe = await observations.listen(deliver, thread_id=thread_id)
        await read()  # what was stored before the feed listened
    else:
        poller = asyncio.create_task(poll(), name=f"pes-agent follow {trace_id}")
    try:
        yield
    finally:
        if unsubscribe is not None:
            unsubscribe()
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        await read()
