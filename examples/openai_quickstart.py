"""Stream an answer from OpenAI, token by token, through pes-agent's provider layer.

    OPENAI_API_KEY=sk-... python examples/openai_quickstart.py

Any OpenAI-compatible server works too: set OPENAI_BASE_URL (vLLM, LM Studio, a gateway), or
use "ollama:llama3.1" for a local Ollama. Without a key the script says so and exits.
"""

from __future__ import annotations

import asyncio
import os

from pes_agent.providers import (
    LLMRequest,
    PromptMessage,
    ProviderPool,
    StreamMetadata,
    StreamRestart,
    ThinkingBlock,
    TokenDelta,
)

MODEL = os.environ.get("PES_MODEL", "openai:gpt-4o-mini")


# lead: switch to create_agent(provider=MODEL, tools=[...]) and agent.process(...) here.
async def main() -> None:
    if not os.environ.get("OPENAI_API_KEY"):
        print("OPENAI_API_KEY is not set: skipping the OpenAI quickstart.")
        return
    request = LLMRequest(
        messages=(
            PromptMessage("system", "You answer in two short sentences."),
            PromptMessage("user", "Why do agents plan before they call tools?"),
        ),
        phase="synthesis",
        thread_id="quickstart",
        trace_id="quickstart-1",
    )
    async with ProviderPool() as pool:
        async for event in pool.get(MODEL).stream(request):
            if isinstance(event, TokenDelta) and event.kind == "content":
                print(event.text, end="", flush=True)
            elif isinstance(event, ThinkingBlock):
                print(f"[thought] {event.text}")
            elif isinstance(event, StreamRestart):
                print(f"\n[retrying: {event.reason}]")
            elif isinstance(event, StreamMetadata):
                usage = event.usage
                print(
                    f"\n\n{usage.input_tokens} tokens in, {usage.output_tokens} out, "
                    f"first token after {event.time_to_first_token_ms or 0:.0f} ms"
                )


if __name__ == "__main__":
    asyncio.run(main())
