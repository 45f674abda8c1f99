"""The events ECS agent systems publish on `world.events`: subscribe by class.

```python
world.events.subscribe(ToolApprovalRequestedEvent, lambda e: e.future.set_result(True))
```

Requests that wait for a person (`ToolApprovalRequestedEvent`, `UserInputRequestedEvent`)
carry an `asyncio.Future` the subscriber resolves; nobody answering is a denial or a timeout,
never a hang.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

from ecs_core import EntityId
from pes_agent.tools.calls import ToolCall

__all__ = [
    "BusMessageKind",
    "CheckpointCreatedEvent",
    "CheckpointRestoredEvent",
    "CompactionCompleteEvent",
    "ConversationTruncatedEvent",
    "ErrorOccurredEvent",
    "MCTSNodeScoredEvent",
    "MessageBusDeliveredEvent",
    "MessageBusPublishedEvent",
    "MessageBusResponseEvent",
    "MessageBusTimeoutEvent",
    "MessageDeliveredEvent",
    "PlanRevisedEvent",
    "PlanStepCompletedEvent",
    "RAGRetrievalCompletedEvent",
    "StreamContentDeltaEvent",
    "StreamContentStartEvent",
    "StreamEndEvent",
    "StreamReasoningDeltaEvent",
    "StreamReasoningEndEvent",
    "StreamStartEvent",
    "ToolApprovalRequestedEvent",
    "ToolApprovedEvent",
    "ToolDeniedEvent",
    "UserInputRequestedEvent",
]


BusMessageKind = Literal["message", "request", "response", "timeout"]
"""What a message on the bus is: published to a topic, a request, its response, or the notice
that a request of the recipient's got no response in time."""


# Waiting for a person ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolApprovalRequestedEvent:
    """A call waits for a person: `future.set_result(True)` approves it, `False` denies it."""

    entity_id: EntityId
    tool_call: ToolCall
    future: asyncio.Future[bool]


@dataclass(frozen=True, slots=True)
class ToolApprovedEvent:
    entity_id: EntityId
    tool_call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolDeniedEvent:
    entity_id: EntityId
    tool_call: ToolCall
    reason: str


@dataclass(frozen=True, slots=True)
class UserInputRequestedEvent:
    """The entity asks a person `prompt`: `future.set_result(text)` answers."""

    entity_id: EntityId
    prompt: str
    future: asyncio.Future[str]


# Streaming ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamStartEvent:
    entity_id: EntityId
    provider: str
    model: str


@dataclass(frozen=True, slots=True)
class StreamReasoningDeltaEvent:
    entity_id: EntityId
    text: str


@dataclass(frozen=True, slots=True)
class StreamReasoningEndEvent:
    entity_id: EntityId
    text: str


@dataclass(frozen=True, slots=True)
class StreamContentStartEvent:
    entity_id: EntityId


@dataclass(frozen=True, slots=True)
class StreamContentDeltaEvent:
    entity_id: EntityId
    text: str


@dataclass(frozen=True, slots=True)
class StreamEndEvent:
    """Published after every streamed call, also a failed one (`error` then says why)."""

    entity_id: EntityId
    content: str
    error: str | None = None


# Plans ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlanStepCompletedEvent:
    entity_id: EntityId
    step_index: int
    step_description: str


@dataclass(frozen=True, slots=True)
class PlanRevisedEvent:
    entity_id: EntityId
    old_steps: tuple[str, ...]
    new_steps: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MCTSNodeScoredEvent:
    entity_id: EntityId
    node_id: str
    plan: tuple[str, ...]
    score: float


# Talking to each other ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MessageDeliveredEvent:
    from_entity: EntityId
    to_entity: EntityId
    message: str


@dataclass(frozen=True, slots=True)
class MessageBusPublishedEvent:
    sender: EntityId
    topic: str
    payload: Any
    correlation_id: str | None = None


@dataclass(frozen=True, slots=True)
class MessageBusDeliveredEvent:
    """A bus message reached `recipient`'s conversation, or code took it with `receive`.

    `kind` tells a plain message from a request (to answer by `correlation_id`), a response,
    or a notice that the recipient's own request timed out; `sender` is who sent it (the
    requester itself for a timeout notice).
    """

    recipient: EntityId
    topic: str
    payload: Any
    correlation_id: str | None = None
    sender: EntityId | None = None
    kind: BusMessageKind = "message"


@dataclass(frozen=True, slots=True)
class MessageBusResponseEvent:
    requester: EntityId
    responder: EntityId
    correlation_id: str
    payload: Any


@dataclass(frozen=True, slots=True)
class MessageBusTimeoutEvent:
    requester: EntityId
    topic: str
    correlation_id: str


# Memory, checkpoints, retrieval, errors -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConversationTruncatedEvent:
    entity_id: EntityId
    removed_count: int


@dataclass(frozen=True, slots=True)
class CompactionCompleteEvent:
    entity_id: EntityId
    removed_count: int
    summary: str


@dataclass(frozen=True, slots=True)
class CheckpointCreatedEvent:
    entity_id: EntityId
    index: int


@dataclass(frozen=True, slots=True)
class CheckpointRestoredEvent:
    entity_id: EntityId
    index: int


@dataclass(frozen=True, slots=True)
class RAGRetrievalCompletedEvent:
    entity_id: EntityId
    query: str
    document_ids: tuple[str, ...]
    scores: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class ErrorOccurredEvent:
    """An entity's `ErrorComponent`, reported by `ErrorHandlingSystem` (which then removes it).

    Not `ecs_core.ErrorOccurredEvent`: that one reports a system that raised out of a tick.
    """

    entity_id: EntityId
    error: BaseException
    system_name: str
