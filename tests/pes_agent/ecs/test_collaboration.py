"""CollaborationSystem: inboxes become "From …" user messages, senders named, sleepers woken."""

from __future__ import annotations

import pytest

from ecs_core import EntityId, Runner, TerminalComponent, World
from pes_agent.ecs.collaboration import CollaborationSystem, message_peer_tool, send_message
from pes_agent.ecs.components import (
    AgentIdentityComponent,
    CollaborationComponent,
    ConversationComponent,
    LLMComponent,
    PendingToolCallsComponent,
    ToolRegistryComponent,
)
from pes_agent.ecs.events import MessageDeliveredEvent
from pes_agent.ecs.messages import ChatMessage, ToolCall
from pes_agent.ecs.reasoning import ReasoningSystem
from pes_agent.ecs.tool_execution import ToolExecutionSystem
from pes_agent.errors import UsageError
from pes_agent.testing import ScriptedProvider, ScriptedResponse
from tests.pes_agent.ecs.conftest import EventLog


@pytest.fixture
def log(world: World) -> EventLog:
    """The world with CollaborationSystem [5]; the deliveries it publishes."""
    world.register_system(CollaborationSystem(), priority=5)
    return EventLog(world, MessageDeliveredEvent)


def agent(world: World, name: str | None = None, *extra: object) -> EntityId:
    """An entity with an inbox and a conversation, named `name` when given."""
    parts: list[object] = [CollaborationComponent(), ConversationComponent(), *extra]
    if name is not None:
        parts.append(AgentIdentityComponent(name))
    return world.create_entity(*parts)


def texts(world: World, entity: EntityId) -> list[str]:
    return [m.content for m in world.require_component(entity, ConversationComponent).messages]


async def test_inbox_becomes_from_messages_and_delivery_events(world: World, log: EventLog) -> None:
    """Each inbox item becomes a user message "From <sender>: <text>", in order, with one event."""
    researcher = agent(world, "researcher")
    writer = agent(world, "writer")
    send_message(world, researcher, writer, "fact one")
    send_message(world, researcher, writer, "fact two")
    await world.process()
    messages = world.require_component(writer, ConversationComponent).messages
    assert messages == [
        ChatMessage("user", "From researcher: fact one"),
        ChatMessage("user", "From researcher: fact two"),
    ]
    assert world.require_component(writer, CollaborationComponent).inbox == []
    assert log.events == [
        MessageDeliveredEvent(researcher, writer, "fact one"),
        MessageDeliveredEvent(researcher, writer, "fact two"),
    ]
    await world.process()
    assert len(log.events) == 2  # delivered once, not every tick


async def test_a_sender_without_identity_is_named_by_its_id(world: World, log: EventLog) -> None:
    """A sender with no AgentIdentityComponent appears as "entity-<id>", even once deleted."""
    sender = world.create_entity()
    recipient = agent(world)
    send_message(world, sender, recipient, "hello")
    world.delete_entity(sender)
    await world.process()
    assert texts(world, recipient) == [f"From entity-{sender}: hello"]


async def test_sending_to_a_dead_or_inboxless_entity_is_a_clear_error(world: World) -> None:
    """Sending to a deleted or inboxless recipient is a UsageError that says the fix."""
    sender = agent(world)
    gone = agent(world)
    world.delete_entity(gone)
    with pytest.raises(UsageError, match="not alive"):
        send_message(world, sender, gone, "hi")
    plain = world.create_entity(ConversationComponent())
    with pytest.raises(UsageError, match=r"add_component\(.*CollaborationComponent\(\)\)"):
        send_message(world, sender, plain, "hi")
    assert world.require_component(sender, CollaborationComponent).inbox == []


async def test_a_finished_recipient_wakes_up_and_answers_the_mail(world: World) -> None:
    """Mail lifts a "reasoning_complete" terminal, and the recipient's model answers it."""
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(CollaborationSystem(), priority=5)
    model = ScriptedProvider(["Ready.", "Thanks for the facts."])
    writer = agent(world, "writer", LLMComponent(model))
    world.require_component(writer, ConversationComponent).messages.append(
        ChatMessage("user", "Wait for facts.")
    )
    first = await Runner().run(world, until=writer, max_ticks=5)
    assert first.terminals[writer].reason == "reasoning_complete"
    researcher = agent(world, "researcher")
    send_message(world, researcher, writer, "fact")
    second = await Runner().run(world, until=writer, max_ticks=5)
    assert second.terminals[writer].reason == "reasoning_complete"
    assert texts(world, writer)[-2:] == ["From researcher: fact", "Thanks for the facts."]
    assert model.calls == 2


async def test_mail_already_in_an_inbox_wakes_a_finished_entity_when_read(
    world: World, log: EventLog
) -> None:
    """Mail that reached the inbox before the entity finished still lifts its terminal."""
    sender = agent(world, "boss")
    done = agent(world, None, TerminalComponent("reasoning_complete"))
    world.require_component(done, CollaborationComponent).inbox.append((sender, "one more"))
    await world.process()
    assert texts(world, done) == ["From boss: one more"]
    assert not world.has_component(done, TerminalComponent)


async def test_an_entity_ended_otherwise_keeps_its_mail(world: World, log: EventLog) -> None:
    """A recipient ended for a reason mail does not lift keeps the mail in its inbox, unread."""
    failed = agent(world, None, TerminalComponent("reasoning_failed"))
    sender = agent(world)
    send_message(world, sender, failed, "are you there?")
    await world.process()
    assert texts(world, failed) == []
    assert world.require_component(failed, CollaborationComponent).inbox == [
        (sender, "are you there?")
    ]
    assert world.require_component(failed, TerminalComponent).reason == "reasoning_failed"
    assert log.events == []


async def test_mail_waits_until_the_tool_round_is_over(world: World, log: EventLog) -> None:
    """No user message lands between tool calls and their results; it follows the round."""
    busy = agent(world, None, PendingToolCallsComponent([ToolCall("c1", "add", {})]))
    send_message(world, agent(world, "boss"), busy, "status?")
    await world.process()
    assert texts(world, busy) == []
    world.remove_component(busy, PendingToolCallsComponent)
    await world.process()
    assert texts(world, busy) == ["From boss: status?"]


async def test_an_entity_without_conversation_keeps_its_inbox(world: World, log: EventLog) -> None:
    """Mail for a code-driven entity (no ConversationComponent) stays in its inbox for code."""
    reader = world.create_entity(CollaborationComponent())
    send_message(world, agent(world), reader, "data")
    await world.process()
    assert [text for _, text in world.require_component(reader, CollaborationComponent).inbox] == [
        "data"
    ]
    assert log.events == []


async def test_a_model_messages_its_peer_through_the_tool(world: World, log: EventLog) -> None:
    """message_peer(to=<peer name>) reaches the peer; an unknown name is an error result."""
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(ToolExecutionSystem(), priority=5)
    writer = agent(world, "writer")
    calls = [
        ToolCall("c1", "message_peer", {"to": "writer", "message": "draft the intro"}),
        ToolCall("c2", "message_peer", {"to": "editor", "message": "hello?"}),
    ]
    model = ScriptedProvider([ScriptedResponse(tool_calls=calls), "Done."])
    lead = agent(world, "lead", LLMComponent(model))
    world.require_component(lead, CollaborationComponent).peers.append(writer)
    world.add_component(lead, ToolRegistryComponent([message_peer_tool(world, lead)]))
    world.require_component(lead, ConversationComponent).messages.append(
        ChatMessage("user", "Get the writer going.")
    )
    await Runner().run(world, until=lead, max_ticks=6)
    assert "From lead: draft the intro" in texts(world, writer)
    replies = {
        m.tool_call_id: m.content
        for m in world.require_component(lead, ConversationComponent).messages
        if m.role == "tool"
    }
    assert replies["c1"] == "Message sent to writer."
    assert "'editor' is not one of your peers" in replies["c2"]
    assert "writer" in replies["c2"]
    assert "Your peers: writer" in model.requests[0].tools[0].description


async def test_the_tool_reports_a_peer_deleted_since(world: World) -> None:
    """A peer deleted after the tool was built is an error result, not a crash."""
    world.register_system(ToolExecutionSystem(), priority=5)
    peer = agent(world, "peer")
    sender = agent(world, "sender")
    world.require_component(sender, CollaborationComponent).peers.append(peer)
    messenger = message_peer_tool(world, sender)
    world.delete_entity(peer)
    world.add_component(sender, ToolRegistryComponent([messenger]))
    world.add_component(
        sender,
        PendingToolCallsComponent(
            [ToolCall("c1", "message_peer", {"to": str(peer), "message": "x"})]
        ),
    )
    await world.process()
    [reply] = world.require_component(sender, ConversationComponent).messages
    assert reply.tool_call_id == "c1"
    assert "not alive" in reply.content


async def test_many_entities_message_each_other_in_one_tick(world: World, log: EventLog) -> None:
    """200 entities in a ring each get their one message from their neighbour in one tick."""
    ring = [agent(world, f"a{i}") for i in range(200)]
    for i, entity in enumerate(ring):
        send_message(world, entity, ring[(i + 1) % len(ring)], f"hi from {i}")
    await world.process()
    for i, entity in enumerate(ring):
        sender = (i - 1) % len(ring)
        assert texts(world, entity) == [f"From a{sender}: hi from {sender}"]
    assert len(log.events) == 200


async def test_one_system_serves_two_worlds_without_mixing_them() -> None:
    """A system instance registered in two worlds delivers each world's mail in that world only."""
    system = CollaborationSystem()
    worlds = [World(), World()]
    for world in worlds:
        world.register_system(system, priority=5)
    recipients = []
    for n, world in enumerate(worlds):
        recipient = agent(world)
        send_message(world, agent(world, f"sender{n}"), recipient, f"for world {n}")
        recipients.append(recipient)
    for world in worlds:
        await world.process()
    for n, (world, recipient) in enumerate(zip(worlds, recipients, strict=True)):
        assert texts(world, recipient) == [f"From sender{n}: for world {n}"]
