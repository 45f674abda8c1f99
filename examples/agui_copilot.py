"""A front end's copilot over AG-UI — offline, on a scripted model.

`create_app(agent)` serves `POST /v1/agui`, where an AG-UI client (CopilotKit, `@ag-ui/client`'s
`HttpAgent`, or any other) posts a `RunAgentInput` and reads the run as AG-UI events. This
script serves the app with uvicorn on a free local port and plays the client with the
protocol's own Python models (`ag_ui.core`): it asks a question and prints each event as it
comes (both weather lookups announced before either answers, the answer token by token), then
asks for a booking that needs approval — the run ends with an interrupt — and resumes it with
the approval. Needs `pip install 'pes-agent[agui]'`.

    python examples/agui_copilot.py
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
import uvicorn
from ag_ui.core import Event, ResumeEntry, RunAgentInput, UserMessage
from pydantic import TypeAdapter

from pes_agent import AgentCore, create_agent, tool
from pes_agent.providers.base import LLMRequest
from pes_agent.server import create_app
from pes_agent.testing import ScriptedProvider, plan_json

TOKEN = "example-token"
EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


@tool
async def weather(city: str) -> dict[str, Any]:
    """Today's temperature in a city, in °C."""
    await asyncio.sleep(0.3)  # a slow API: the two lookups overlap
    return {"city": city, "celsius": {"Lisbon": 24, "Porto": 19}.get(city, 20)}


@tool(requires_approval=True)
async def book_hotel(city: str, nights: int) -> str:
    """Book a hotel (a person approves each booking)."""
    return f"booked {nights} nights in {city}"


def script(request: LLMRequest) -> str:
    """Plans the lookups or the booking by the question, then answers."""
    asked = str(request.messages[-1].content)
    if request.phase == "planning" and "book" in asked:
        return plan_json(
            {
                "callId": "call_1",
                "toolName": "book_hotel",
                "arguments": {"city": "Lisbon", "nights": 2},
            }
        )
    if request.phase == "planning":
        return plan_json(
            {"callId": "call_1", "toolName": "weather", "arguments": {"city": "Lisbon"}},
            {"callId": "call_2", "toolName": "weather", "arguments": {"city": "Porto"}},
        )
    if "booked" in asked:
        return "Done: two nights in Lisbon are booked."
    return "Lisbon is warmer today: 24 °C against 19 °C in Porto."


def make_agent() -> AgentCore:
    model = ScriptedProvider([script], repeat=True, chunk_size=8, chunk_latency_s=0.01)
    return create_agent(provider=model, tools=[weather, book_hotel], storage="memory")


async def agui_events(http: httpx.AsyncClient, run: RunAgentInput) -> AsyncIterator[Any]:
    """POST the input to /v1/agui and yield each AG-UI event, validated by `ag_ui.core`."""
    body = run.model_dump(mode="json", by_alias=True)
    async with http.stream("POST", "/v1/agui", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                yield EVENTS.validate_python(json.loads(line.removeprefix("data: ")))


def show(event: Any) -> str:
    """One line for an event: its type and what matters in it."""
    kind = event.type.value
    detail = {
        "STEP_STARTED": lambda: event.step_name,
        "STEP_FINISHED": lambda: event.step_name,
        "TOOL_CALL_START": lambda: f"{event.tool_call_name} ({event.tool_call_id})",
        "TOOL_CALL_ARGS": lambda: event.delta,
        "TOOL_CALL_RESULT": lambda: event.content,
        "TEXT_MESSAGE_CONTENT": lambda: repr(event.delta),
        "STATE_SNAPSHOT": lambda: json.dumps(event.snapshot),
        "RUN_FINISHED": lambda: event.outcome.type if event.outcome else "success",
        "RUN_ERROR": lambda: event.message,
    }.get(kind)
    return f"  {kind:<22} {detail() if detail else ''}".rstrip()


async def client(url: str) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "text/event-stream"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
        print("POST /v1/agui  — 'Lisbon or Porto: which one is warmer today?'")
        ask = RunAgentInput(
            thread_id="trip",
            run_id="run-1",
            messages=[UserMessage(id="u1", content="Lisbon or Porto: which one is warmer today?")],
        )
        async for event in agui_events(http, ask):
            print(show(event))

        print("\nPOST /v1/agui  — 'Please book me two nights in Lisbon.'")
        book = ask.model_copy(
            update={
                "run_id": "run-2",
                "messages": [UserMessage(id="u2", content="Please book me two nights in Lisbon.")],
            }
        )
        interrupts = []
        async for event in agui_events(http, book):
            print(show(event))
            if event.type.value == "RUN_FINISHED" and event.outcome.type == "interrupt":
                interrupts = event.outcome.interrupts
        for interrupt in interrupts:
            print(f"  interrupt {interrupt.id}: {interrupt.message}")

        print("\nPOST /v1/agui  — resume: approved")
        resume = book.model_copy(
            update={
                "run_id": "run-3",
                "resume": [
                    ResumeEntry(
                        interrupt_id=interrupt.id, status="resolved", payload={"approved": True}
                    )
                    for interrupt in interrupts
                ],
            }
        )
        async for event in agui_events(http, resume):
            print(show(event))


async def main() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with make_agent() as agent:
        app = create_app(agent, tokens=[TOKEN])
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        serving = asyncio.create_task(server.serve())
        while not server.started:
            if serving.done():
                serving.result()  # raises why it could not start
            await asyncio.sleep(0.02)
        try:
            await client(f"http://127.0.0.1:{port}")
        finally:
            server.should_exit = True
            await serving


if __name__ == "__main__":
    asyncio.run(main())
