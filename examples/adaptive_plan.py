"""A plan that adapts: a tool fails, the model revises the rest of the plan — offline.

The scripted model plans two calls: fetch tide tables from the primary service, then a
language step that summarises them. The primary service is down, so with
`reevaluate="on_failure"` the model is shown the failure and the call not yet run, and replaces
it with the backup service and a new summary that uses the backup's result. The replaced call
never runs. Every PLAN observation (the first plan and each revision) is printed.

    python examples/adaptive_plan.py
"""

from __future__ import annotations

import asyncio
import json

from pes_agent import (
    AgentProps,
    Observation,
    ObservationType,
    configure_logging,
    create_agent,
    tool,
)
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider


@tool
def primary_tides(port: str) -> str:
    """Tide tables from the primary service."""
    raise ConnectionError("primary tide service unavailable")


@tool
def backup_tides(port: str) -> dict[str, str]:
    """Tide tables from the backup service."""
    return {"port": port, "high": "06:12", "low": "12:31"}


PLAN = {
    "intent": "Tell the user today's tides in Brest.",
    "plan": "1. Fetch the tide tables.\n2. Summarise them in one sentence.",
    "toolCalls": [
        {"callId": "call_1", "toolName": "primary_tides", "arguments": {"port": "Brest"}},
        {
            "callId": "call_2",
            "instruction": "Summarise these tides in one sentence: {step_1_result}",
        },
    ],
}
# What the model answers when shown the failed call_1 and the call_2 not yet run. New calls
# are numbered on from step 3, so {step_3_result} is the backup's tide tables.
REVISION = {
    "toolCalls": [
        {"callId": "call_3", "toolName": "backup_tides", "arguments": {"port": "Brest"}},
        {
            "callId": "call_4",
            "instruction": "Summarise these tides in one sentence: {step_3_result}",
        },
    ]
}


def model_answer(request: LLMRequest) -> str:
    """The scripted model: one answer per phase of the run."""
    if request.phase == "planning":
        return json.dumps(PLAN)
    if request.phase == "reevaluation":
        return json.dumps(REVISION)
    if request.phase == "language_step":
        return "In Brest, high tide is at 06:12 and low tide at 12:31."
    return "Today in Brest: high tide 06:12, low tide 12:31 (from the backup service)."


def show(observation: Observation) -> None:
    content = observation.content
    if observation.type is ObservationType.PLAN and content["status"] in ("ready", "revised"):
        print(f"PLAN {observation.title}")
        for call in content["toolCalls"]:
            what = call["instruction"] or f"{call['tool_name']}({call['arguments']})"
            print(f"    {call['call_id']}: {what}")
        if content.get("replaced"):
            print(f"    replaced, never run: {', '.join(content['replaced'])}")
    elif observation.type is ObservationType.TOOL_EXECUTION:
        detail = content["output"] if content["status"] == "success" else content["error"]
        print(f"  {content['callId']} ({content['kind']}) {content['status']}: {detail}")


async def main() -> None:
    configure_logging("ERROR")  # the failing tool is logged as a warning; the run handles it
    print("[offline] scripted model — no API key, no network\n")
    agent = create_agent(
        provider=ScriptedProvider([model_answer], repeat=True),
        tools=[primary_tides, backup_tides],
        reevaluate="on_failure",
        max_revisions=2,
    )
    agent.observations.subscribe(show, types=[ObservationType.PLAN, ObservationType.TOOL_EXECUTION])
    async with agent:
        result = await agent.process(AgentProps("What are the tides in Brest today?", "tides"))
    meta = result.metadata
    print(f"\nanswer: {result.response.content}")
    # "partial": call_1 did fail; the revision worked around it.
    print(f"status={meta.status} llm_calls={meta.llm_calls} tool_calls={meta.tool_calls}")


if __name__ == "__main__":
    asyncio.run(main())
