"""An agent on a real SQLite file with a scripted model, and an httpx client on its ASGI app."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from pes_agent import AgentCore, create_agent, tool
from pes_agent.providers.base import LLMRequest
from pes_agent.server import create_app
from pes_agent.testing import ScriptedProvider, plan_json

TOKENS = {"alice-token": "alice", "bob-token": "bob", "admin-token": None}


def scripted(request: LLMRequest) -> str:
    """Plans one `look` call for the planning phase, answers with the query for synthesis."""
    if request.phase == "planning":
        if "nap please" in str(request.messages[-1].content):
            return plan_json({"callId": "call_1", "toolName": "nap", "arguments": {"s": 0.8}})
        if "pay please" in str(request.messages[-1].content):
            return plan_json({"callId": "call_1", "toolName": "pay", "arguments": {"amount": 5}})
        return plan_json({"callId": "call_1", "toolName": "look", "arguments": {"q": "x"}})
    if "long answer please" in str(request.messages[-1].content):
        return "The answer is 42, and here is why." * 60  # in 680 tokens of 3 characters
    return "The answer is 42."


@tool
async def look(q: str) -> str:
    """Look something up."""
    return q.upper()


@tool
async def nap(s: float) -> str:
    """Sleep `s` seconds (a run slow enough to disconnect from or cancel)."""
    await asyncio.sleep(s)
    return "rested"


@tool(requires_approval=True)
async def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def make_agent(db: Path, *, latency_s: float = 0.0, count: int = 400) -> AgentCore:
    """An agent whose scripted model always plans and answers, on the SQLite file `db`."""
    model = ScriptedProvider([scripted] * count, latency_s=latency_s, chunk_size=3)
    return create_agent(provider=model, tools=[look, nap, pay], storage=f"sqlite:///{db}")


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[AgentCore]:
    """A fresh agent on its own SQLite file."""
    async with make_agent(tmp_path / "api.db") as core:
        yield core


ClientFactory = Callable[..., httpx.AsyncClient]


@pytest.fixture
async def client_for(agent: AgentCore) -> AsyncIterator[ClientFactory]:
    """Makes clients on apps over `agent`: `client_for(token=..., **create_app_kwargs)`."""
    clients: list[httpx.AsyncClient] = []

    def make(token: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
        kwargs.setdefault("tokens", TOKENS)
        app = create_app(agent, **kwargs)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://api", headers=headers
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()
