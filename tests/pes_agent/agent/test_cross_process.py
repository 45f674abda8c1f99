"""A subscriber in one process sees the runs that another process executes (PostgreSQL)."""

from __future__ import annotations

import asyncio
import sys
import textwrap

import pytest

from pes_agent import Observation, ObservationManager, ObservationType
from pes_agent.storage import PostgresStorage

from ..storage.conftest import POSTGRES_URL, pg_schema, wait_until

__all__ = ["pg_schema"]  # the fixture, shared with the storage tests

WORKER = textwrap.dedent(
    """
    import asyncio, json, sys
    from pes_agent import AgentProps, create_agent, tool
    from pes_agent.testing import ScriptedProvider

    @tool
    def add(a: int, b: int) -> int:
        "Add two integers."
        return a + b

    PLAN = json.dumps({"intent": "add", "toolCalls": [
        {"callId": "c1", "toolName": "add", "arguments": {"a": 2, "b": 3}}]})

    async def main() -> None:
        agent = create_agent(provider=ScriptedProvider([PLAN, "5"], repeat=True), tools=[add],
                             storage=sys.argv[1])
        async with agent:
            for thread in ("watched", "other"):
                result = await agent.process(AgentProps("2+3", thread))
                assert result.metadata.status == "success", result.metadata.error

    asyncio.run(main())
    """
)


@pytest.mark.postgres
@pytest.mark.slow
async def test_listen_delivers_observations_of_runs_in_another_process(pg_schema: str) -> None:
    """listen() here receives, by type and thread, what a worker process's run records."""
    storage = PostgresStorage(POSTGRES_URL, schema=pg_schema)
    manager = ObservationManager(storage)
    seen: list[Observation] = []
    unsubscribe = await manager.listen(
        seen.append,
        types=[ObservationType.TOOL_EXECUTION, ObservationType.FINAL_RESPONSE],
        thread_id="watched",
    )
    try:
        worker = await asyncio.create_subprocess_exec(
            sys.executable, "-c", WORKER, f"{POSTGRES_URL}?schema={pg_schema}"
        )
        assert await worker.wait() == 0
        await wait_until(lambda: len(seen) >= 2, "the worker's observations to arrive")
        assert [o.type for o in seen] == [
            ObservationType.TOOL_EXECUTION,
            ObservationType.FINAL_RESPONSE,
        ]
        assert {o.thread_id for o in seen} == {"watched"}
        assert seen[0].content["output"] == 5
    finally:
        unsubscribe()
        await storage.aclose()
