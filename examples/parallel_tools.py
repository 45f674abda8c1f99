"""Placeholders, parallel tool calls and a live observation feed — offline, on a scripted model.

The scripted model plans four calls: two independent lookups that run side by side, a
comparison fed both results through `{step_N_result}` placeholders, and a summary that waits
for the comparison. A subscriber prints each tool call as it starts and ends.

    python examples/parallel_tools.py
"""

from __future__ import annotations

import asyncio
import json
import time

from pes_agent import (
    AgentProps,
    Observation,
    ObservationType,
    configure_logging,
    create_agent,
    tool,
)
from pes_agent.testing import ScriptedProvider

CITIES = {"Paris": 2_102_650, "Lyon": 522_250}


@tool
async def population(city: str) -> dict[str, object]:
    """Look up a city's population."""
    await asyncio.sleep(0.3)  # a slow API: the two lookups overlap
    return {"city": city, "population": CITIES[city]}


@tool
def compare(a: int, b: int) -> dict[str, float]:
    """Compare two numbers: their ratio and difference."""
    return {"ratio": round(a / b, 2), "difference": a - b}


@tool
def summarize(text: str) -> str:
    """Condense a sentence."""
    return text.strip()


PLAN = {
    "title": "Paris vs Lyon",
    "intent": "Compare the populations of Paris and Lyon.",
    "plan": "1. Look up both cities at once.\n2. Compare them.\n3. Summarize.",
    "toolCalls": [
        {"callId": "paris", "toolName": "population", "arguments": {"city": "Paris"}},
        {"callId": "lyon", "toolName": "population", "arguments": {"city": "Lyon"}},
        {
            "callId": "cmp",
            "toolName": "compare",
            "arguments": {"a": "{step_1_result.population}", "b": "{step_2_result.population}"},
        },
        {
            "callId": "sum",
            "toolName": "summarize",
            "arguments": {"text": "Paris is {step_3_result.ratio}x the size of Lyon."},
        },
    ],
}

ANSWER = "Paris (2.1 M) is about 4 times as populous as Lyon (0.5 M)."


async def main() -> None:
    configure_logging("WARNING")
    print("[offline] scripted model — no API key, no network\n")
    model = ScriptedProvider([json.dumps(PLAN), ANSWER])
    agent = create_agent(provider=model, tools=[population, compare, summarize])
    start = time.perf_counter()

    def show(observation: Observation) -> None:
        at = f"{(time.perf_counter() - start) * 1000:6.0f} ms"
        content = observation.content
        if observation.type is ObservationType.TOOL_CALL:
            print(f"{at}  ▶ {content['callId']:<6} {content['toolName']}({content['arguments']})")
        elif observation.type is ObservationType.TOOL_EXECUTION:
            print(f"{at}  ✔ {content['callId']:<6} {content['status']}: {content['output']}")
        else:
            print(f"{at}  {observation.type.value}: {content.get('intent') or content.get('plan')}")

    agent.observations.subscribe(
        show,
        types=[ObservationType.INTENT, ObservationType.TOOL_CALL, ObservationType.TOOL_EXECUTION],
    )
    async with agent:
        result = await agent.process(AgentProps("How do Paris and Lyon compare?", "demo"))
    meta = result.metadata
    print(f"\nanswer: {result.response.content}")
    print(
        f"status={meta.status} llm_calls={meta.llm_calls} tool_calls={meta.tool_calls} "
        f"tokens={meta.usage.total_tokens} execution={meta.phases.execution_ms:.0f} ms "
        "(the two 300 ms lookups ran side by side)"
    )


if __name__ == "__main__":
    asyncio.run(main())
