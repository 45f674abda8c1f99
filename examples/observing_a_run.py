"""Observing a run: callbacks feed a plain-text progress display; the log is read afterwards.

Two threads run at once. The progress display follows thread "alice" only (a thread filter)
and only the observation types it draws (a type filter); a token counter follows her model
streams through `agent.stream`; an async callback forwards every thread's final status, as one
would to a websocket. Then `get_observations` reads the stored log back.

    python examples/observing_a_run.py [PROVIDER]   # e.g. openai:gpt-4o-mini (the default)

Without the provider's API key it says so and runs offline on a scripted model.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter

from pes_agent import (
    AgentProps,
    LLMProvider,
    LLMRequest,
    Observation,
    ObservationType,
    StreamEvent,
    configure_logging,
    create_agent,
    tool,
)
from pes_agent.testing import ScriptedProvider

T = ObservationType


@tool
async def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city."""
    await asyncio.sleep(0.2)
    return {"city": city, "celsius": len(city) * 4}


@tool
async def get_local_time(city: str) -> str:
    """The local time in a city."""
    await asyncio.sleep(0.1)
    return "14:05"


def scripted_reply(request: LLMRequest) -> str:
    """The offline model: plan both lookups for the city asked about, then answer."""
    query = request.messages[-1].content.removeprefix("# User query\n").split("\n")[0]
    city = query.rsplit(" ", 1)[-1].rstrip("?")
    if request.phase == "synthesis":
        return f"It is 14:05 in {city}, and warm."
    tools = ["get_weather", "get_local_time"]  # independent: they run side by side
    calls = [{"callId": name, "toolName": name, "arguments": {"city": city}} for name in tools]
    return json.dumps({"intent": f"Weather and time in {city}", "toolCalls": calls})


class Progress:
    """Prints a line per step of a run: each model call, the plan, each tool's start and end."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def line(self, text: str) -> None:
        print(f"{(time.perf_counter() - self.started) * 1000:6.0f} ms  {text}")

    def __call__(self, observation: Observation) -> None:
        c = observation.content
        match observation.type:
            case T.LLM_STREAM_START:
                self.line(f"[{c['phase']}] calling {c['provider']}:{c['model']}")
            case T.LLM_STREAM_METADATA:
                self.line(f"[{c['phase']}] used {c['usage']['total_tokens']} tokens")
            case T.PLAN if c["status"] == "ready":
                self.line(f"[execution] {len(c['toolCalls'])} tool calls")
            case T.TOOL_CALL:
                self.line(f"  ▶ {c['toolName']}({json.dumps(c['arguments'])})")
            case T.TOOL_EXECUTION:
                self.line(f"  ✔ {c['toolName']} {c['status']} in {c['durationMs']:.0f} ms")
            case T.FINAL_RESPONSE:
                self.line(f"[done] {c['status']}")


async def main(provider: str) -> None:
    configure_logging("WARNING")
    model: str | LLMProvider = provider
    key = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}.get(provider.split(":")[0])
    if key and not os.environ.get(key):
        print(f"[offline] {key} is not set: using a scripted model instead of {provider}\n")
        model = ScriptedProvider([scripted_reply], repeat=True, latency_s=0.05, chunk_size=4)
    agent = create_agent(provider=model, tools=[get_weather, get_local_time])

    progress = Progress()
    drawn = [T.LLM_STREAM_START, T.LLM_STREAM_METADATA, T.PLAN, T.TOOL_CALL, T.TOOL_EXECUTION]
    agent.observations.subscribe(progress, types=[*drawn, T.FINAL_RESPONSE], thread_id="alice")

    tokens: Counter[str] = Counter()

    def count_tokens(event: StreamEvent) -> None:
        if event.kind == "token":
            tokens[event.phase] += 1
        elif event.kind == "end":
            progress.line(f"[{event.phase}] streamed {tokens[event.phase]} chunks of text")

    agent.stream.subscribe(count_tokens, thread_id="alice")

    forwarded: list[str] = []

    async def forward(observation: Observation) -> None:
        await asyncio.sleep(0.01)  # awaited in line with the run: hand slow work to a queue
        forwarded.append(f"{observation.thread_id}={observation.content.get('status', 'error')}")

    agent.observations.subscribe(forward, types=[T.FINAL_RESPONSE, T.ERROR])  # every thread

    async with agent:
        alice, bob = await asyncio.gather(
            agent.process(AgentProps("What's it like in Lisbon?", "alice")),
            agent.process(AgentProps("What's it like in Oslo?", "bob")),
        )
        log = await agent.observations.get_observations("alice")
        tools = await agent.observations.get_observations("alice", types=[T.TOOL_EXECUTION])
    print(f"\nalice: {alice.response.content}\nbob:   {bob.response.content}")
    print(f"the async callback forwarded: {', '.join(forwarded)}")
    print(f"alice's stored log: {len(log)} observations")
    for kind, count in Counter(o.type.value for o in log).items():
        print(f"  {kind:<20} {count}")
    slowest = max(tools, key=lambda o: o.content["durationMs"])
    print(f"slowest tool: {slowest.content['toolName']} ({slowest.content['durationMs']:.0f} ms)")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "openai:gpt-4o-mini"))
