"""Testing an agent offline: a scripted model in place of the real one, then an eval.

The application builds its agent with a real model. The test swaps in a `ScriptedProvider`
with `agent.override(...)` (only for the runs inside the block), checks one run's tool calls
and plan with `run_agent`, then runs a small pydantic-evals dataset over the same agent with
pes_agent.evals' evaluators, an `LLMJudge` on a scripted judge among them. No API key, no
network: the key below is never sent anywhere.

    python examples/testing_an_agent.py
"""

from __future__ import annotations

import asyncio
import json
import os

from pydantic_evals import Case, Dataset

from pes_agent import AgentCore, LLMRequest, ProviderConfig, create_agent, tool
from pes_agent.evals import (
    AnswerContains,
    CalledTools,
    LLMJudge,
    MaxToolCalls,
    PlanDepthAtMost,
    Status,
    agent_task,
    run_agent,
)
from pes_agent.testing import ScriptedProvider, plan_call, plan_json

FARES = {("Lisbon", "Paris"): 120.0, ("Lisbon", "Berlin"): 150.0}


@tool
def cheapest_flight(origin: str, destination: str) -> dict[str, object]:
    """The cheapest fare between two cities, in US dollars."""
    return {"route": f"{origin}-{destination}", "usd": FARES[(origin, destination)]}


@tool
def to_euros(usd: float) -> float:
    """Convert US dollars to euros."""
    return round(usd * 0.92, 2)


def build_app_agent() -> AgentCore:
    """The agent as the application builds it: a real model (its key unused in this test)."""
    key = os.environ.get("OPENAI_API_KEY", "sk-never-sent")
    return create_agent(
        provider=ProviderConfig("openai", "gpt-4o-mini", api_key=key),
        tools=[cheapest_flight, to_euros],
    )


def scripted_model(request: LLMRequest) -> str:
    """Plans a fare lookup then a conversion for the city asked about, then answers."""
    query = request.messages[-1].content
    city = "Berlin" if "Berlin" in query else "Paris"
    if request.phase == "planning":
        return plan_json(
            plan_call(1, "cheapest_flight", origin="Lisbon", destination=city),
            plan_call(2, "to_euros", usd="{step_1_result.usd}"),
            intent=f"the cheapest fare to {city} in euros",
        )
    euros = {"Paris": "110.40", "Berlin": "138.00"}[city]
    return f"The cheapest flight from Lisbon to {city} costs €{euros}."


def scripted_judge(request: LLMRequest) -> str:
    """Passes an answer that gives a price in euros."""
    answer = request.messages[-1].content.rsplit("# Answer\n", 1)[-1]
    if "€" in answer:
        return json.dumps({"pass": True, "reason": "gives the fare in euros"})
    return json.dumps({"pass": False, "reason": "no price in euros"})


async def main() -> None:
    agent = build_app_agent()
    model = ScriptedProvider([scripted_model], repeat=True)
    judge = ScriptedProvider([scripted_judge], repeat=True)
    async with agent:
        with agent.override(provider=model):
            # One run, checked directly.
            run = await run_agent(agent, "How much is a flight from Lisbon to Paris?")
            assert run.status == "success", run.response.metadata.error
            assert run.tool_names == ("cheapest_flight", "to_euros")
            assert run.plan_depth == 2  # to_euros waits for the fare
            print(f"one run: {run.answer} (tools {list(run.tool_names)}, depth {run.plan_depth})")

            # A dataset: each case is a query, asked on a new thread.
            dataset = Dataset[str, object, object](
                name="fares",
                cases=[
                    Case(name="paris", inputs="Lisbon to Paris, cheapest fare?"),
                    Case(
                        name="berlin",
                        inputs="And to Berlin?",
                        evaluators=(AnswerContains("Berlin"),),
                    ),
                ],
                evaluators=[
                    Status("success"),
                    CalledTools(["cheapest_flight", "to_euros"], in_order=True),
                    MaxToolCalls(2),
                    PlanDepthAtMost(2),
                    LLMJudge("Gives the fare in euros.", provider=judge),
                ],
            )
            report = await dataset.evaluate(agent_task(agent), progress=False)
    report.print(include_reasons=True, include_durations=False, width=100)
    assertions = [result.value for case in report.cases for result in case.assertions.values()]
    print(f"{sum(assertions)} of {len(assertions)} assertions passed")
    assert all(assertions)
    assert not report.failures


if __name__ == "__main__":
    asyncio.run(main())
