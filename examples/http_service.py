"""Serve an agent over HTTP and watch a run stream in — offline, on a scripted model.

`pes_agent.server.create_app(agent)` is an ASGI app: this script serves it with uvicorn on a
free local port, inside its own event loop, then acts as a client would. It streams a run as
server-sent events (the plan, both weather lookups side by side, the answer token by token,
then the final response), asks the same question again as plain JSON, and reads the thread
back. Needs `pip install 'pes-agent[server]'`. `pes-agent serve` runs the same app from the
command line, with the web console at http://127.0.0.1:8000/.

    python examples/http_service.py
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
import uvicorn

from pes_agent import AgentCore, create_agent, tool
from pes_agent.server import create_app
from pes_agent.testing import ScriptedProvider

TOKEN = "example-token"  # in production: PES_AGENT_API_TOKEN, or create_app(tokens=...)
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
TEMPERATURES = {"Lisbon": 24, "Porto": 19}

PLAN = json.dumps(
    {
        "intent": "Compare the weather in Lisbon and Porto.",
        "plan": "1. Look up both cities at once. 2. Say which one is warmer.",
        "toolCalls": [
            {"callId": "call_1", "toolName": "weather", "arguments": {"city": "Lisbon"}},
            {"callId": "call_2", "toolName": "weather", "arguments": {"city": "Porto"}},
        ],
    }
)
ANSWER = "Lisbon is warmer today: 24 °C against 19 °C in Porto."


@tool
async def weather(city: str) -> dict[str, Any]:
    """Today's temperature in a city, in °C."""
    await asyncio.sleep(0.3)  # a slow API: the two lookups overlap
    return {"city": city, "celsius": TEMPERATURES.get(city, 20)}


def make_agent() -> AgentCore:
    """The scripted model plans both lookups, then answers; any number of runs."""
    model = ScriptedProvider(
        [lambda request: PLAN if request.phase == "planning" else ANSWER],
        repeat=True,
        latency_s=0.05,
    )
    return create_agent(provider=model, tools=[weather], storage="memory")


async def events(response: httpx.Response) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """The (name, data) of each server-sent event of a streaming response."""
    name = ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            yield name, json.loads(line.removeprefix("data: "))


async def client(url: str) -> None:
    """What an application does with the API: stream one run, ask one as JSON, read back."""
    async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=30) as http:
        refused = await http.get("/v1/threads", headers={"Authorization": "Bearer wrong"})
        print(f"a wrong token: HTTP {refused.status_code} {refused.json()['error']['type']}")

        print("\nPOST /v1/threads/trip/runs  (Accept: text/event-stream)")
        body = {"query": "Lisbon or Porto today: which one is warmer?"}
        stream = {"Accept": "text/event-stream"}
        async with http.stream("POST", "/v1/threads/trip/runs", json=body, headers=stream) as r:
            answer = []
            async for name, data in events(r):
                if name == "token" and data["phase"] == "synthesis":
                    answer.append(data["text"])  # planning streams tokens too: the plan
                elif name == "PLAN" and data["content"].get("status") == "ready":
                    print(f"  PLAN            {data['content'].get('plan', '')!r}")
                elif name == "TOOL_EXECUTION":
                    content = data["content"]
                    print(f"  TOOL_EXECUTION  {content['callId']} -> {content.get('output')}")
                elif name == "final":
                    metadata = data["metadata"]
                    print(f"  tokens streamed {''.join(answer)!r}")
                    print(f"  final           {metadata['status']}, {metadata['trace_id']}")

        print("\nPOST /v1/threads/trip/runs  (JSON)")
        again = await http.post("/v1/threads/trip/runs", json={"query": "And tomorrow?"})
        print(f"  {again.json()['response']['content']}")

        threads = (await http.get("/v1/threads")).json()["threads"]
        messages = (await http.get("/v1/threads/trip/messages")).json()["messages"]
        print(f"\nGET /v1/threads: {threads}")
        print(f"GET /v1/threads/trip/messages: {len(messages)} messages")
        for message in messages:
            print(f"  {message['role']:<9} {message['content']}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def main() -> None:
    print("offline: a scripted model plans and answers (no API key, no network)")
    app = create_app(make_agent(), tokens=[TOKEN], close_agent=True)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()  # raises why it could not start
        await asyncio.sleep(0.02)
    print(f"serving on http://127.0.0.1:{port} (the web console is at /)")
    try:
        await client(f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        await serving


if __name__ == "__main__":
    asyncio.run(main())
