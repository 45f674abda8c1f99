"""Where threads, history, state and observations are kept.

`open_storage("memory" | "sqlite:///agent.db" | "postgresql://...")` picks an implementation;
every implementation satisfies the `Storage` protocol.
"""

from __future__ import annotations

from pes_agent.storage.base import Storage
from pes_agent.storage.factory import open_storage
from pes_agent.storage.memory import InMemoryStorage
from pes_agent.storage.sqlite import SQLiteStorage

__all__ = ["InMemoryStorage", "SQLiteStorage", "Storage", "open_storage"]
