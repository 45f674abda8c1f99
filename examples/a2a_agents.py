"""Two pes-agent services, one asking the other over A2A — offline, on scripted models.

A weather service serves its agent with `create_app` (A2A at `POST /a2a`, its card at
`/.well-known/agent-card.json`, behind a bearer token). A travel agent uses it as a tool,
`A2AAgent(url, headers=...)`: its plan asks the weather service, then hands the answer to a
local tool through `{step_1_result}`. Needs `pip install 'pes-agent[a2a,server]'`.

    python examples/a2a_agents.py
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn

from pes_agent import AgentCore, AgentProps, create_agent, tool
from pes_agent.interop.a2a import A2AAgent, A2ASettings
from pes_agent.server import create_app
from pes_agent.testing import ScriptedProvider, plan_call, plan_json

TOKEN = "weather-token"


@tool
async def forecast(city: str) -> str:
    """Tomorrow's forecast for a city."""
    return f"{city}: sunny, 24 °C"


@tool
async def pack(forecast: str) -> str:
    """What to pack for a forecast."""
    return "sunglasses and a hat" if "sunny" in forecast else "an umbrella"


def weather_agent() -> AgentCore:
    """The remote service's agent: plans a forecast lookup, answers with it."""
    model = ScriptedProvider(
        [
            lambda request: (
                plan_json(plan_call(1, "forecast", city="Lisbon"))
                if request.phase == "planning"
                else "Tomorrow in Lisbon: sunny, 24 °C."
            )
        ],
        repeat=True,
    )
    return create_agent(provider=model, tools=[forecast], storage="memory")


def travel_agent(weather: A2AAgent) -> AgentCore:
    """The local agent: asks the weather service, then packs for its answer."""
    model = ScriptedProvider(
        [
            lambda request: (
                plan_json(
                    plan_call(1, weather.schema.name, message="Weather in Lisbon tomorrow?"),
                    plan_call(2, "pack", forecast="{step_1_result}"),
                )
                if request.phase == "planning"
                else "Lisbon will be sunny tomorrow: pack sunglasses and a hat."
            )
        ],
        repeat=True,
    )
    return create_agent(provider=model, tools=[weather, pack], storage="memory")


@asynccontextmanager
async def serve(agent: AgentCore) -> AsyncIterator[str]:
    """The agent's app on a free local port, in this event loop."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = A2ASettings(name="weather", description="Forecasts for any city.")
    app = create_app(agent, tokens=[TOKEN], a2a=settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    for _ in range(500):  # uvicorn sets `started` once it listens
        if server.started:
            break
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def main() -> None:
    async with weather_agent() as remote, serve(remote) as url:
        weather = A2AAgent(url, headers={"Authorization": f"Bearer {TOKEN}"}, name="weather")
        card = await weather.read_card()
        print(f"the remote agent's card: {card.name!r}, {card.description!r}")
        print(f"  skills: {[skill.id for skill in card.skills]}")
        async with travel_agent(weather) as local:
            response = await local.process(AgentProps("What should I pack for Lisbon?", "trip"))
            for observation in await local.observations.get_observations("trip"):
                output = observation.content.get("output")
                if output is not None:
                    print(f"  {observation.content.get('toolName', 'tool')}: {output}")
        print(f"\nanswer: {response.response.content}")


if __name__ == "__main__":
    asyncio.run(main())
