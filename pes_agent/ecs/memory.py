"""`MemorySystem` [10]: keep each conversation within its `max_messages`, never breaking a
tool call from its results.

```python
world.register_system(MemorySystem(), priority=10)
agent = world.create_entity(LLMComponent(model), ConversationComponent(max_messages=40))
```
"""

from __future__ import annotations

from collections.abc import Sequence

from ecs_core import World
from pes_agent.ecs._history import head_length, orphan_tool_messages, split_history
from pes_agent.ecs.components import ConversationComponent
from pes_agent.ecs.events import ConversationTruncatedEvent
from pes_agent.ecs.messages import ChatMessage

__all__ = ["MemorySystem", "truncate_messages"]


def truncate_messages(messages: Sequence[ChatMessage], max_messages: int) -> list[ChatMessage]:
    """The messages a conversation keeps under `max_messages`: the leading system message (and
    a compaction summary right after it), then the newest messages.

    An assistant message with tool calls and its tool results are kept or dropped together:
    when the cut would fall inside such a group the whole group is dropped, so the count stays
    within `max_messages` — except for the newest group, kept whole even when it alone is
    larger. Tool messages whose call is not kept (orphans, which providers reject) are
    dropped too. A conversation already within the limit is returned unchanged.
    """
    if len(messages) <= max_messages:
        return list(messages)
    split = split_history(messages, max_messages - head_length(messages))
    kept = split.head + split.recent
    orphans = set(orphan_tool_messages(kept))
    return [message for index, message in enumerate(kept) if index not in orphans]


class MemorySystem:
    """Truncates each `ConversationComponent` that holds more than `max_messages` messages.

    Publishes `ConversationTruncatedEvent(entity_id, removed_count)` when it removed
    something. The list is changed in place, so code holding `conversation.messages` sees
    the truncated history.
    """

    async def process(self, world: World) -> None:
        """Truncate every conversation over its limit."""
        for entity, (conversation,) in world.query(ConversationComponent):
            messages = conversation.messages
            if len(messages) <= conversation.max_messages:
                continue
            kept = truncate_messages(messages, conversation.max_messages)
            removed = len(messages) - len(kept)
            if removed:
                messages[:] = kept
                await world.events.publish(ConversationTruncatedEvent(entity, removed))
