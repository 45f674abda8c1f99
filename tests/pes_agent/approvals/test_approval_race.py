"""Two processes resuming the same paused run: the approved call runs exactly once."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pes_agent import AgentProps, create_agent, tool
from pes_agent.storage import PostgresStorage, SQLiteStorage, Storage
from pes_agent.testing import ScriptedProvider, plan_json

from ..storage.conftest import drop_schema, require_postgres
from .conftest import call

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("approval_worker.py")
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def shared(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, str, Storage]]:
    """A store URL, a schema and a storage object on it for the test itself."""
    schema = f"pes_test_{uuid.uuid4().hex[:16]}"
    storage: Storage
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'shared.db'}"
        storage = SQLiteStorage(tmp_path / "shared.db")
    else:
        url = require_postgres()
        storage = PostgresStorage(url, schema=schema)
    yield url, schema, storage
    await storage.aclose()
    if request.param == "postgres":
        await drop_schema(schema)


async def test_racing_resumes_in_two_processes_run_the_approved_call_once(
    shared: tuple[str, str, Storage], tmp_path: Path
) -> None:
    """Of two processes resuming one run at once, one finishes it and the other is told it lost."""
    url, schema, storage = shared

    @tool(requires_approval=True)
    def pay(amount: int) -> str:
        """Pay an amount."""
        raise AssertionError("the pausing process must never run the gated tool")

    async with create_agent(
        provider=ScriptedProvider([plan_json(call("c1", "pay", amount=7))]),
        tools=[pay],
        storage=storage,
    ) as agent:
        paused = await agent.process(AgentProps("pay", "t1"))
    assert paused.metadata.status == "awaiting_approval"
    side, go = tmp_path / "side.txt", tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            url,
            schema,
            "t1",
            paused.metadata.trace_id,
            str(side),
            str(go),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
        )
        for _ in range(2)
    ]
    await asyncio.sleep(1.0)  # both connected and polling for the start signal
    go.touch()
    outputs = [(await asyncio.wait_for(w.communicate(), 60))[0].decode().strip() for w in workers]
    assert sorted(line.split()[0] for line in outputs) == ["LOST", "RESUMED"], outputs
    assert side.read_text().count("paid 7") == 1
    assert len(await storage.get_messages("t1")) == 2
