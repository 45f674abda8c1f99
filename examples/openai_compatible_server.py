"""A local model behind an OpenAI-compatible server: Ollama, vLLM, LM Studio or a gateway.

    ollama pull llama3.1 && python examples/openai_compatible_server.py    # Ollama
    PES_BASE_URL=http://localhost:8000/v1 PES_LOCAL_MODEL=Qwen/Qwen2.5-7B-Instruct \\
        python examples/openai_compatible_server.py                         # vLLM
    PES_BASE_URL=http://localhost:1234/v1 PES_LOCAL_MODEL=MODEL python ...  # LM Studio

Without PES_BASE_URL the agent uses `provider="ollama:MODEL"` (Ollama at $OLLAMA_BASE_URL, else
http://localhost:11434/v1); with it, `ProviderConfig("openai", MODEL, base_url=PES_BASE_URL,
api_key="none")`. MODEL is $PES_LOCAL_MODEL (default llama3.1). When nothing answers GET /models
there within a second, it says so and runs offline on a scripted model.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request

from pes_agent import (
    AgentProps,
    LLMProvider,
    Observation,
    ObservationType,
    ProviderConfig,
    StreamEvent,
    configure_logging,
    create_agent,
    tool,
)
from pes_agent.testing import ScriptedProvider

MODEL = os.environ.get("PES_LOCAL_MODEL", "llama3.1")
BASE_URL = os.environ.get("PES_BASE_URL")


@tool
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


def server_models(base_url: str) -> list[str] | str:
    """The models an OpenAI-compatible server lists at GET /models, or why it did not answer."""
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=1) as response:
            return [model["id"] for model in json.load(response)["data"]]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"{type(error).__name__}: {error}"


# What the offline model answers: a plan with one tool call, then the answer.
OFFLINE = [
    '{"intent": "Count the words.", "toolCalls": [{"callId": "c1", "toolName": "word_count",'
    ' "arguments": {"text": "the quick brown fox"}}]}',
    "“the quick brown fox” has 4 words.",
]


async def main() -> None:
    configure_logging("WARNING")
    provider: str | ProviderConfig | LLMProvider
    if BASE_URL is None:
        provider = f"ollama:{MODEL}"
        url = os.environ.get("OLLAMA_BASE_URL", "http://localhost:11434/v1")
    else:
        provider = ProviderConfig("openai", MODEL, base_url=BASE_URL, api_key="none")
        url = BASE_URL
    models = server_models(url)
    if isinstance(models, str):
        print(f"[offline] no OpenAI-compatible server at {url} ({models}): using a scripted model")
        provider = ScriptedProvider(OFFLINE, chunk_size=4)
    else:
        print(f"{url} serves {models}; asking {MODEL}")

    def show_call(observation: Observation) -> None:
        print(f"  tool {observation.content['toolName']}({observation.content['arguments']})")

    def show_token(event: StreamEvent) -> None:
        if event.kind == "token":
            print(event.text, end="", flush=True)

    async with create_agent(provider=provider, tools=[word_count], temperature=0) as agent:
        agent.observations.subscribe(show_call, types=[ObservationType.TOOL_CALL])
        agent.stream.subscribe(show_token, phases=["synthesis"])
        query = "How many words are in 'the quick brown fox'?"
        result = await agent.process(AgentProps(query, "local"))
    meta = result.metadata
    print(f"\nstatus={meta.status} llm_calls={meta.llm_calls} tokens={meta.usage.total_tokens}")
    if meta.error:  # small local models sometimes cannot follow the plan format
        print(f"error: {meta.error}")


if __name__ == "__main__":
    asyncio.run(main())
