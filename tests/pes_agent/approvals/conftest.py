"""Tools, plans and a store for the approval tests: memory, a SQLite file, a PostgreSQL schema."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from pes_agent import tool
from pes_agent.storage import InMemoryStorage, PostgresStorage, SQLiteStorage, Storage
from pes_agent.testing import plan_call

from ..storage.conftest import POSTGRES_URL, drop_schema, require_postgres

StoreFactory = Callable[[], Storage]


call = plan_call


class Ledger:
    """What the tools did, in order."""

    def __init__(self) -> None:
        self.log: list[str] = []


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def tools(ledger: Ledger) -> list[Any]:
    """look (ungated), pay (gated by its decorator), send (ungated unless a rule gates it)."""

    @tool
    async def look(q: str) -> str:
        """Look something up."""
        ledger.log.append(f"look:{q}")
        return q.upper()

    @tool(requires_approval=True)
    async def pay(amount: int) -> str:
        """Pay an amount."""
        ledger.log.append(f"pay:{amount}")
        return f"paid {amount}"

    @tool
    async def send(text: str) -> str:
        """Send a message."""
        ledger.log.append(f"send:{text}")
        return "sent"

    return [look, pay, send]


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """Opens (another) storage object on one store; each agent gets its own (memory: shared)."""
    kind: str = request.param
    schema = f"pes_test_{uuid.uuid4().hex[:16]}"
    if kind == "postgres":
        require_postgres()
    shared = InMemoryStorage()
    opened: list[Storage] = []

    def factory() -> Storage:
        storage: Storage
        if kind == "memory":
            storage = shared
        elif kind == "sqlite":
            storage = SQLiteStorage(tmp_path / "agent.db")
        else:
            storage = PostgresStorage(POSTGRES_URL, schema=schema, max_pool_size=4)
        opened.append(storage)
        return storage

    yield factory
    for storage in opened:
        await storage.aclose()
    if kind == "postgres":
        await drop_schema(schema)
