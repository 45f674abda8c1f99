"""Conversation messages: what a thread's history is made of."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pes_agent.observing.types import new_id
from pes_agent.providers.base import PromptMessage, PromptRole

__all__ = ["ConversationMessage", "MessageRole", "history_prompt"]


class MessageRole(StrEnum):
    """Who said a message."""

    USER = "USER"
    AI = "AI"
    SYSTEM = "SYSTEM"
    TOOL = "TOOL"


def _new_id() -> str:
    # 32 random hex digits, as `uuid.uuid4().hex` gives, at a tenth of its cost (`new_id`):
    # a run saves two messages.
    return new_id()


def _now() -> datetime:
    return datetime.now(UTC)


class ConversationMessage(BaseModel):
    """One message of a thread's history, as saved by the ConversationManager."""

    model_config = ConfigDict(frozen=True)

    message_id: str = Field(default_factory=_new_id)
    thread_id: str
    role: MessageRole
    content: str
    timestamp: datetime = Field(default_factory=_now)
    metadata: dict[str, Any] = Field(default_factory=dict)


def history_prompt(history: Sequence[ConversationMessage]) -> list[PromptMessage]:
    """A thread's history as prompt messages, oldest first (AI messages become `assistant`)."""
    messages: list[PromptMessage] = []
    for message in history:
        role: PromptRole
        if message.role is MessageRole.USER:
            role = "user"
        elif message.role is MessageRole.AI:
            role = "assistant"
        elif message.role is MessageRole.TOOL:
            role = "tool"
        else:
            role = "system"
        messages.append(PromptMessage(role=role, content=message.content))
    return messages
