"""Conversation messages: what a thread's history is made of."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ConversationMessage", "MessageRole"]


class MessageRole(StrEnum):
    """Who said a message."""

    USER = "USER"
    AI = "AI"
    SYSTEM = "SYSTEM"
    TOOL = "TOOL"


def _new_id() -> str:
    return uuid.uuid4().hex


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
