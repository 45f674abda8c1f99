"""Durable runs: a run that survives its worker, on an engine users already trust.

```python
from pes_agent.durable.temporal import TemporalEngine  # pip install 'pes-agent[temporal]'
from pes_agent.durable.dbos import DBOSEngine          # pip install 'pes-agent[dbos]'

engine = TemporalEngine("127.0.0.1:7233")             # or DBOSEngine("sqlite:///runs.sqlite")
agent = create_agent(provider=..., tools=[...], storage="sqlite:///agent.db", engine=engine)
async with engine.worker(agent):                       # in each worker process
    result = await agent.process(AgentProps("...", "thread-1"))   # same call, same response
```

A run on an engine is a workflow; its side effects (`pes_agent.durable.effects`) are steps the
engine keeps, so a run whose worker died is finished by another worker without doing again
what it had done (docs/durable.md lists the step names). Without an engine, runs execute in
process as always; `import pes_agent` imports no engine.
"""

from __future__ import annotations

from pes_agent.durable.effects import (
    CURRENT_STEP,
    DurableEngine,
    EffectInvoker,
    EngineRun,
    RunEffects,
)
from pes_agent.errors import ConfigurationError, UsageError

__all__ = [
    "CURRENT_STEP",
    "DurableEngine",
    "EffectInvoker",
    "EngineRun",
    "RunEffects",
    "engine_from_url",
]

_ENGINE_URLS = "dbos+sqlite:///PATH, dbos+postgresql://USER@HOST/DB or temporal://HOST:PORT"


def engine_from_url(url: str, *, worker_id: str | None = None) -> DurableEngine:
    """The engine an URL names, as the command line takes it (`--engine URL`).

    Args:
        url: ``dbos+sqlite:///PATH`` or ``dbos+postgresql://...`` (a `DBOSEngine` on that
            database), or ``temporal://HOST:PORT`` (a `TemporalEngine`; a task queue as
            ``temporal://HOST:PORT/QUEUE``).
        worker_id: The DBOS worker id of this process, when it is a worker.

    Returns:
        The engine (nothing is connected yet).

    Raises:
        UsageError: The URL names no engine (the message lists the forms).
        ConfigurationError: The engine's extra is not installed (the message names it).
    """
    if not isinstance(url, str):
        raise UsageError(f"an engine URL is a str ({_ENGINE_URLS}), got {type(url).__name__}")
    if url.startswith("dbos+"):
        from pes_agent.durable.dbos import DBOSEngine

        database = url.removeprefix("dbos+")
        if worker_id is None:
            return DBOSEngine(database)
        return DBOSEngine(database, worker_id=worker_id)
    if url.startswith("temporal://"):
        try:
            from pes_agent.durable.temporal import TemporalEngine
        except ImportError as error:
            raise ConfigurationError(
                f"{url}: the Temporal engine needs pip install 'pes-agent[temporal]' ({error})"
            ) from None
        address, _, queue = url.removeprefix("temporal://").partition("/")
        if queue:
            return TemporalEngine(address, task_queue=queue)
        return TemporalEngine(address)
    raise UsageError(f"unknown engine URL {url!r}: give {_ENGINE_URLS}")
