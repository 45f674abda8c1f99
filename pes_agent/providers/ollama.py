"""Ollama through its OpenAI-compatible endpoint: `"ollama:llama3.1"`, no API key needed.

The URL is `ProviderConfig.base_url`, else `OLLAMA_BASE_URL`, else `http://localhost:11434/v1`.
A key is sent only when one is configured (`api_key` or `OLLAMA_API_KEY`, for a proxy that
checks one); otherwise the placeholder `"ollama"`, which Ollama ignores.
"""

from __future__ import annotations

from typing import ClassVar

from pes_agent.config import ProviderConfig
from pes_agent.providers._sdk import env_value
from pes_agent.providers.openai import OpenAIProvider

__all__ = ["DEFAULT_OLLAMA_BASE_URL", "OllamaProvider"]

DEFAULT_OLLAMA_BASE_URL = "http://localhost:11434/v1"


class OllamaProvider(OpenAIProvider):
    """An `OpenAIProvider` with Ollama's defaults: local URL, no key required."""

    label = "Ollama"
    key_env_var = "OLLAMA_API_KEY"
    placeholder_key: ClassVar[str | None] = "ollama"

    def _resolve_base_url(self, config: ProviderConfig) -> str | None:
        return config.base_url or env_value("OLLAMA_BASE_URL") or DEFAULT_OLLAMA_BASE_URL
