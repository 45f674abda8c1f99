"""Quickstart: an agent with two tools answers one question, streaming its answer.

    python examples/quickstart.py [PROVIDER]        # e.g. openai:gpt-4o-mini (the default)

With the provider's API key set (OPENAI_API_KEY, ANTHROPIC_API_KEY) it calls the real model;
without one it says so and runs offline on a scripted model that answers the same way.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from pes_agent import (
    AgentProps,
    LLMProvider,
    Observation,
    ObservationType,
    StreamEvent,
    configure_logging,
    create_agent,
    tool,
)
from pes_agent.testing import ScriptedProvider

KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


@tool
async def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city."""
    return {"city": city, "sky": "sunny", "celsius": 21}


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


def offline_model() -> ScriptedProvider:
    """A scripted model that plans both tool calls and then answers from their results."""
    plan = {
        "title": "Weather and arithmetic",
        "intent": "Get the weather in Paris and compute 12 * 7.",
        "plan": "1. Look up Paris.\n2. Multiply 12 by 7.\n3. Answer both.",
        "toolCalls": [
            {"callId": "call_1", "toolName": "get_weather", "arguments": {"city": "Paris"}},
            {"callId": "call_2", "toolName": "multiply", "arguments": {"a": 12, "b": 7}},
        ],
    }
    return ScriptedProvider(
        [json.dumps(plan), "It is sunny and 21 °C in Paris, and 12 × 7 = 84."], chunk_size=4
    )


async def run(provider: str) -> None:
    """Answer one question with `provider`, or offline when its API key is missing."""
    configure_logging("WARNING")
    key = KEYS.get(provider.split(":", 1)[0])
    model: str | LLMProvider = provider
    if key is not None and not os.environ.get(key):
        print(f"[offline] {key} is not set: using a scripted model instead of {provider}\n")
        model = offline_model()

    def on_tool(observation: Observation) -> None:
        content = observation.content
        print(f"  {content['toolName']}: {content['status']} -> {content['output']}")

    def on_token(event: StreamEvent) -> None:
        if event.kind == "token":
            print(event.text, end="", flush=True)

    async with create_agent(provider=model, tools=[get_weather, multiply]) as agent:
        agent.observations.subscribe(on_tool, types=[ObservationType.TOOL_EXECUTION])
        agent.stream.subscribe(on_token, phases=["synthesis"])
        print("tools:")
        result = await agent.process(AgentProps("Weather in Paris, and 12 * 7?", "quickstart"))
    meta = result.metadata
    print(f"\n\nstatus={meta.status} llm_calls={meta.llm_calls} tool_calls={meta.tool_calls}")
    print(f"tokens: {meta.usage.input_tokens} in, {meta.usage.output_tokens} out")
    if meta.error:
        print(f"error: {meta.error}")


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1] if len(sys.argv) > 1 else "openai:gpt-4o-mini"))
