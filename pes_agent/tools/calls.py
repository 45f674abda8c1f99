"""A tool call as a model asked for it: what providers stream and ECS agents execute."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ToolCall"]


@dataclass(slots=True)
class ToolCall:
    """One call the model asked for: `id` answers it, `name` picks the tool, `arguments` feed it.

    `id` is the provider's call id (OpenAI `call_…`, Anthropic `toolu_…`); the tool message
    that answers the call carries it as `tool_call_id`.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
