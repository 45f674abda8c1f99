"""Where a conversation may be cut: the pair rule `MemorySystem` and `CompactionSystem` share.

An assistant message with `tool_calls` and the tool messages answering those calls are one
group: providers reject a tool message whose call is not in the conversation, and an assistant
turn whose calls go unanswered. A cut (the index where the kept, newest part starts) is valid
only where no group straddles it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pes_agent.ecs.messages import ChatMessage

__all__ = [
    "SUMMARY_NAME",
    "Split",
    "head_length",
    "is_summary",
    "orphan_tool_messages",
    "split_history",
]

#: The `name` of the system message `CompactionSystem` writes, so later passes recognise it.
SUMMARY_NAME = "conversation_summary"


def is_summary(message: ChatMessage) -> bool:
    """Whether `message` is a summary written by `CompactionSystem`."""
    return message.role == "system" and message.name == SUMMARY_NAME


@dataclass(frozen=True, slots=True)
class Split:
    """A conversation cut in three: `head` always kept, `older` to drop or summarise, `recent`."""

    head: list[ChatMessage]
    older: list[ChatMessage]
    recent: list[ChatMessage]


def split_history(
    messages: Sequence[ChatMessage], keep: int, *, keep_summary: bool = True
) -> Split:
    """Cut `messages` so that `recent` holds at most `keep` of the newest messages, pair-safe.

    `head` is the leading system message, followed by a compaction summary right after it
    when `keep_summary` (a summary stands for everything older, so dropping it first would
    undo the compaction). A leading summary alone is never the head when `keep_summary` is
    False: it is then older history like any other.

    When the ideal cut falls inside a tool-call group, the whole group goes to `older`, so
    `recent` stays within `keep`; the one exception is the newest group, which always stays
    in `recent` even when it alone exceeds `keep` (dropping it would leave no recent turn at
    all, and its tool results may still be arriving).
    """
    head_size = head_length(messages, keep_summary=keep_summary)
    head = list(messages[:head_size])
    body = messages[head_size:]
    cut = _pair_safe_cut(body, max(keep, 0))
    return Split(head, list(body[:cut]), list(body[cut:]))


def head_length(messages: Sequence[ChatMessage], *, keep_summary: bool = True) -> int:
    """How many leading messages `split_history` keeps as the head (0, 1 or 2)."""
    if not messages or messages[0].role != "system":
        return 0
    if not keep_summary:
        return 0 if is_summary(messages[0]) else 1
    return 2 if len(messages) > 1 and is_summary(messages[1]) else 1


def _pair_safe_cut(body: Sequence[ChatMessage], keep: int) -> int:
    """The smallest valid cut that keeps at most `keep` messages, but never past the newest
    group."""
    size = len(body)
    if size <= keep:
        return 0
    # reach[a] is the index of the last tool message answering assistant a; a cut p is
    # invalid when some assistant before p is answered at or after p.
    reach = [-1] * size
    for tool_index, owner in enumerate(_owners(body)):
        if owner is not None:
            reach[owner] = max(reach[owner], tool_index)
    valid = [True] * (size + 1)
    furthest = -1
    for p in range(1, size + 1):
        furthest = max(furthest, reach[p - 1])
        valid[p] = furthest < p
    newest_group = max(p for p in range(size) if valid[p])
    ideal = size - keep
    cut = next(p for p in range(ideal, size + 1) if valid[p])
    return min(cut, newest_group)


def _owners(body: Sequence[ChatMessage]) -> list[int | None]:
    """For each message, the index of the assistant message whose call it answers (tool
    messages only; None for other messages and for tool messages answering no known call)."""
    owners: list[int | None] = [None] * len(body)
    call_owner: dict[str, int] = {}
    last_caller: int | None = None  # for tool messages without an id, right after the call
    for index, message in enumerate(body):
        if message.role == "tool":
            if message.tool_call_id is not None:
                owners[index] = call_owner.get(message.tool_call_id)
            else:
                owners[index] = last_caller
        elif message.role == "assistant" and message.tool_calls:
            for call in message.tool_calls:
                call_owner[call.id] = index
            last_caller = index
        else:
            last_caller = None
    return owners


def orphan_tool_messages(messages: Sequence[ChatMessage]) -> list[int]:
    """Indexes of tool messages that answer no assistant call earlier in `messages`."""
    return [
        index
        for index, (message, owner) in enumerate(zip(messages, _owners(messages), strict=True))
        if message.role == "tool" and owner is None
    ]
