"""The messages of an ECS agent's conversation, tool calls and tool answers included."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Literal

from pes_agent.tools.calls import ToolCall

__all__ = ["ChatMessage", "ChatRole", "ToolCall"]

ChatRole = Literal["system", "user", "assistant", "tool"]


@dataclass(slots=True)
class ChatMessage:
    """One message: `ChatMessage("user", "hi")`, an assistant turn with `tool_calls`, or a
    `"tool"` message answering the call whose id is `tool_call_id`."""

    role: ChatRole
    content: str = ""
    _: KW_ONLY
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
