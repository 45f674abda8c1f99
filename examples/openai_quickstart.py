"""The quickstart on OpenAI: `OPENAI_API_KEY=sk-... python examples/openai_quickstart.py`.

Any OpenAI-compatible server works too: `ProviderConfig("openai", MODEL, base_url=...)` for vLLM,
LM Studio or a gateway, or `"ollama:llama3.1"` for a local Ollama. Without a key it runs offline.
"""

import asyncio
import os

from quickstart import run

if __name__ == "__main__":
    asyncio.run(run(os.environ.get("PES_MODEL", "openai:gpt-4o-mini")))
