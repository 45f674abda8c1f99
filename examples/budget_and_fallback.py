"""A provider outage served by the next provider, and a run stopped at its budget — offline.

The first provider is the real OpenAI SDK pointed at a small stub server on 127.0.0.1 that
answers every request with HTTP 500, as an API having an outage would. After its retry, the
agent's second provider (a scripted model standing in for another vendor) serves the same call.
The observations say which provider answered each call.

The second question runs with `UsageLimits(tool_calls=1)` against a plan of two lookups: the
run stops before the second lookup starts (the first, still running, is cancelled), with an
error naming the limit, and saves nothing.

No API key is needed: nothing leaves this machine.

    python examples/budget_and_fallback.py
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pes_agent import (
    AgentProps,
    MessageRole,
    Observation,
    ObservationType,
    ProviderConfig,
    RetryPolicy,
    RunOptions,
    UsageLimits,
    configure_logging,
    create_agent,
    tool,
)
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines

PRICES = {"gadget": 19.99, "widget": 4.5}


@tool
async def price(item: str) -> dict[str, object]:
    """Look up an item's price in euros."""
    await asyncio.sleep(0.05)
    return {"item": item, "eur": PRICES[item]}


class Outage(BaseHTTPRequestHandler):
    """Every POST gets what an API in trouble sends: HTTP 500 with an OpenAI-shaped body."""

    requests = 0

    def do_POST(self) -> None:  # the name http.server calls
        Outage.requests += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps(
            {"error": {"message": "The server had an error", "type": "server_error"}}
        ).encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the example prints what matters."""


def show(observation: Observation) -> None:
    content = observation.content
    if observation.type is ObservationType.LLM_STREAM_METADATA:
        print(f"  {content['phase']}: answered by {content['response_provider']}")
    elif observation.type is ObservationType.TOOL_EXECUTION:
        error = content.get("error")
        print(
            f"  {content.get('toolName')}: {content.get('status')}"
            + (f" ({error})" if error else "")
        )
    elif observation.type is ObservationType.ERROR:
        print(f"  ERROR ({content.get('phase')}): {observation.title}")


async def main() -> None:
    # The providers' own failure logs (each 500 the stub sends) would repeat what is shown.
    configure_logging(level="critical")
    stub = ThreadingHTTPServer(("127.0.0.1", 0), Outage)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    down = ProviderConfig(
        "openai",
        "gpt-4o-mini",
        api_key="sk-offline-example-not-a-real-key",
        base_url=f"http://127.0.0.1:{stub.server_port}/v1",
        max_retries=1,
    )
    scripted = ScriptedProvider(
        [
            plan_lines(plan_call(1, "price", item="gadget"), intent="a gadget's price"),
            "A gadget costs €19.99.",
            plan_lines(
                plan_call(1, "price", item="gadget"),
                plan_call(2, "price", item="widget"),
                intent="two prices",
            ),
        ]
    )
    agent = create_agent(
        provider=[down, scripted],  # tried in order for every model call
        tools=[price],
        retry_policy=RetryPolicy(initial_backoff_s=0.05, jitter_s=0.0),
    )
    agent.observations.subscribe(show)
    try:
        async with agent:
            print("Fallback (OpenAI SDK on a stub answering 500, then a scripted model):")
            result = await agent.process(AgentProps("What does a gadget cost?", "shop"))
            print(f"  -> {result.metadata.status}: {result.response.content}")
            print(f"  the stub got {Outage.requests} requests (2 model calls, each tried twice)")
            print(f"  usage: {result.metadata.usage.requests} provider requests in all")

            print("\nBudget (UsageLimits(tool_calls=1), a plan of two lookups):")
            limits = RunOptions(usage_limits=UsageLimits(tool_calls=1))
            result = await agent.process(
                AgentProps("A gadget and a widget?", "shop", options=limits)
            )
            print(f"  -> {result.metadata.status}: {result.metadata.error}")
            saved = await agent.conversation.get_messages("shop")
            questions = [m.content for m in saved if m.role is MessageRole.USER]
            print(f"  questions saved on the thread: {questions} (the stopped run saved nothing)")
    finally:
        stub.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
