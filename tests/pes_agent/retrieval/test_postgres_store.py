"""PostgresVectorStore on the real server: persistence, reopening checks, the two backends."""

from __future__ import annotations

import pytest

from pes_agent.errors import ConfigurationError
from pes_agent.retrieval import DimensionMismatchError
from pes_agent.retrieval.postgres import PostgresVectorStore
from tests.pes_agent.storage.conftest import require_postgres

pytestmark = pytest.mark.postgres


async def test_rows_survive_reopening_the_table(pg_schema: str) -> None:
    """A new store on the same schema and table finds the rows, texts and metadata added."""
    url = require_postgres()
    first = PostgresVectorStore(url, schema=pg_schema, table="docs", dimension=3)
    await first.add(["a", "b"], [[1, 0, 0], [0, 1, 0]], ["alpha", "beta"], [{"n": 1}, {"n": 2}])
    await first.aclose()
    second = PostgresVectorStore(f"{url}?schema={pg_schema}", table="docs", dimension=3)
    try:
        assert await second.count() == 2
        hits = await second.search([0.0, 1.0, 0.1], top_k=1, where={"n": 2})
        assert [(hit.id, hit.text, hit.metadata) for hit in hits] == [("b", "beta", {"n": 2})]
    finally:
        await second.aclose()


async def test_reopening_with_another_dimension_is_refused(pg_schema: str) -> None:
    """The table records its dimension; opening it with another is a DimensionMismatchError."""
    url = require_postgres()
    store = PostgresVectorStore(url, schema=pg_schema, dimension=3)
    await store.add(["a"], [[1, 0, 0]], ["alpha"])
    await store.aclose()
    other = PostgresVectorStore(url, schema=pg_schema, dimension=4)
    try:
        with pytest.raises(DimensionMismatchError, match="dimension 3, not 4"):
            await other.count()
    finally:
        await other.aclose()


async def test_another_stores_writes_are_seen_by_the_next_search(pg_schema: str) -> None:
    """Two stores on one table (two workers): each search sees the other's adds and deletes."""
    url = require_postgres()
    reader = PostgresVectorStore(url, schema=pg_schema, dimension=2)
    writer = PostgresVectorStore(url, schema=pg_schema, dimension=2)
    try:
        await writer.add(["a"], [[1, 0]], ["a"])
        assert [hit.id for hit in await reader.search([1.0, 0.0], top_k=5)] == ["a"]
        await writer.add(["b"], [[1, 0.1]], ["b"])
        await writer.delete(["a"])
        assert [hit.id for hit in await reader.search([1.0, 0.0], top_k=5)] == ["b"]
        await writer.add(["b"], [[0, 1]], ["b again"])
        hits = await reader.search([0.0, 1.0], top_k=5)
        assert [(hit.text, round(hit.score, 5)) for hit in hits] == [("b again", 1.0)]
    finally:
        await reader.aclose()
        await writer.aclose()


async def test_the_backend_is_pgvector_exactly_when_the_server_has_it(pg_schema: str) -> None:
    """Without pgvector on the server the plain-SQL arrays backend is used, and requiring
    pgvector is a ConfigurationError; with it, pgvector is used."""
    url = require_postgres()
    import asyncpg  # type: ignore[import-untyped]

    conn = await asyncpg.connect(url)
    try:
        available = bool(
            await conn.fetchval("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        )
    finally:
        await conn.close()
    auto = PostgresVectorStore(url, schema=pg_schema, table="auto", dimension=2)
    required = PostgresVectorStore(
        url, schema=pg_schema, table="required", dimension=2, pgvector=True
    )
    try:
        assert await auto.backend() == ("pgvector" if available else "arrays")
        if available:
            assert await required.backend() == "pgvector"
        else:
            with pytest.raises(ConfigurationError, match="no pgvector extension"):
                await required.backend()
    finally:
        await auto.aclose()
        await required.aclose()


async def test_the_arrays_fallback_can_be_chosen_explicitly(pg_schema: str) -> None:
    """pgvector=False stores real[] arrays and still ranks exactly by cosine."""
    url = require_postgres()
    store = PostgresVectorStore(url, schema=pg_schema, dimension=2, pgvector=False)
    try:
        assert await store.backend() == "arrays"
        await store.add(["a", "b"], [[3, 0], [1, 1]], ["a", "b"])
        hits = await store.search([1.0, 0.0], top_k=2)
        assert [hit.id for hit in hits] == ["a", "b"]
        assert hits[1].score == pytest.approx(2**-0.5, abs=1e-6)
    finally:
        await store.aclose()
