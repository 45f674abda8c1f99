"""A run whose tool returned deeply nested data leaves every endpoint of the API working."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx

from pes_agent import create_agent, tool
from pes_agent.server import create_app
from pes_agent.testing import ScriptedProvider

from ..storage.test_storage_contract import levels_of, nested
from .conftest import pay, plan_json


@tool
async def dig() -> dict[str, Any]:
    """Return data nested 250 levels deep."""
    return nested(250)


@asynccontextmanager
async def client_on(db: Path) -> AsyncIterator[httpx.AsyncClient]:
    steps = plan_json(
        {"callId": "c1", "toolName": "dig", "arguments": {}},
        {"callId": "c2", "toolName": "pay", "arguments": {"amount": 5}},
    )
    model = ScriptedProvider([steps, steps])
    async with create_agent(provider=model, tools=[dig, pay], storage=f"sqlite:///{db}") as agent:
        transport = httpx.ASGITransport(app=create_app(agent))
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            yield client


async def test_approvals_threads_runs_and_cancel_answer_after_a_deep_output(
    tmp_path: Path,
) -> None:
    """Two runs paused after a tool output 250 levels deep: the approvals, the thread's
    observations, runs and events answer 200 with all of the output, and cancel works."""
    async with client_on(tmp_path / "api.db") as client:
        traces = []
        for thread_id in ("t", "u"):
            paused = await client.post(f"/v1/threads/{thread_id}/runs", json={"query": "dig"})
            assert paused.json()["metadata"]["status"] == "awaiting_approval"
            traces.append(paused.json()["metadata"]["trace_id"])

        approvals = await client.get("/v1/approvals")
        assert approvals.status_code == 200
        outputs = [run["results"]["1"]["output"] for run in approvals.json()["runs"]]
        assert [levels_of(output) for output in outputs] == [250, 250]
        observations = await client.get("/v1/threads/t/observations")
        assert observations.status_code == 200
        [execution] = [
            o for o in observations.json()["observations"] if o["type"] == "TOOL_EXECUTION"
        ]
        assert levels_of(execution["content"]["output"]) == 250
        assert (await client.get("/v1/threads/t/runs")).status_code == 200
        events = await client.get(f"/v1/runs/{traces[0]}/events")
        assert events.status_code == 200
        assert "TOOL_EXECUTION" in events.text
        cancelled = await client.post(f"/v1/runs/{traces[1]}/cancel")
        assert cancelled.status_code == 200
        assert cancelled.json()["was"] == "awaiting_approval"
        remaining = (await client.get("/v1/approvals")).json()["runs"]
        assert [run["trace_id"] for run in remaining] == [traces[0]]
