"""A plan that runs while it is written — offline, on a scripted model writing at a real pace.

The scripted model writes its plan in the compact protocol, a call per line, at about 100
characters a second. Each lookup starts the moment its call is complete (at its `)`), long
before the plan is; the comparison waits for both lookups. A second question gets a plan that
turns out unusable (a call uses the result of a step that never comes): the slow census it had
started is cancelled, the plan discarded, and the repaired plan runs from a clean slate.

    python examples/streaming_plan.py
"""

from __future__ import annotations

import asyncio
import time

from pes_agent import (
    AgentProps,
    Observation,
    ObservationType,
    configure_logging,
    create_agent,
    tool,
)
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines

CITIES = {"Paris": 2_102_650, "Lyon": 522_250}


@tool
async def population(city: str) -> dict[str, object]:
    """Look up a city's population."""
    await asyncio.sleep(0.4)  # a slow API
    return {"city": city, "population": CITIES[city]}


@tool
async def census(city: str) -> dict[str, object]:
    """A city's full census record (slow: seconds)."""
    await asyncio.sleep(5)
    return {"city": city, "population": CITIES[city]}


@tool
def ratio(a: int, b: int) -> float:
    """How many times `a` is `b`, to two decimals."""
    return round(a / b, 2)


PLAN = plan_lines(
    plan_call(1, "population", city="Paris"),
    plan_call(2, "population", city="Lyon"),
    plan_call(3, "ratio", a="{step_1_result.population}", b="{step_2_result.population}"),
    intent="how much bigger Paris is than Lyon",
)
# Step 2 uses step 3's result: a step the plan never writes.
BROKEN = plan_lines(
    plan_call(1, "census", city="Paris"),
    plan_call(2, "ratio", a="{step_1_result.population}", b="{step_3_result.population}"),
    intent="a plan with a mistake",
)
REPAIRED = plan_lines(plan_call(1, "population", city="Lyon"), intent="Lyon's population")


async def main() -> None:
    configure_logging("WARNING")
    print("Offline: a scripted model writing about 100 characters a second (no API key).\n")
    model = ScriptedProvider(
        [PLAN, "Paris has about 4 times Lyon's population.", BROKEN, REPAIRED, "522,250."],
        chunk_size=4,
        chunk_latency_s=0.04,
    )
    async with create_agent(provider=model, tools=[population, census, ratio]) as agent:
        started = time.perf_counter()

        def show(observation: Observation) -> None:
            content = observation.content
            at = f"{time.perf_counter() - started:5.2f} s"
            if observation.type is ObservationType.LLM_STREAM_END:
                print(f"{at}  the model finished writing ({content['phase']})")
            elif observation.type is ObservationType.TOOL_CALL:
                print(f"{at}  ▶ {content['callId']} {content['toolName']} {content['arguments']}")
            elif observation.type is ObservationType.TOOL_EXECUTION:
                outcome = content["output"] if content["status"] == "success" else content["error"]
                print(f"{at}  ✓ {content['callId']} {content['status']}: {outcome}")
            elif observation.type is ObservationType.PLAN and content["status"] == "discarded":
                print(
                    f"{at}  plan discarded, cancelled {content['cancelled']}: {content['reason']}"
                )

        agent.observations.subscribe(show)
        result = await agent.process(AgentProps("How much bigger is Paris than Lyon?", "t1"))
        print(f"answer: {result.response.content} ({result.metadata.status})\n")

        started = time.perf_counter()
        result = await agent.process(AgentProps("And Lyon's population?", "t1"))
        print(f"answer: {result.response.content} ({result.metadata.status})")


if __name__ == "__main__":
    asyncio.run(main())
