"""An agent whose scripted model plans by the query, served once per module by uvicorn on
127.0.0.1 (a real stream: tokens arrive one by one), and a reader of AG-UI event streams that
validates every event against `ag_ui.core`'s models. Tests here run in the module's event
loop (`pytestmark = LOOP`) and use thread ids of their own."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2 as httpx
import pytest
import pytest_asyncio
from ag_ui.core import Event
from pydantic import TypeAdapter

from pes_agent import AgentCore, ToolContext, create_agent, tool
from pes_agent.providers.base import LLMRequest
from pes_agent.server import create_app
from pes_agent.testing import ScriptedProvider, ScriptedResponse, plan_json

from ..server.sse import serving

#: The mark of the tests sharing the module's server (and so its event loop).
LOOP = pytest.mark.asyncio(loop_scope="module")

TOKENS = {"alice-token": "alice", "bob-token": "bob"}
ANSWER = "The answer is 42, as both naps show."
THINKING = "The naps both rested, so the answer follows."

_EVENT: TypeAdapter[Any] = TypeAdapter(Event)


def scripted(request: LLMRequest) -> str | ScriptedResponse:
    """Plans by the query: two parallel naps, a payment (needs approval), a note; answers."""
    last = str(request.messages[-1].content)
    if request.phase == "planning":
        if "pay" in last:
            return plan_json({"callId": "call_1", "toolName": "pay", "arguments": {"amount": 5}})
        if "note" in last:
            return plan_json({"callId": "call_1", "toolName": "note", "arguments": {"text": "hi"}})
        return plan_json(
            {"callId": "call_1", "toolName": "nap", "arguments": {"s": 0.3}},
            {"callId": "call_2", "toolName": "nap", "arguments": {"s": 0.3}},
        )
    if "think" in last:
        return ScriptedResponse(ANSWER, thinking=[THINKING])
    if "fail" in last:
        raise RuntimeError("the model is down")
    return ANSWER


@tool
async def nap(s: float) -> str:
    """Sleep `s` seconds."""
    await asyncio.sleep(s)
    return f"rested {s}"


@tool(requires_approval=True)
async def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


@tool
async def note(text: str, context: ToolContext) -> str:
    """Keep a note in the thread's state."""
    assert context.state is not None
    context.state.data.setdefault("notes", []).append(text)
    return "noted"


def make_agent() -> AgentCore:
    """The scripted agent, with implicit state saving (a tool's state change is saved)."""
    # A model writing at a finite speed, so that a client reads its answer token by token.
    model = ScriptedProvider([scripted], repeat=True, chunk_size=4, chunk_latency_s=0.002)
    return create_agent(
        provider=model, tools=[nap, pay, note], storage="memory", state_saving="implicit"
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def agent() -> AsyncIterator[AgentCore]:
    """The module's agent."""
    async with make_agent() as core:
        yield core


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def base_url(agent: AgentCore) -> AsyncIterator[str]:
    """The URL of uvicorn serving `agent` (tokens: `TOKENS`), for the module."""
    async with serving(create_app(agent, tokens=TOKENS)) as url:
        yield url


@pytest_asyncio.fixture(loop_scope="module")
async def client(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the module's server with alice's token."""
    async with httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": "Bearer alice-token", "Accept": "text/event-stream"},
        timeout=30,
    ) as http:
        yield http


def run_input(thread_id: str, text: str | None, **extra: Any) -> dict[str, Any]:
    """A RunAgentInput as a client sends it (camelCase), with one user message."""
    messages = [{"id": "m1", "role": "user", "content": text}] if text is not None else []
    return {"threadId": thread_id, "runId": f"run-{text}", "messages": messages, **extra}


def parse(body: str) -> list[Any]:
    """The AG-UI events of an SSE body, each validated by `ag_ui.core`'s event union."""
    events = []
    for block in body.split("\n\n"):
        data = [line[len("data: ") :] for line in block.splitlines() if line.startswith("data: ")]
        if data:
            events.append(_EVENT.validate_python(json.loads("\n".join(data))))
    return events


Post = Callable[..., Any]


@pytest.fixture
def post(client: httpx.AsyncClient) -> Post:
    """Posts an input to /v1/agui; returns the response and its validated events."""

    async def send(body: dict[str, Any], **kwargs: Any) -> tuple[httpx.Response, list[Any]]:
        response = await client.post("/v1/agui", json=body, **kwargs)
        events = parse(response.text) if response.status_code == 200 else []
        return response, events

    return send
