"""Thread state and configuration: explicit vs implicit saving, enabled tools, per-call options.

1. A tool counts visits in the thread's `AgentState`. With `state_saving="explicit"` (the
   default) only `agent.state.set_agent_state` saves; with `"implicit"` the run saves what its
   tools changed, and records a STATE_UPDATE observation.
2. `ThreadConfig(enabled_tools=[...], system_prompt=...)` narrows one thread: the model is shown
   only the enabled tools, and a call to any other is refused.
3. `AgentProps(..., options=RunOptions(...))` overrides the system prompt, sampling parameters
   and tools for one call; its `enabled_tools` can narrow a thread's tools, never widen them.

    python examples/state_and_threads.py      # offline, on a scripted model (no key, no network)
"""

from __future__ import annotations

import asyncio
import json
import re

from pes_agent import (
    AgentCore,
    AgentProps,
    AgentState,
    LLMParams,
    LLMRequest,
    RunOptions,
    StateSaving,
    ThreadConfig,
    Tool,
    ToolContext,
    configure_logging,
    create_agent,
    tool,
)
from pes_agent.testing import ScriptedProvider


@tool
def count_visit(context: ToolContext) -> int:
    """Count this visit in the thread's state and return the total."""
    assert context.state is not None
    visits = int(context.state.data.get("visits", 0)) + 1
    context.state.data["visits"] = visits  # kept only if the state is saved (see below)
    return visits


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
def web_search(query: str) -> str:
    """Search the web."""
    return f"3 results for {query!r}"


TOOLS: list[Tool] = [count_visit, add, web_search]
PLANS = {  # the offline model's plan for each question: always the same, whatever it is shown
    "Count my visit": ("count_visit", {}),
    "What is 2 + 3?": ("add", {"a": 2, "b": 3}),
    "Search the news": ("web_search", {"query": "news"}),
}


def scripted(request: LLMRequest) -> str:
    """The offline model: the plan for the question, then the tool's result or error."""
    last = request.messages[-1].content
    if request.phase == "planning":
        name, arguments = PLANS[last]
        calls = [{"callId": "c1", "toolName": name, "arguments": arguments}]
        return json.dumps({"intent": last, "toolCalls": calls})
    return "".join(re.findall(r"— success\n(.*)|Error: (.*)", last)[0])


def offline_model() -> ScriptedProvider:
    return ScriptedProvider([scripted], repeat=True)


async def visits(mode: StateSaving) -> None:
    """Runs whose tool counts a visit in the state; what gets saved depends on `mode`."""
    async with create_agent(provider=offline_model(), tools=TOOLS, state_saving=mode) as agent:
        counted = [await ask(agent, "Count my visit", "t") for _ in range(2)]
        saved = await agent.state.get_agent_state("t")
        print(f"\n{mode}: the tool counted {counted}; the saved state is {saved}")
        if mode == "explicit":
            saved = await agent.state.set_agent_state("t", AgentState(data={"visits": 10}))
            print(f"  set_agent_state saved {saved}; the tool then counted", end=" ")
            print(await ask(agent, "Count my visit", "t"))
        updates = await agent.observations.get_observations("t", types=["STATE_UPDATE"])
        print(f"  STATE_UPDATE observations: {[o.content for o in updates]}")


async def ask(agent: AgentCore, query: str, thread: str, options: RunOptions | None = None) -> str:
    result = await agent.process(AgentProps(query, thread, options=options))
    return result.response.content


async def main() -> None:
    configure_logging("WARNING")
    print("[offline] scripted model — no API key, no network")
    await visits("explicit")
    await visits("implicit")

    model = offline_model()
    async with create_agent(provider=model, tools=TOOLS) as agent:
        kid = ThreadConfig(enabled_tools=["add"], system_prompt="You teach sums to a child.")
        await agent.state.set_thread_config("kid", kid)
        for options in (None, RunOptions(enabled_tools=["web_search"])):
            result = await agent.process(AgentProps("Search the news", "kid", options=options))
            prompt = model.requests[-2].messages[0].content  # the planning call's system prompt
            shown = re.findall(r"^## (\w+)$", prompt, re.M)
            print(f"\n'kid' thread, RunOptions.enabled_tools={options and options.enabled_tools}")
            print(f"  prompt: {prompt.splitlines()[0]!r}, tools in it: {shown}")
            print(f"  {result.metadata.status}: {result.response.content}")

        options = RunOptions(
            system_prompt="Answer with a number only.",
            llm_params=LLMParams(temperature=0.0, max_tokens=20),
            enabled_tools=["add"],
        )
        print(f"\n'grown-up' thread, {options.model_dump(exclude_none=True)}")
        print(f"  answer: {await ask(agent, 'What is 2 + 3?', 'grown-up', options)}")
        request = model.requests[-1]
        print(f"  the model got temperature={request.temperature}, max_tokens={request.max_tokens}")
        print(f"  and the system prompt {request.messages[0].content.splitlines()[0]!r}")


if __name__ == "__main__":
    asyncio.run(main())
