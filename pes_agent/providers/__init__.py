"""Model providers: the streaming protocol, the OpenAI / Anthropic / Ollama adapters, and a pool.

```python
async with ProviderPool() as pool:
    provider = pool.get("openai:gpt-4o-mini")
    async for event in provider.stream(request):
        ...
```

The adapters (and their SDKs) are imported on first use, so `import pes_agent` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pes_agent._lazy import lazy_exports
from pes_agent.providers.base import (
    LLMPhase,
    LLMProvider,
    LLMRequest,
    PromptMessage,
    PromptRole,
    ProviderEvent,
    StreamMetadata,
    StreamRestart,
    ThinkingBlock,
    TokenDelta,
    TokenKind,
    ToolCallDelta,
    ToolCallEvent,
    ToolChoice,
)
from pes_agent.providers.fallback import FallBackOn, FallbackProvider, should_fall_back
from pes_agent.providers.registry import (
    ProviderFactory,
    ProviderPool,
    ProviderSpec,
    create_provider,
    parse_provider_spec,
    provider_names,
    register_provider,
)
from pes_agent.providers.retry import RetryPolicy

if TYPE_CHECKING:
    from pes_agent.providers.anthropic import AnthropicProvider
    from pes_agent.providers.ollama import OllamaProvider
    from pes_agent.providers.openai import OpenAIProvider

__all__ = [
    "AnthropicProvider",
    "FallBackOn",
    "FallbackProvider",
    "LLMPhase",
    "LLMProvider",
    "LLMRequest",
    "OllamaProvider",
    "OpenAIProvider",
    "PromptMessage",
    "PromptRole",
    "ProviderEvent",
    "ProviderFactory",
    "ProviderPool",
    "ProviderSpec",
    "RetryPolicy",
    "StreamMetadata",
    "StreamRestart",
    "ThinkingBlock",
    "TokenDelta",
    "TokenKind",
    "ToolCallDelta",
    "ToolCallEvent",
    "ToolChoice",
    "create_provider",
    "parse_provider_spec",
    "provider_names",
    "register_provider",
    "should_fall_back",
]

_HOMES = {
    "AnthropicProvider": "pes_agent.providers.anthropic",
    "OllamaProvider": "pes_agent.providers.ollama",
    "OpenAIProvider": "pes_agent.providers.openai",
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)
