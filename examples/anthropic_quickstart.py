"""Stream an answer from Claude with extended thinking, through pes-agent's provider layer.

    ANTHROPIC_API_KEY=sk-ant-... python examples/anthropic_quickstart.py

Thinking arrives as its own blocks, apart from the answer. Without a key the script says so
and exits.
"""

from __future__ import annotations

import asyncio
import os

from pes_agent.config import ProviderConfig
from pes_agent.providers import (
    LLMRequest,
    PromptMessage,
    ProviderPool,
    StreamMetadata,
    StreamRestart,
    ThinkingBlock,
    TokenDelta,
)

CONFIG = ProviderConfig(
    "anthropic",
    os.environ.get("PES_MODEL", "claude-sonnet-4-5"),
    options={"thinking": {"type": "enabled", "budget_tokens": 1024}},
)


# lead: switch to create_agent(provider=CONFIG, tools=[...]) and agent.process(...) here.
async def main() -> None:
    if not os.environ.get("ANTHROPIC_API_KEY"):
        print("ANTHROPIC_API_KEY is not set: skipping the Anthropic quickstart.")
        return
    request = LLMRequest(
        messages=(
            PromptMessage("system", "You answer in two short sentences."),
            PromptMessage("user", "Is 1,001 a prime number?"),
        ),
        phase="synthesis",
        thread_id="quickstart",
        trace_id="quickstart-1",
    )
    async with ProviderPool() as pool:
        async for event in pool.get(CONFIG).stream(request):
            if isinstance(event, TokenDelta) and event.kind == "content":
                print(event.text, end="", flush=True)
            elif isinstance(event, ThinkingBlock):
                print(f"[thinking]\n{event.text}\n[answer]")
            elif isinstance(event, StreamRestart):
                print(f"\n[retrying: {event.reason}]")
            elif isinstance(event, StreamMetadata):
                usage = event.usage
                print(
                    f"\n\n{usage.input_tokens} tokens in, {usage.output_tokens} out "
                    f"({usage.reasoning_tokens} thinking), stop reason {event.stop_reason}"
                )


if __name__ == "__main__":
    asyncio.run(main())
