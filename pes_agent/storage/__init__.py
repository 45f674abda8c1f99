"""Where threads, history, state and observations are kept.

`open_storage("memory" | "sqlite:///agent.db" | "postgresql://...")` picks an implementation;
every implementation satisfies the `Storage` protocol, `StreamFeed` (model stream events of
other processes: tokens of runs a durable engine's worker executes) and `TurnLeases` (a
thread's turn lent by name, for durable engines) and `TaskRecords` (protocol tasks: the A2A
server's) and `ThreadSnapshots` (what a run reads of its thread, in one read; `load_snapshot`
reads the same from any `Storage`). `PostgresStorage` also satisfies
`ObservationFeed` (observations of other processes, pushed). It needs asyncpg
(`pip install 'pes-agent[postgres]'`), imported only when a `PostgresStorage` is created.
"""

from __future__ import annotations

from pes_agent.storage.base import (
    ObservationFeed,
    Storage,
    StreamFeed,
    StreamSubscription,
    TaskRecord,
    TaskRecords,
    ThreadSnapshot,
    ThreadSnapshots,
    TurnLeases,
    load_snapshot,
)
from pes_agent.storage.factory import open_storage
from pes_agent.storage.memory import InMemoryStorage
from pes_agent.storage.postgres import PostgresStorage
from pes_agent.storage.sqlite import SQLiteStorage

__all__ = [
    "InMemoryStorage",
    "ObservationFeed",
    "PostgresStorage",
    "SQLiteStorage",
    "Storage",
    "StreamFeed",
    "StreamSubscription",
    "TaskRecord",
    "TaskRecords",
    "ThreadSnapshot",
    "ThreadSnapshots",
    "TurnLeases",
    "load_snapshot",
    "open_storage",
]
