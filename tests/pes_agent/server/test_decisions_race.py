"""Decisions for one paused run sent twice at once, on a real uvicorn server: one resume runs."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import httpx2 as httpx

from pes_agent import create_agent, tool
from pes_agent.providers.base import LLMRequest
from pes_agent.server import create_app
from pes_agent.testing import ScriptedProvider

from .conftest import plan_json
from .sse import SSEStream, serving

HEADERS = {"Authorization": "Bearer t0k"}
STREAM = {**HEADERS, "Accept": "text/event-stream"}
#: A safety net only: the awaited step happens as soon as the server gets there.
WAIT_S = 30.0


def transfer_planned(request: LLMRequest) -> str:
    """Plans one `transfer` call, then answers."""
    if request.phase == "planning":
        return plan_json({"callId": "call_1", "toolName": "transfer", "arguments": {"amount": 5}})
    return "Transferred."


async def test_two_decisions_at_once_resume_once_and_cancel_reaches_the_run(
    tmp_path: Path,
) -> None:
    """Of two decisions sent at once one resumes the run and the other is a 409; cancel stops
    the approved tool that runs, and the resuming request's stream shows the tool starting."""
    entered = asyncio.Event()
    finished: list[int] = []

    @tool(requires_approval=True)
    async def transfer(amount: int) -> str:
        """Transfer an amount (waits until cancelled)."""
        entered.set()
        await asyncio.Event().wait()
        finished.append(amount)
        return "done"

    model = ScriptedProvider([transfer_planned] * 4)
    async with (
        create_agent(
            provider=model, tools=[transfer], storage=f"sqlite:///{tmp_path / 'a.db'}"
        ) as agent,
        serving(create_app(agent, tokens=["t0k"])) as url,
        httpx.AsyncClient(base_url=url, timeout=WAIT_S) as client,
        contextlib.AsyncExitStack() as responses,
    ):
        paused = await client.post("/v1/threads/t/runs", json={"query": "pay"}, headers=HEADERS)
        trace_id = paused.json()["metadata"]["trace_id"]
        path = f"/v1/threads/t/runs/{trace_id}/decisions"
        approve = {"decisions": {"call_1": {"approve": True}}}

        async def decide() -> Any:
            request = client.stream("POST", path, json=approve, headers=STREAM)
            return await responses.enter_async_context(request)

        # While the thread is held, the first resume waits before claiming the paused run:
        # the second request comes while the run is still listed as waiting.
        async with agent.storage.lock_thread("t"):
            both = await asyncio.gather(decide(), decide())
        assert sorted(response.status_code for response in both) == [200, 409]
        [refused] = [response for response in both if response.status_code == 409]
        await refused.aread()
        assert refused.json()["error"]["type"] == "run_resuming"
        [resuming] = [response for response in both if response.status_code == 200]

        await asyncio.wait_for(entered.wait(), WAIT_S)
        cancelled = await client.post(f"/v1/runs/{trace_id}/cancel", headers=HEADERS)
        assert cancelled.status_code == 200
        assert cancelled.json()["response"]["metadata"]["status"] == "cancelled"

        events = await SSEStream(resuming).read(lambda event: event.name == "final")
        names = [event.name for event in events]
        assert "APPROVAL_DECIDED" in names
        assert "TOOL_CALL" in names
        assert events[-1].data["metadata"]["status"] == "cancelled"
        assert finished == []
        assert await agent.conversation.get_messages("t") == []
        runs = await client.get("/v1/threads/t/runs", headers=HEADERS)
        assert [run["status"] for run in runs.json()["runs"]] == ["cancelled"]
