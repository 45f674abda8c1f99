"""A run whose tool returned deeply nested data leaves every endpoint of the API working."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx

from pes_agent import create_agent, tool
from pes_agent.observing.types import Observation
from pes_agent.providers.base import LLMRequest
from pes_agent.server import create_app
from pes_agent.testing import ScriptedProvider

from ..storage.test_storage_contract import levels_of, nested
from .conftest import pay, plan_json
from .sse import SSEStream, read_sse, serving

STREAM = {"Accept": "text/event-stream"}


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


@tool
async def dig_deeper() -> dict[str, Any]:
    """Return data nested 400 levels deep."""
    return nested(400)


def plans_dig_deeper(request: LLMRequest) -> str:
    """Plans one `dig_deeper` call, then answers."""
    if request.phase == "planning":
        return plan_json({"callId": "c1", "toolName": "dig_deeper", "arguments": {}})
    return "It is deep."


async def test_live_streams_carry_a_400_level_output_bounded_as_the_store_keeps_it(
    tmp_path: Path,
) -> None:
    """A tool output 400 levels deep reaches the run's stream and the thread feed live, its
    deep part as JSON text as the store keeps it, and the run ends with its `final` event."""
    model = ScriptedProvider([plans_dig_deeper] * 2)
    async with (
        create_agent(
            provider=model, tools=[dig_deeper], storage=f"sqlite:///{tmp_path / 'api.db'}"
        ) as agent,
        serving(create_app(agent)) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as client,
        client.stream("GET", "/v1/threads/t/events", headers=STREAM) as feed_response,
    ):
        feed = SSEStream(feed_response)
        await feed.read(until=lambda event: event.name == "subscribed")
        async with client.stream(
            "POST", "/v1/threads/t/runs", json={"query": "dig"}, headers=STREAM
        ) as response:
            run_events = await read_sse(response)
        feed_events = await feed.read(until=lambda event: event.name == "FINAL_RESPONSE")
    assert [event.name for event in run_events][-1] == "final"
    for events in (run_events, feed_events):
        [execution] = [event for event in events if event.name == "TOOL_EXECUTION"]
        assert levels_of(execution.data["content"]["output"]) == 400
    stored = await agent_observations(tmp_path / "api.db")
    [kept] = [o for o in stored if o.type == "TOOL_EXECUTION"]
    live = next(e for e in run_events if e.name == "TOOL_EXECUTION")
    assert live.data["content"]["output"] == kept.content["output"]


async def agent_observations(db: Path) -> list[Observation]:
    """The observations of thread `t` stored in the SQLite file `db`."""
    async with create_agent(provider=ScriptedProvider([]), storage=f"sqlite:///{db}") as agent:
        return await agent.observations.get_observations("t")


@tool(requires_approval=True)
async def keep(data: dict[str, Any]) -> str:
    """Keep data (after a person approves)."""
    return "kept"


def plans_keep_deep(request: LLMRequest) -> str:
    """Plans one `keep` call whose argument nests 300 levels."""
    if request.phase == "planning":
        return plan_json({"callId": "c1", "toolName": "keep", "arguments": {"data": nested(300)}})
    return "Kept."


async def test_a_run_answer_carries_pending_arguments_300_levels_deep(tmp_path: Path) -> None:
    """A run paused on a call whose arguments nest 300 levels answers 200 as JSON and as a
    stream's `final` event, the arguments whole (their deep part as JSON text)."""
    model = ScriptedProvider([plans_keep_deep] * 2)
    async with create_agent(
        provider=model, tools=[keep], storage=f"sqlite:///{tmp_path / 'api.db'}"
    ) as agent:
        transport = httpx.ASGITransport(app=create_app(agent))
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            answer = await client.post("/v1/threads/t/runs", json={"query": "keep"})
            streamed = await client.post(
                "/v1/threads/u/runs", json={"query": "keep"}, headers=STREAM
            )
    assert answer.status_code == 200, answer.text
    [final] = [line for line in streamed.text.splitlines() if line.startswith('data: {"response')]
    for response in (answer.json(), json.loads(final.removeprefix("data: "))):
        [pending] = response["metadata"]["pending_approvals"]
        assert levels_of(pending["arguments"]["data"]) == 300
