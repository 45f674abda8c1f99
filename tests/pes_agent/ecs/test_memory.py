"""MemorySystem: conversations stay within `max_messages` without breaking tool-call groups."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ecs_core import World
from pes_agent.ecs._history import SUMMARY_NAME
from pes_agent.ecs.components import ConversationComponent
from pes_agent.ecs.events import ConversationTruncatedEvent
from pes_agent.ecs.memory import MemorySystem, truncate_messages
from pes_agent.ecs.messages import ChatMessage, ToolCall


def user(text: str) -> ChatMessage:
    return ChatMessage("user", text)


def answer(text: str) -> ChatMessage:
    return ChatMessage("assistant", text)


def tool_turn(tag: str, calls: int) -> list[ChatMessage]:
    """An assistant turn asking for `calls` tools, followed by one result per call."""
    ids = [f"{tag}_{n}" for n in range(calls)]
    turn = ChatMessage("assistant", "", tool_calls=[ToolCall(i, "lookup", {"n": i}) for i in ids])
    return [turn, *(ChatMessage("tool", f"result {i}", tool_call_id=i) for i in ids)]


def check_pairs(messages: Sequence[ChatMessage]) -> None:
    """Every tool message answers a call kept earlier, and every kept call is answered."""
    called: set[str] = set()
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            called.update(call.id for call in message.tool_calls)
        if message.role == "tool":
            assert message.tool_call_id in called, f"orphaned tool message {message}"
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    assert called <= answered, f"calls left unanswered: {sorted(called - answered)}"


async def run_memory(
    messages: list[ChatMessage], max_messages: int
) -> tuple[list[ChatMessage], list[ConversationTruncatedEvent]]:
    world = World()
    events: list[ConversationTruncatedEvent] = []
    world.events.subscribe(ConversationTruncatedEvent, events.append)
    world.register_system(MemorySystem(), priority=10)
    entity = world.create_entity(ConversationComponent(messages, max_messages=max_messages))
    await world.process()
    conversation = world.get_component(entity, ConversationComponent)
    assert conversation is not None
    return conversation.messages, events


async def test_conversation_within_limit_is_untouched_and_no_event() -> None:
    """At or under `max_messages` nothing is removed and no event is published."""
    messages = [ChatMessage("system", "be brief"), user("a"), answer("b")]
    kept, events = await run_memory(list(messages), max_messages=3)
    assert kept == messages
    assert events == []


async def test_keeps_leading_system_message_and_newest_messages() -> None:
    """Over the limit the system message and the newest messages stay, with one event."""
    system = ChatMessage("system", "be brief")
    turns = [user(f"q{n}") if n % 2 == 0 else answer(f"a{n}") for n in range(10)]
    kept, events = await run_memory([system, *turns], max_messages=4)
    assert kept == [system, *turns[-3:]]
    assert [e.removed_count for e in events] == [7]


async def test_without_system_message_keeps_only_newest() -> None:
    """A conversation with no leading system message keeps just its newest messages."""
    turns = [user(f"q{n}") for n in range(6)]
    kept, events = await run_memory(list(turns), max_messages=2)
    assert kept == turns[-2:]
    assert events[0].removed_count == 4


async def test_truncation_is_in_place() -> None:
    """The component's own list is truncated, so holders of the list see the change."""
    messages = [user(f"q{n}") for n in range(5)]
    world = World()
    world.register_system(MemorySystem(), priority=10)
    world.create_entity(ConversationComponent(messages, max_messages=2))
    await world.process()
    assert [m.content for m in messages] == ["q3", "q4"]


async def test_reference_defect_tail_slice_would_orphan_tool_messages() -> None:
    """Where a plain tail slice would begin with tool results, the whole group is dropped."""
    system = ChatMessage("system", "s")
    group = tool_turn("c", 3)
    messages = [system, user("q"), *group, answer("done"), user("next")]
    # The reference framework keeps messages[-4:]: two tool results without their call.
    naive = [system, *messages[-4:]]
    assert naive[1].role == "tool"
    kept, events = await run_memory(list(messages), max_messages=5)
    check_pairs(kept)
    assert kept == [system, answer("done"), user("next")]
    assert events[0].removed_count == len(messages) - 3


@pytest.mark.parametrize("max_messages", range(1, 16))
async def test_pair_rule_at_every_cut_position(max_messages: int) -> None:
    """For every limit, no group is split, the count stays within it, and nothing needless goes."""
    system = ChatMessage("system", "s")
    body = [user("q1"), *tool_turn("a", 3), answer("a1"), user("q2"), *tool_turn("b", 2)]
    body += [answer("a2")]
    messages = [system, *body]
    kept = truncate_messages(messages, max_messages)
    check_pairs(kept)
    assert kept[0] is system
    assert kept[1:] == body[len(body) - (len(kept) - 1) :]  # a suffix of the history
    assert len(kept) <= max(max_messages, 2)  # the newest message is always kept
    if len(messages) > max_messages:
        # Maximal: the whole group before the kept part would not have fitted.
        start = len(messages) - (len(kept) - 1)
        group_start = start - 1
        while messages[group_start].role == "tool":
            group_start -= 1
        assert len(kept) + (start - group_start) > max_messages


async def test_newest_group_larger_than_limit_is_kept_whole() -> None:
    """A newest tool group bigger than the limit is kept whole rather than cut or dropped."""
    group = tool_turn("big", 5)
    kept, _ = await run_memory([user("q"), answer("a"), *group], max_messages=3)
    assert kept == group


async def test_existing_orphan_tool_message_is_dropped_on_truncation() -> None:
    """A tool message answering no call in the kept history is removed with the truncation."""
    stray = ChatMessage("tool", "stray", tool_call_id="gone")
    messages = [user("q0"), user("q1"), stray, user("q2")]
    kept, events = await run_memory(list(messages), max_messages=3)
    assert kept == [user("q1"), user("q2")]
    assert events[0].removed_count == len(messages) - len(kept)


async def test_compaction_summary_after_system_message_is_kept() -> None:
    """A compaction summary right after the system message stays, standing for older history."""
    system = ChatMessage("system", "s")
    summary = ChatMessage("system", "earlier: x", name=SUMMARY_NAME)
    turns = [user(f"q{n}") for n in range(6)]
    kept, _ = await run_memory([system, summary, *turns], max_messages=4)
    assert kept == [system, summary, *turns[-2:]]


async def test_one_system_serves_many_entities() -> None:
    """Each entity is truncated to its own limit, with its own event."""
    world = World()
    events: list[ConversationTruncatedEvent] = []
    world.events.subscribe(ConversationTruncatedEvent, events.append)
    world.register_system(MemorySystem(), priority=10)
    small = world.create_entity(ConversationComponent([user(str(n)) for n in range(5)], 2))
    large = world.create_entity(ConversationComponent([user(str(n)) for n in range(5)], 4))
    untouched = world.create_entity(ConversationComponent([user("x")], 4))
    await world.process()
    assert {(e.entity_id, e.removed_count) for e in events} == {(small, 3), (large, 1)}
    conversation = world.get_component(untouched, ConversationComponent)
    assert conversation is not None
    assert len(conversation.messages) == 1


# Generated conversations ------------------------------------------------------------------


@st.composite
def conversations(draw: st.DrawFn) -> list[ChatMessage]:
    """A system message (sometimes), then user turns, answers and tool groups of 1-4 calls."""
    messages = [ChatMessage("system", "s")] if draw(st.booleans()) else []
    for index in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "answer", "tools"]))
        if kind == "user":
            messages.append(user(f"q{index}"))
        elif kind == "answer":
            messages.append(answer(f"a{index}"))
        else:
            messages.extend(tool_turn(f"t{index}", draw(st.integers(1, 4))))
    return messages


@given(conversations(), st.integers(0, 30))
def test_truncation_invariants_on_generated_conversations(
    messages: list[ChatMessage], max_messages: int
) -> None:
    """Any history and limit: pairs intact, system kept, a suffix kept, within the limit unless
    the newest group alone exceeds it."""
    kept = truncate_messages(messages, max_messages)
    check_pairs(kept)
    if len(messages) <= max_messages:
        assert kept == messages
        return
    has_system = bool(messages) and messages[0].role == "system"
    head = messages[:1] if has_system else []
    assert kept[: len(head)] == head
    tail = kept[len(head) :]
    assert tail == messages[len(messages) - len(tail) :]
    if messages[-1].role != "system":
        assert tail
        assert tail[-1] is messages[-1]
    if len(kept) > max_messages and tail:
        # Only the newest group may overflow the limit: then it is all the head is kept with.
        assert len(tail) == 1 or (tail[0].tool_calls and all(m.role == "tool" for m in tail[1:])), (
            tail
        )
