"""Backends for the storage contract suite: memory, a SQLite file and a PostgreSQL schema.

PostgreSQL is the server at 127.0.0.1:5432 (user postgres, database test, trust auth). Each
test gets its own schema, dropped afterwards. Without the server, its tests skip with the
reason, except in CI (`CI` set), where a missing server is a failure.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from pes_agent.storage import InMemoryStorage, PostgresStorage, SQLiteStorage, Storage

POSTGRES_URL = os.environ.get("PES_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

_reachability: dict[str, str | None] = {}


def _postgres_problem() -> str | None:
    """Why PostgreSQL cannot be used for tests, or None if it can (checked once)."""
    if "answer" not in _reachability:

        async def probe() -> None:
            import asyncpg  # type: ignore[import-untyped]

            conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
            await conn.close()

        try:
            # A thread of its own: callers may be inside a running event loop.
            with ThreadPoolExecutor(1) as pool:
                pool.submit(asyncio.run, probe()).result()
        except Exception as exc:
            _reachability["answer"] = f"PostgreSQL at {POSTGRES_URL} is unreachable ({exc!r})"
        else:
            _reachability["answer"] = None
    return _reachability["answer"]


def require_postgres() -> str:
    """The test server's URL; skips the test without it, or fails it in CI."""
    problem = _postgres_problem()
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{problem}: CI must run the PostgreSQL tests", pytrace=False)
        pytest.skip(f"{problem}; set it up to run the PostgreSQL tests")
    return POSTGRES_URL


async def drop_schema(schema: str) -> None:
    """Drop a test schema and everything in it."""
    import asyncpg

    conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


async def listening_sessions(schema: str) -> int:
    """How many database sessions LISTEN for the observations recorded in `schema`."""
    import asyncpg

    conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE query = $1",
            f'LISTEN "pes_obs_{schema}"',
        )
        return count
    finally:
        await conn.close()


@pytest.fixture
async def pg_schema() -> AsyncIterator[str]:
    """A fresh PostgreSQL schema name for one test, dropped afterwards."""
    require_postgres()
    schema = f"pes_test_{uuid.uuid4().hex[:16]}"
    yield schema
    await drop_schema(schema)


StorageFactory = Callable[[], Storage]

BACKENDS = [
    "memory",
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
]
DURABLE_BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
async def open_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[StorageFactory]:
    """A function opening (another) storage object on the same store, closed after the test."""
    kind: str = request.param
    opened: list[Storage] = []
    schema: str | None = None
    shared_memory = InMemoryStorage()
    if kind == "postgres":
        require_postgres()
        schema = f"pes_test_{uuid.uuid4().hex[:16]}"

    def factory() -> Storage:
        storage: Storage
        if kind == "memory":
            storage = shared_memory
        elif kind == "sqlite":
            storage = SQLiteStorage(tmp_path / "agent.db")
        else:
            assert schema is not None
            storage = PostgresStorage(POSTGRES_URL, schema=schema, max_pool_size=4)
        opened.append(storage)
        return storage

    yield factory
    for storage in opened:
        await storage.aclose()
    if schema is not None:
        await drop_schema(schema)


@pytest.fixture
async def storage(open_backend: StorageFactory) -> Storage:
    """One storage object of the backend under test."""
    return open_backend()


async def wait_until(condition: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    """Wait for `condition` (checked every 10 ms), failing after 30 s with `what`."""
    for _ in range(3000):
        outcome = condition()
        if not isinstance(outcome, bool):
            outcome = await outcome
        if outcome:
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"timed out waiting for {what}")


Hold = Callable[[str], AbstractAsyncContextManager[object]]


async def assert_holds_exclude(first: Hold, second: Hold) -> None:
    """While `first` holds thread "t", `second` gets thread "u" at once and waits for "t",
    which it gets once `first` lets go: two holders of one lock exclude each other per thread."""
    async with first("t"):
        async with asyncio.timeout(10), second("u"):
            pass
        waiting = asyncio.ensure_future(second("t").__aenter__())
        await asyncio.sleep(0.1)
        assert not waiting.done()
    async with asyncio.timeout(10):
        await waiting
