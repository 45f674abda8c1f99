"""SQLiteVectorStore: persistence, sharing the agent's file, reopening checks, the event loop."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from pes_agent import AgentState, SQLiteStorage
from pes_agent.errors import ConfigurationError, UsageError
from pes_agent.retrieval import DimensionMismatchError
from pes_agent.retrieval.sqlite import SQLiteVectorStore


async def test_rows_survive_closing_and_reopening_the_file(tmp_path: Path) -> None:
    """A store opened again on the same file and table finds what the first one added."""
    path = tmp_path / "v.db"
    first = SQLiteVectorStore(f"sqlite:///{path}", table="docs", dimension=3)
    await first.add(["a", "b"], [[1, 0, 0], [0, 1, 0]], ["alpha", "beta"], [{"n": 1}, {"n": 2}])
    await first.aclose()
    second = SQLiteVectorStore(path, table="docs", dimension=3)
    try:
        assert await second.count() == 2
        hits = await second.search([0.0, 1.0, 0.1], top_k=1, where={"n": 2})
        assert [(hit.id, hit.text, hit.metadata) for hit in hits] == [("b", "beta", {"n": 2})]
    finally:
        await second.aclose()


async def test_reopening_a_table_with_another_dimension_is_refused(tmp_path: Path) -> None:
    """The table remembers its dimension; another one is a DimensionMismatchError saying which."""
    path = tmp_path / "v.db"
    store = SQLiteVectorStore(path, dimension=3)
    await store.add(["a"], [[1, 0, 0]], ["alpha"])
    await store.aclose()
    other = SQLiteVectorStore(path, dimension=5)
    try:
        with pytest.raises(DimensionMismatchError, match="dimension 3, not 5") as info:
            await other.count()
        assert (info.value.expected, info.value.actual) == (3, 5)
    finally:
        await other.aclose()


async def test_the_store_shares_the_agent_database_file(tmp_path: Path) -> None:
    """Vectors and the agent's threads live in one file, each in its own tables."""
    path = tmp_path / "agent.db"
    storage = SQLiteStorage(path)
    vectors = SQLiteVectorStore(path, dimension=2)
    try:
        await storage.set_agent_state("t1", AgentState(data={"k": 1}, version=0))
        await vectors.add(["a"], [[1, 0]], ["alpha"])
        assert (await vectors.search([1.0, 0.0], top_k=1))[0].id == "a"
        state = await storage.get_agent_state("t1")
        assert state is not None
        assert state.data == {"k": 1}
    finally:
        await vectors.aclose()
        await storage.aclose()


async def test_two_tables_in_one_file_are_separate_collections(tmp_path: Path) -> None:
    """Stores on different tables of one file neither see nor disturb each other's rows."""
    path = tmp_path / "v.db"
    one = SQLiteVectorStore(path, table="one", dimension=2)
    two = SQLiteVectorStore(path, table="two", dimension=4)
    try:
        await one.add(["a"], [[1, 0]], ["a"])
        await two.add(["b", "c"], [[1, 0, 0, 0], [0, 1, 0, 0]], ["b", "c"])
        assert (await one.count(), await two.count()) == (1, 2)
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_table_of_another_kind_is_not_taken_over(tmp_path: Path) -> None:
    """A table name already used by something else is a ConfigurationError, not a merge."""
    path = tmp_path / "agent.db"
    storage = SQLiteStorage(path)
    await storage.set_agent_state("t1", AgentState(data={}, version=0))
    await storage.aclose()
    store = SQLiteVectorStore(path, table="messages", dimension=2)
    try:
        with pytest.raises(ConfigurationError, match="not a vector table"):
            await store.count()
    finally:
        await store.aclose()


async def test_searches_do_not_block_the_event_loop(tmp_path: Path) -> None:
    """While searches run in the store's thread, a ticking task keeps its 5 ms cadence."""
    import numpy as np

    store = SQLiteVectorStore(tmp_path / "v.db", dimension=64)
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((3000, 64)).tolist()
    await store.add([str(i) for i in range(3000)], vectors, ["x"] * 3000)
    gaps: list[float] = []
    stop = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    try:
        for _ in range(30):
            await store.search(rng.standard_normal(64).tolist(), top_k=10)
    finally:
        stop.set()
        await ticker
        await store.aclose()
    assert gaps
    assert max(gaps) < 0.1


async def test_bad_table_names_and_closed_stores_are_usage_errors(tmp_path: Path) -> None:
    """A table name that is not an identifier, and any call after aclose(), say what to do."""
    with pytest.raises(ConfigurationError, match="letters, digits and underscores"):
        SQLiteVectorStore(tmp_path / "v.db", table="drop table x;", dimension=2)
    store = SQLiteVectorStore(tmp_path / "v.db", dimension=2)
    await store.aclose()
    with pytest.raises(UsageError, match="closed"):
        await store.count()
