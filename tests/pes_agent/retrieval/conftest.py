"""Vector stores for the shared contract tests: in memory, a SQLite file and a PostgreSQL schema.

PostgreSQL is the server at 127.0.0.1:5432 (see tests/pes_agent/storage/conftest.py): each
test gets its own schema, dropped afterwards; without the server its tests skip, except in CI.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from pes_agent.retrieval import InMemoryVectorStore, VectorStore
from pes_agent.retrieval.postgres import PostgresVectorStore
from pes_agent.retrieval.sqlite import SQLiteVectorStore
from tests.pes_agent.storage.conftest import drop_schema, require_postgres

StoreFactory = Callable[..., VectorStore]
"""Makes a store of the given `dimension` (and `table`); the same arguments reopen it."""

STORES = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture
async def pg_schema() -> AsyncIterator[str]:
    """A fresh PostgreSQL schema name for one test, dropped afterwards."""
    require_postgres()
    schema = f"pes_vec_{uuid.uuid4().hex[:16]}"
    yield schema
    await drop_schema(schema)


@pytest.fixture(params=STORES)
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """A factory of stores of one kind; every store it made is closed after the test."""
    made: list[VectorStore] = []
    schema = ""
    if request.param == "postgres":
        url = require_postgres()
        schema = f"pes_vec_{uuid.uuid4().hex[:16]}"

    def factory(dimension: int, table: str = "vectors") -> VectorStore:
        store: VectorStore
        if request.param == "memory":
            store = InMemoryVectorStore(dimension)
        elif request.param == "sqlite":
            store = SQLiteVectorStore(tmp_path / "vectors.db", table=table, dimension=dimension)
        else:
            store = PostgresVectorStore(url, schema=schema, table=table, dimension=dimension)
        made.append(store)
        return store

    yield factory
    for store in made:
        await store.aclose()
    if schema:
        await drop_schema(schema)
