"""`CompactionSystem` [20]: once a conversation outgrows its token budget, one model call folds
its older part into a single summary message.

```python
world.register_system(CompactionSystem(), priority=20)
agent = world.create_entity(
    LLMComponent(model), ConversationComponent(), CompactionComponent(threshold_tokens=8000)
)
```

What is summarised is everything but the leading system message and the `keep_recent` newest
messages, cut by the same pair rule as `MemorySystem` (an assistant turn with tool calls and its
results are never separated). The summary is a system message named `conversation_summary`
placed right after the system message; the next compaction folds it in with the newer history.

Compaction never repeats in a loop: it needs at least one message besides an earlier summary to
fold, and the summary is clipped to half the threshold, so a summary that comes back too long
costs no further calls until the conversation has grown again.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
from collections.abc import Callable, Iterable, Sequence

from ecs_core import EntityId, ErrorComponent, TerminalComponent, World
from pes_agent.ecs._history import SUMMARY_NAME, is_summary, split_history
from pes_agent.ecs._model import call_model
from pes_agent.ecs.components import CompactionComponent, ConversationComponent
from pes_agent.ecs.events import CompactionCompleteEvent
from pes_agent.ecs.messages import ChatMessage
from pes_agent.errors import RunError

__all__ = [
    "SUMMARY_PROMPT",
    "CompactionSystem",
    "estimate_tokens",
    "message_tokens",
    "tokenizer_name",
]

SUMMARY_PROMPT = (
    "You compress conversation history for an AI assistant that will continue the "
    "conversation without seeing it. Summarise the transcript you are given: keep facts, "
    "decisions, names, numbers, tool results and open questions the assistant needs; drop "
    "pleasantries and repetition. Answer with the summary only, in at most {words} words."
)
"""The compaction call's system prompt; `{words}` is the summary's word budget."""

_SUMMARY_HEADER = "Summary of the earlier conversation:\n"


@functools.cache
def _encoder() -> Callable[[str], list[int]] | None:
    try:
        # Imported by name: tiktoken is optional and ships no type information.
        tiktoken = importlib.import_module("tiktoken")
    except ImportError:
        return None
    try:
        encoding = tiktoken.get_encoding("o200k_base")
    except Exception:
        # tiktoken downloads its tables on first use; offline, fall back to the estimate.
        return None
    encode: Callable[[str], list[int]] = functools.partial(encoding.encode, disallowed_special=())
    return encode


def tokenizer_name() -> str:
    """How `estimate_tokens` counts: ``"tiktoken o200k_base"``, or ``"~4 chars/token"`` when
    tiktoken is not installed (or its tables cannot be loaded)."""
    return "tiktoken o200k_base" if _encoder() is not None else "~4 chars/token"


def estimate_tokens(text: str) -> int:
    """The tokens in `text`: exact with tiktoken's o200k_base, else about four characters each."""
    encode = _encoder()
    if encode is not None:
        return len(encode(text))
    return -(-len(text) // 4)


def message_tokens(messages: Iterable[ChatMessage]) -> int:
    """The tokens of a conversation: contents, tool calls (name and arguments) and tool names."""
    return sum(estimate_tokens(_message_text(message)) for message in messages)


def _message_text(message: ChatMessage) -> str:
    parts = [message.content]
    for call in message.tool_calls or ():
        parts.append(f"{call.name}({json.dumps(call.arguments, default=str)})")
    return " ".join(part for part in parts if part)


def _clip(text: str, max_tokens: int) -> str:
    """`text` cut to about `max_tokens` tokens (marked when cut)."""
    if estimate_tokens(text) <= max_tokens:
        return text
    encode = _encoder()
    if encode is None:
        clipped = text[: max_tokens * 4]
    else:
        # Cut by characters in proportion, then trim until it fits: no decoder needed.
        clipped = text[: len(text) * max_tokens // max(estimate_tokens(text), 1)]
        while clipped and estimate_tokens(clipped) > max_tokens:
            clipped = clipped[: int(len(clipped) * 0.9)]
    return clipped.rstrip() + " […]"


def _transcript(messages: Sequence[ChatMessage]) -> str:
    """The older messages as plain text: any provider accepts it, whatever the roles were."""
    lines: list[str] = []
    for message in messages:
        if is_summary(message):
            lines.append(f"[earlier summary] {message.content.removeprefix(_SUMMARY_HEADER)}")
        elif message.role == "tool":
            label = f"tool {message.name}" if message.name else "tool"
            lines.append(f"[{label} result for {message.tool_call_id}] {message.content}")
        else:
            lines.append(f"[{message.role}] {_message_text(message)}")
    return "\n".join(lines)


def _may_try(compaction: CompactionComponent, conversation: ConversationComponent) -> bool:
    """Whether a call may be made now: not after `max_failures` failures in a row, and after a
    failure only once the conversation has grown (a retry on every tick would hammer a
    broken model)."""
    if compaction.failures >= compaction.max_failures:
        return False
    return compaction.failed_at is None or len(conversation.messages) > compaction.failed_at


class CompactionSystem:
    """Summarises the older part of each conversation over its `CompactionComponent`'s
    `threshold_tokens` with one model call (phase ``"compaction"``) on the entity's model.

    Publishes `CompactionCompleteEvent(entity_id, removed_count, summary)`. A failed call (or
    an empty summary) leaves an `ErrorComponent` on the entity and the history as it was; the
    next try waits for the conversation to grow, and `max_failures` failures in a row stop it.
    Finished entities (with a `TerminalComponent`) are skipped; entities are compacted
    concurrently.
    """

    async def process(self, world: World) -> None:
        """Compact every conversation over its threshold."""
        rows = world.query(CompactionComponent, ConversationComponent, exclude=(TerminalComponent,))
        due = [
            (entity, compaction, conversation)
            for entity, (compaction, conversation) in rows
            if message_tokens(conversation.messages) > compaction.threshold_tokens
            and _may_try(compaction, conversation)
        ]
        if not due:
            return
        async with asyncio.TaskGroup() as group:
            for entity, compaction, conversation in due:
                group.create_task(self._compact(world, entity, compaction, conversation))

    async def _compact(
        self,
        world: World,
        entity: EntityId,
        compaction: CompactionComponent,
        conversation: ConversationComponent,
    ) -> None:
        messages = conversation.messages
        split = split_history(messages, compaction.keep_recent, keep_summary=False)
        if all(is_summary(message) for message in split.older):
            # Nothing new to fold: calling again would only summarise the summary.
            return
        budget = max(compaction.threshold_tokens // 2, 16)
        try:
            response = await call_model(
                world,
                entity,
                [ChatMessage("user", _transcript(split.older))],
                phase="compaction",
                system_prompt=SUMMARY_PROMPT.format(words=max(budget * 3 // 4, 10)),
            )
            summary = response.text.strip()
            if not summary:
                raise RunError("the compaction call returned an empty summary")
        except Exception as error:
            compaction.failures += 1
            compaction.failed_at = len(messages)
            world.add_component(entity, ErrorComponent(error, type(self).__name__))
            return
        compaction.failures = 0
        compaction.failed_at = None
        summary = _clip(summary, budget)
        folded = [*split.head, *split.older]
        if (
            world.get_component(entity, ConversationComponent) is not conversation
            or conversation.messages is not messages
            or len(messages) < len(folded)
            or any(now is not then for now, then in zip(messages, folded, strict=False))
        ):
            # The history changed under the call (restored, replaced): the summary is stale.
            return
        message = ChatMessage("system", _SUMMARY_HEADER + summary, name=SUMMARY_NAME)
        messages[:] = [*split.head, message, *messages[len(folded) :]]
        await world.events.publish(CompactionCompleteEvent(entity, len(split.older), summary))
